#include "rate_accuracy.hpp"

#include <algorithm>

namespace conveyor::bench {

RateAnalysis analyze_rate(const std::vector<int64_t>& starts_ns, const RateLimit& limit,
                          int64_t window_ns) {
  RateAnalysis a;
  const auto end = std::upper_bound(starts_ns.begin(), starts_ns.end(), window_ns);
  const size_t n = static_cast<size_t>(end - starts_ns.begin());
  a.started = n;
  if (n == 0) return a;
  a.first_start_s = static_cast<double>(starts_ns.front()) / 1e9;
  for (size_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(starts_ns[i]) / 1e9;
    const double excess =
        static_cast<double>(i + 1) - (static_cast<double>(limit.burst) + limit.rate_per_sec * t);
    // Doubles carry the bound; 1e-9 job is far below one job and far above rounding.
    if (excess > 1e-9 && excess > a.worst_excess) {
      a.worst_excess = excess;
      a.worst_excess_at_s = t;
    }
  }
  if (n > limit.burst + 1) {
    const double span_s = static_cast<double>(starts_ns[n - 1] - starts_ns.front()) / 1e9;
    if (span_s > 0) a.overall_per_sec = static_cast<double>(n - limit.burst) / span_s;
  }
  const int64_t steady_from = std::min<int64_t>(1'000'000'000, window_ns / 4);
  const size_t first = static_cast<size_t>(std::lower_bound(starts_ns.begin(), end, steady_from) -
                                           starts_ns.begin());
  if (first + 1 < n && starts_ns[n - 1] > starts_ns[first]) {
    a.achieved_per_sec = static_cast<double>(n - 1 - first) /
                         (static_cast<double>(starts_ns[n - 1] - starts_ns[first]) / 1e9);
    a.error_pct = (a.achieved_per_sec - limit.rate_per_sec) / limit.rate_per_sec * 100;
  }
  return a;
}

}  // namespace conveyor::bench
