#include "key_report.hpp"

#include <conveyor/validation.hpp>

#include <algorithm>
#include <map>
#include <string>

namespace conveyor {

KeysReport build_keys_report(Storage& storage, const Config& config, const LimitResolver& limits,
                             std::string_view queue, uint32_t limit,
                             const std::optional<std::vector<KeyTurns::KeyView>>& live,
                             int64_t now_us) {
  validate_queue_name(queue);
  if (limit == 0 || limit > kKeysMax)
    throw ValidationError("limit", "limit must be 1.." + std::to_string(kKeysMax) + " keys, got " +
                                       std::to_string(limit));
  KeysReport report;
  report.queue = std::string(queue);
  report.live = live.has_value();
  KeyTurns::Limits configured;
  if (const auto it = config.queues.find(report.queue); it != config.queues.end()) {
    const QueueConfig& q = it->second;
    configured = {q.key_rate_limit, q.key_max_workers};
    report.key_rate_limit = q.key_rate_limit;
    report.key_max_workers = q.key_max_workers;
    report.fairness = q.fairness;
    if (q.key_rate_limit || q.key_max_workers) report.limit_source = LimitSource::kQueueConfig;
  }
  const std::shared_ptr<const LimitResolver::KeyOverrides> overrides = limits.key_overrides(queue);
  if (overrides->every_key) {
    report.key_rate_limit = overrides->every_key;
    report.limit_source = LimitSource::kEveryKeyOverride;
  }

  // Every key with ready jobs, page by page, up to kKeysScanMax.
  std::map<std::string, KeyReport, std::less<>> keys;
  std::optional<std::string> after;
  while (true) {
    if (keys.size() >= kKeysScanMax) {
      report.complete = false;  // (or exactly kKeysScanMax keys: not asked)
      break;
    }
    const uint32_t page =
        std::min<uint32_t>(KeyTurns::kPageKeys, kKeysScanMax - static_cast<uint32_t>(keys.size()));
    std::vector<Storage::ReadyKey> listed =
        storage.list_ready_keys(queue, after, page, kKeyReadyCountCap, now_us);
    for (Storage::ReadyKey& r : listed) {
      KeyReport& k = keys[r.key];
      k.key = r.key;
      k.ready = r.ready;
      k.ready_capped = r.ready >= kKeyReadyCountCap;
    }
    if (listed.size() < page) break;
    after = listed.back().key;
  }
  // What runs here, and which keys' buckets are empty; storage's ready
  // counts are fresher than the unit's.
  if (live) {
    for (const KeyTurns::KeyView& v : *live) {
      if (v.running == 0 && !v.throttled) continue;
      auto it = keys.find(v.key);
      if (it == keys.end()) {
        if (v.running == 0) continue;  // throttled with nothing ready: nothing waits
        KeyReport fresh;
        fresh.key = v.key;
        it = keys.emplace(v.key, std::move(fresh)).first;
      }
      it->second.running = v.running;
      it->second.throttled = v.throttled;
    }
  }

  for (auto& [key, k] : keys) {
    const KeyTurns::KeyLimit l = KeyTurns::resolve(configured, *overrides, limits.enabled(), key);
    k.limit = l.limit;
    k.limit_source = l.source;
    k.weight = l.weight;
  }

  report.total_keys = keys.size();
  std::vector<KeyReport> all;
  all.reserve(keys.size());
  for (auto& [key, k] : keys) all.push_back(std::move(k));
  const auto busier = [](const KeyReport& a, const KeyReport& b) {
    if (a.ready != b.ready) return a.ready > b.ready;
    if (a.running != b.running) return a.running > b.running;
    return a.key < b.key;
  };
  const size_t n = std::min<size_t>(limit, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(), busier);
  all.resize(n);
  report.keys = std::move(all);
  return report;
}

}  // namespace conveyor
