// A dispatch unit's backpressure: holds that any thread sets (a downstream's
// 429 with Retry-After, backoffs.hpp) and the operator may end, as the
// dispatcher sees them at each poll, and the climb back after one
// (resume_ramp.hpp) from the rate the unit was refused at.
#pragma once

#include <conveyor/clock.hpp>

#include "queue_bucket.hpp"
#include "resume_ramp.hpp"

#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>

namespace conveyor {

class UnitHold {
 public:
  // No claim before until (a later hold extends it, an earlier one is
  // ignored); began is when the hold was set. Any thread.
  void hold(SteadyTime until, SteadyTime began);
  // The operator ended the hold: no ramp after it. Any thread.
  void clear();

  // Dispatcher thread. Whether the unit is held at now: then the hold's end.
  // A hold seen for the first time empties bucket (when given) until its
  // end, so no tokens are banked for a downstream that asked to wait; once
  // it is over, a ResumeRamp paces the unit from the rate it was refused at.
  // dispatched is the unit's count of dispatched jobs (the rate an unlimited
  // unit was refused at is what it was sending); queue names it in logs.
  std::optional<SteadyTime> check(SteadyTime now, QueueBucket* bucket, uint64_t dispatched,
                                  std::string_view queue);
  // Renews the sample of the sending rate once a second, outside holds.
  // Dispatcher thread.
  void sample(SteadyTime now, uint64_t dispatched);
  // The pace after a hold, while the unit climbs back; null otherwise.
  // Dispatcher thread.
  ResumeRamp* ramp() { return ramp_ ? &*ramp_ : nullptr; }
  void end_ramp() { ramp_.reset(); }

 private:
  // Jobs/s dispatched lately: over the last sample, or since it (counted
  // over at least a second), whichever is more.
  double sending_rate(SteadyTime now, uint64_t dispatched) const;

  // Set by any thread. until_ns_: steady ns of the hold's end (0: none).
  std::atomic<int64_t> until_ns_{0};
  std::atomic<int64_t> began_ns_{0};
  std::atomic<bool> cleared_{false};

  // Owned by the dispatcher thread.
  bool held_ = false;       // a hold was seen and has not ended yet
  int64_t applied_ns_ = 0;  // the latest hold seen (and written into the bucket)
  std::optional<ResumeRamp> ramp_;
  double refused_rate_ = 0;  // the rate the unit was last refused at (0: unknown)
  SteadyTime sample_at_{};
  uint64_t sample_dispatched_ = 0;
  double sampled_rate_ = 0;  // jobs/s over the sample before the current one
};

}  // namespace conveyor
