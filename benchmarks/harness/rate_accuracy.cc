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

WindowExcess worst_window_excess(const std::vector<int64_t>& starts_ns, const RateLimit& limit) {
  // For the window of starts i..j: (j - i + 1) - burst - rate * (t_j - t_i)
  // = (j - rate * t_j) - (i - rate * t_i) + 1 - burst: keep the smallest
  // i - rate * t_i seen so far. Times relative to the first start keep the
  // doubles small.
  WindowExcess w;
  if (starts_ns.empty()) return w;
  const double rate_per_ns = limit.rate_per_sec / 1e9;
  const int64_t t0 = starts_ns.front();
  double best_start = 0;  // min over i <= j of i - rate * t_i
  size_t best_i = 0;
  for (size_t j = 0; j < starts_ns.size(); ++j) {
    const double tj = static_cast<double>(starts_ns[j] - t0);
    const double here = static_cast<double>(j) - rate_per_ns * tj;
    if (here < best_start || j == 0) {
      best_start = here;
      best_i = j;
    }
    const double excess = here - best_start + 1 - static_cast<double>(limit.burst);
    if (excess > 1e-9 && excess > w.excess) {
      w.excess = excess;
      w.at_s = static_cast<double>(starts_ns[j]) / 1e9;
      w.length_s = static_cast<double>(starts_ns[j] - starts_ns[best_i]) / 1e9;
    }
  }
  return w;
}

}  // namespace conveyor::bench
