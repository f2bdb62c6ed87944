// ResumeRamp: how a queue resumes after a backpressure hold, so that it does
// not release a full bucket and every free worker at once into the
// downstream that just refused it (a limiter that counts refused requests
// too would never empty its window).
//
// The queue resumes at half the rate it was refused at and doubles each
// second up to 90% of it (the knee), then grows by 1% of it (at least
// 0.1 job/s) each second beyond: ten seconds to where it was refused, so
// refusals (each a hold in which nothing is delivered) stay rare. A refusal while ramping starts a
// new hold and, after it, a new ramp from half the rate reached: so the rate settles just under
// what the downstream accepts, as TCP's congestion window does. When the refused rate is unknown
// (an unlimited queue's first refusal), it starts at kFloor and doubles each second until refused
// (slow start).
//
// The ramp ends when its rate reaches the queue's own limit (the ceiling),
// or, without one, once it has not held the queue back for kUnboundFor
// (the workers or the backlog are what bound it then).
//
// Not thread-safe: the dispatcher thread's.
#pragma once

#include <conveyor/clock.hpp>

#include <chrono>
#include <cstdint>

namespace conveyor {

class ResumeRamp {
 public:
  static constexpr double kFloor = 1.0;  // jobs/s, the slowest a ramp goes
  static constexpr std::chrono::seconds kUnboundFor{2};

  // refused_rate: jobs/s at which the downstream refused (0: unknown);
  // ceiling: the queue's own rate limit (0: none).
  ResumeRamp(double refused_rate, double ceiling, SteadyTime now);

  // The rate the ramp allows at now (jobs/s). Pure.
  double rate(SteadyTime now) const;
  // Takes up to n jobs' worth of pace at now; how many were taken.
  uint32_t take(uint32_t n, SteadyTime now);
  // Gives back n of what take gave (the queue's bucket had no tokens for them).
  void give_back(uint32_t n, SteadyTime now);
  // How long from now until take can give one.
  std::chrono::nanoseconds time_until_next(SteadyTime now) const;
  // Whether the queue no longer needs the ramp (see above).
  bool finished(SteadyTime now) const;

 private:
  // Jobs taken at once at most at rate: about a tenth of a second's worth.
  static double burst_of(double rate);

  double start_rate_, knee_, step_, ceiling_;
  SteadyTime started_;
  SteadyTime bound_at_;  // the last take that found fewer than asked
  // The pace as a virtual schedule (GCRA): the time the next job is due if
  // jobs were sent evenly; the rate may change at any take without losing
  // the progress made towards the next job.
  SteadyTime next_due_;
};

}  // namespace conveyor
