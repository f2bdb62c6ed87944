#include <conveyor/internal/queue_reports.hpp>

#include <map>

namespace conveyor {

std::vector<QueueReport> build_queue_reports(
    Storage& storage, const LimitResolver& limits,
    const std::map<std::string, QueueConfig>& configured, const Metrics* metrics, int64_t now_us,
    const std::map<std::string, std::vector<KindCount>, std::less<>>* unserved) {
  std::map<std::string, QueueReport> by_name;
  // job_counts: no scan of retained jobs on an ABI 1.1 plugin (queue_stats on 1.0).
  for (QueueStats& s : storage.job_counts(now_us)) {
    std::string name = s.queue;
    by_name[name].stats = std::move(s);
  }
  auto ensure = [&](const std::string& name) {
    auto& r = by_name[name];
    if (r.stats.queue.empty()) r.stats.queue = name;
  };
  for (const auto& [name, q] : configured) ensure(name);
  for (const auto& o : limits.overrides()) ensure(o.queue);
  if (metrics) {
    for (const auto& m : metrics->snapshot()) {
      if (auto it = by_name.find(m.queue); it != by_name.end()) it->second.throttled = m.throttled;
    }
  }
  if (unserved) {
    // Only queues storage still reports: the scan may be older than the counts.
    for (const auto& [queue, kinds] : *unserved)
      if (auto it = by_name.find(queue); it != by_name.end()) it->second.unserved_kinds = kinds;
  }
  std::vector<QueueReport> out;
  out.reserve(by_name.size());
  for (auto& [name, r] : by_name) {
    r.limit = limits.resolve(name);
    const int64_t ready = r.stats.oldest_pending_run_at_us;
    if (ready > 0 && now_us > ready) r.oldest_pending_age_seconds = (now_us - ready) / 1e6;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace conveyor
