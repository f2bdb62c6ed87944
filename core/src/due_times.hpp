// When a drained dispatch unit is polled again. Without notifications from
// storage, a poll interval later. With them (CONVEYOR_CAP_NOTIFY_DUE), the
// unit waits for a notification, for the times jobs this process made ready
// become due (storage does not notify those: Dispatcher::wake_at), or for the
// rare notified poll; but first it is claimed kShortPollsAfterWake more
// times a poll interval apart after each wake, the behaviour
// storage_plugin.h promises a plugin (CONVEYOR_CAP_NOTIFY_DUE).
// Owned by the dispatcher thread.
#pragma once

#include <conveyor/clock.hpp>

#include <chrono>
#include <cstdint>
#include <set>

namespace conveyor {

// After a wake (a notification, new local jobs, a freed permit) a drained
// unit is claimed this many more times a poll interval apart before it waits
// for notifications: a claim right after a notification may miss what
// storage does not show it yet (postgres-queue's claim hint, which finds an
// entry of another process only after the plugin's probe corrects it).
inline constexpr uint32_t kShortPollsAfterWake = 2;

class DueTimes {
 public:
  struct Policy {
    std::chrono::milliseconds poll_interval{1000};
    // The rare poll of a drained unit while storage notifies, jittered down
    // to half so units drained together do not poll together.
    std::chrono::milliseconds notified_poll{60000};
    // The engine's sweep stands in for the notified poll (a bound only).
    bool swept = false;
  };

  // Jobs become due at at_us (wall clock). Bounded: past kMaxDueTimes the
  // latest are dropped, and the unit keeps the short poll until they passed.
  void remember(int64_t at_us);
  // The unit was woken: the short polls start over.
  void woken() { short_polls_ = kShortPollsAfterWake; }
  // When the unit, drained at now (wall_us on the wall clock), is polled
  // again; notified: whether storage reports every job that becomes ready.
  // Forgets due times long past.
  SteadyTime next_poll(SteadyTime now, int64_t wall_us, bool notified, const Policy& policy);

 private:
  static constexpr size_t kMaxDueTimes = 64;
  std::set<int64_t> at_us_;
  int64_t dropped_until_us_ = 0;  // the latest due time dropped (0: none)
  uint32_t short_polls_ = 0;
};

}  // namespace conveyor
