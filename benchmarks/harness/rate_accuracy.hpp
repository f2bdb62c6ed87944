// How well a rate-limited queue kept to its limit, from the times its jobs
// started.
//
// starts_ns are handler start times in nanoseconds since the limit began (the
// engine's start, which is no later than the bucket's creation). A handler
// starts after its job was claimed, and a job is claimed after its token was
// taken, so counting starts up to t can only under-count what the limiter let
// through by t: the bound below is checked soundly, with no tolerance.
#pragma once

#include <conveyor/rate_limit.hpp>

#include <cstdint>
#include <vector>

namespace conveyor::bench {

struct RateAnalysis {
  uint64_t started = 0;
  // The steady rate: jobs per second between the first start at or after
  // min(1 s, window / 4) and the last start. The start-up (the burst, and a
  // first claim that may be slow on a cold connection, then catches up within
  // the bound) is left out; exact start times, so no counting quantisation.
  // 0 when too few jobs started.
  double achieved_per_sec = 0;
  double error_pct = 0;  // (achieved - rate) / rate * 100
  // (started - burst) / (t_last - t_first): the rate after the initial burst,
  // start-up included (a slow first claim makes it read high).
  double overall_per_sec = 0;
  // max over the k-th start at t of k - (burst + rate * t), or 0: how far the
  // queue ever got ahead of the contract. Must be 0.
  double worst_excess = 0;
  double worst_excess_at_s = 0;
  double first_start_s = 0;
};

// starts_ns must be sorted ascending. Starts after window_ns are ignored.
RateAnalysis analyze_rate(const std::vector<int64_t>& starts_ns, const RateLimit& limit,
                          int64_t window_ns);

// The bound in every window, not only those from the bucket's start (a
// fleet's processes start at different times): the largest
// k - (burst + rate * t) over every k consecutive starts spanning t, or 0
// when none exceeds it. starts_ns sorted ascending; O(n).
struct WindowExcess {
  double excess = 0;    // jobs beyond the bound
  double at_s = 0;      // where the worst window ends (s, on starts_ns' clock)
  double length_s = 0;  // its length
};
WindowExcess worst_window_excess(const std::vector<int64_t>& starts_ns, const RateLimit& limit);

}  // namespace conveyor::bench
