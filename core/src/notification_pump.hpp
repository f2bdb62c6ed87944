// NotificationPump: waits on storage's notifications (plugins with
// CONVEYOR_CAP_NOTIFY and the wait_for_notification slot) on a thread it
// owns and turns each into a wake-up. The plugin's callback only records
// what arrived; the wake-ups run after wait_for_notification returned, so
// the host never calls into the handle, or into anything that may, from
// inside a callback (the plugin may hold its own locks there).
//
// Thread-safety: start() and stop() from one owner.
#pragma once

#include <conveyor/internal/mutex.hpp>
#include <conveyor/internal/storage.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <thread>

namespace conveyor {

class NotificationPump {
 public:
  struct Sink {
    std::function<void(const std::string& queue)> queue_changed;  // new jobs or a new queue
    std::function<void()> limits_changed;                         // overrides changed
  };
  NotificationPump(Storage& storage, Sink sink);
  ~NotificationPump();  // stop()
  NotificationPump(const NotificationPump&) = delete;
  NotificationPump& operator=(const NotificationPump&) = delete;

  // Whether storage can notify: the capability and the slot.
  static bool supported(const Storage& storage);

  // Whether, right now, a queue told nothing has no job that became ready
  // by enqueue: storage reports delayed jobs coming due
  // (CONVEYOR_CAP_NOTIFY_DUE), the pump runs, and no wait failed in the last
  // kTrustAfterFailure (notifications sent while a wait failed are lost; the
  // plugin's catch-up covers due jobs only). Any thread.
  bool reports_due_jobs() const;
  static constexpr std::chrono::seconds kTrustAfterFailure{30};

  void start();
  // Returns within one wait (200 ms) plus the sink's work. Idempotent.
  void stop() EXCLUDES(mu_);

 private:
  void loop();

  // Constant after construction.
  Storage& storage_;
  const Sink sink_;
  const bool notifies_due_;

  // Atomic: any thread.
  std::atomic<bool> running_{false};
  // steady_clock ns of the last failed wait (min: none).
  std::atomic<int64_t> failed_at_ns_{std::numeric_limits<int64_t>::min()};
  std::atomic<bool> stop_{false};

  // mu_ guards no data: it is cv_'s, so that stop() setting stop_ cannot
  // slip between the pause's check of it and its wait.
  Mutex mu_;
  CondVar cv_;  // the pause after a failed wait

  // Owned by the owner thread (start() and stop()).
  std::thread thread_;
};

}  // namespace conveyor
