#include "key_accuracy.hpp"

#include "rate_accuracy.hpp"
#include "sample_stats.hpp"

#include <algorithm>
#include <limits>

namespace conveyor::bench {

KeyStartLog::KeyStartLog(size_t capacity)
    : t_ns_(std::make_unique<std::atomic<int64_t>[]>(capacity)),
      key_(std::make_unique<std::atomic<uint32_t>[]>(capacity)),
      capacity_(capacity) {}

void KeyStartLog::record(uint32_t key, int64_t t_ns) noexcept {
  const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
  if (i >= capacity_) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  t_ns_[i].store(t_ns, std::memory_order_relaxed);
  key_[i].store(key, std::memory_order_relaxed);
}

size_t KeyStartLog::size() const { return std::min(next_.load(), capacity_); }

std::vector<KeyStart> KeyStartLog::entries() const {
  std::vector<KeyStart> out(size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] =
        KeyStart{key_[i].load(std::memory_order_relaxed), t_ns_[i].load(std::memory_order_relaxed)};
  return out;
}

KeyAccuracy analyze_keys(std::span<const KeyStart> starts, uint32_t keys, const RateLimit& per_key,
                         int64_t window_from_ns, int64_t window_to_ns) {
  KeyAccuracy a;
  a.started = starts.size();
  std::vector<std::vector<int64_t>> by_key(keys);
  for (const KeyStart& s : starts)
    if (s.key < keys) by_key[s.key].push_back(s.t_ns);
  constexpr int64_t kAll = std::numeric_limits<int64_t>::max();
  std::vector<double> counts;
  counts.reserve(keys);
  uint64_t in_window = 0;
  for (uint32_t k = 0; k < keys; ++k) {
    std::vector<int64_t>& t = by_key[k];
    std::sort(t.begin(), t.end());
    const auto from = std::lower_bound(t.begin(), t.end(), window_from_ns);
    const auto to = std::upper_bound(t.begin(), t.end(), window_to_ns);
    const uint64_t n = to > from ? static_cast<uint64_t>(to - from) : 0;
    counts.push_back(static_cast<double>(n));
    in_window += n;
    if (t.empty()) continue;
    a.worst_excess_from_start =
        std::max(a.worst_excess_from_start, analyze_rate(t, per_key, kAll).worst_excess);
    const int64_t first = t.front();
    for (int64_t& v : t) v -= first;
    const double excess = analyze_rate(t, per_key, kAll).worst_excess;
    if (excess > a.worst_excess_from_first) {
      a.worst_excess_from_first = excess;
      a.worst_key = k;
    }
  }
  if (window_to_ns > window_from_ns)
    a.jobs_per_sec =
        static_cast<double>(in_window) / (static_cast<double>(window_to_ns - window_from_ns) / 1e9);
  a.count_min = min_of(counts);
  a.count_max = max_of(counts);
  a.count_median = median(counts);
  return a;
}

}  // namespace conveyor::bench
