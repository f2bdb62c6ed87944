// The dispatcher's timers and wake-ups: when each unit is next due, and the
// wake-ups other threads post for units (a freed permit or worker slot, new
// jobs, a cleared hold, a due time), which the dispatcher thread collects at
// the start of each pass (begin_pass) and sleeps on between passes (wait).
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/internal/mutex.hpp>

#include "dispatch_unit.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <set>
#include <stop_token>
#include <utility>
#include <vector>

namespace conveyor {

class UnitScheduler {
 public:
  // Any thread. Makes r due at the next pass, and interrupts the wait.
  void wake(QueueRunner& r) EXCLUDES(mu_);
  // Any thread. Jobs of r become ready at at_us (wall clock).
  void due_at(QueueRunner& r, int64_t at_us) EXCLUDES(mu_);
  // Any thread. Ends the dispatcher's current or next wait.
  void interrupt() EXCLUDES(mu_);
  // Dispatcher thread. r waits for an engine-wide worker slot. slot_free
  // is asked again once r is listed, so a slot freed between the caller's
  // check and the listing wakes it (paired with slot_freed's check).
  void wait_for_slot(QueueRunner& r, const std::function<bool()>& slot_free) EXCLUDES(mu_);
  // Any thread, after freeing a worker slot: wakes the units waiting for
  // one. No lock when none waits.
  void slot_freed() EXCLUDES(mu_);

  // Dispatcher thread. Moves r's timer to at most at; why says why it waits
  // when the timer moved.
  void schedule_by(QueueRunner& r, SteadyTime at, WaitReason why) EXCLUDES(mu_);
  // Dispatcher thread. Takes r's timer off when it is due by now; whether it was.
  bool take_if_due(QueueRunner& r, SteadyTime now) EXCLUDES(mu_);

  // Dispatcher thread, at the start of a pass: the woken units become due
  // now (woken(r) is called for each), the posted due times are returned,
  // and the wait is no longer interrupted. Whatever is posted after this
  // call interrupts the next wait, so nothing is lost.
  std::vector<std::pair<QueueRunner*, int64_t>> begin_pass(
      SteadyTime now, const std::function<void(QueueRunner&)>& woken) EXCLUDES(mu_);
  // Dispatcher thread. The units due by now, their timers taken off.
  std::vector<QueueRunner*> take_due(SteadyTime now) EXCLUDES(mu_);
  // Dispatcher thread. When the next unit is due: now if one was woken
  // since begin_pass, SteadyTime::max() when none is scheduled.
  SteadyTime next_due(SteadyTime now) EXCLUDES(mu_);
  // Dispatcher thread. Sleeps until until (real clock), an interrupt or a
  // stop request.
  void wait(SteadyTime until, std::stop_token stop) EXCLUDES(mu_);

 private:
  void schedule(QueueRunner& r, SteadyTime at) REQUIRES(mu_);
  void wake_slot_waiters() REQUIRES(mu_);

  Mutex mu_;
  CondVar cv_;
  // A unit's timer fields (QueueRunner::due, scheduled) are written only by
  // the dispatcher thread, with mu_ held, next to timers_.
  std::set<std::pair<SteadyTime, QueueRunner*>> timers_ GUARDED_BY(mu_);
  std::vector<QueueRunner*> woken_ GUARDED_BY(mu_);
  std::vector<QueueRunner*> waiting_slot_ GUARDED_BY(mu_);
  std::vector<std::pair<QueueRunner*, int64_t>> due_inbox_ GUARDED_BY(mu_);
  bool interrupted_ GUARDED_BY(mu_) = false;
  // Whether waiting_slot_ has units: read without the lock by slot_freed.
  std::atomic<bool> has_slot_waiters_{false};
};

}  // namespace conveyor
