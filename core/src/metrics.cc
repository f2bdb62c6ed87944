#include <conveyor/internal/metrics.hpp>

#include <algorithm>
#include <cctype>

namespace conveyor {

void Histogram::observe(double seconds) {
  if (!(seconds >= 0)) seconds = 0;
  size_t i = std::lower_bound(kBounds.begin(), kBounds.end(), seconds) - kBounds.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  for (size_t i = 0; i < buckets_.size(); ++i)
    s.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
  s.count = count_.load(std::memory_order_relaxed);
  s.sum = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return s;
}

QueueCounters& Metrics::queue(std::string_view name) {
  MutexLock lock(mu_);
  auto it = queues_.find(name);
  if (it == queues_.end())
    it = queues_.emplace(std::string(name), std::make_unique<QueueCounters>()).first;
  return *it->second;
}

std::vector<QueueCountersSnapshot> Metrics::snapshot() const {
  MutexLock lock(mu_);
  std::vector<QueueCountersSnapshot> out;
  out.reserve(queues_.size());
  for (const auto& [name, c] : queues_) {
    QueueCountersSnapshot s;
    s.queue = name;
    s.enqueued = c->enqueued.load(std::memory_order_relaxed);
    s.dispatched = c->dispatched.load(std::memory_order_relaxed);
    s.completed = c->completed.load(std::memory_order_relaxed);
    s.failed = c->failed.load(std::memory_order_relaxed);
    s.retried = c->retried.load(std::memory_order_relaxed);
    s.throttled = c->throttled.load(std::memory_order_relaxed);
    s.claims = c->claims.load(std::memory_order_relaxed);
    s.fleet_swaps = c->fleet_swaps.load(std::memory_order_relaxed);
    s.fleet_conflicts = c->fleet_conflicts.load(std::memory_order_relaxed);
    s.leases_lost = c->leases_lost.load(std::memory_order_relaxed);
    s.rescued = c->rescued.load(std::memory_order_relaxed);
    s.backoffs = c->backoffs.load(std::memory_order_relaxed);
    s.key_throttled = c->key_throttled.load(std::memory_order_relaxed);
    s.timed_out = c->timed_out.load(std::memory_order_relaxed);
    s.pickup_latency = c->pickup_latency.snapshot();
    s.duration = c->duration.snapshot();
    out.push_back(std::move(s));
  }
  return out;
}

std::atomic<uint64_t>& Metrics::storage_errors(std::string_view operation) {
  MutexLock lock(mu_);
  auto it = storage_errors_.find(operation);
  if (it == storage_errors_.end())
    it = storage_errors_.emplace(std::string(operation), std::make_unique<std::atomic<uint64_t>>(0))
             .first;
  return *it->second;
}

std::vector<std::pair<std::string, uint64_t>> Metrics::storage_errors_snapshot() const {
  MutexLock lock(mu_);
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& [name, n] : storage_errors_)
    out.emplace_back(name, n->load(std::memory_order_relaxed));
  return out;
}

std::set<std::string, std::less<>> Metrics::keep_series_queues(
    const std::vector<std::string>& ranked, size_t limit) {
  MutexLock lock(mu_);
  for (auto it = ranked.begin(); it != ranked.end() && series_queues_.size() < limit; ++it)
    series_queues_.insert(*it);
  return series_queues_;
}

std::string operation_label(std::string_view text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u))
      out += static_cast<char>(std::tolower(u));
    else if (!out.empty() && out.back() != '_')
      out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

}  // namespace conveyor
