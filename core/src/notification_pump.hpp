// NotificationPump: waits on storage's notifications (plugins with
// CONVEYOR_CAP_NOTIFY and the wait_for_notification slot) on a thread it
// owns and turns each into a wake-up. The plugin's callback only records
// what arrived; the wake-ups run after wait_for_notification returned, so
// the host never calls into the handle, or into anything that may, from
// inside a callback (the plugin may hold its own locks there).
//
// Thread-safety: start() and stop() from one owner.
#pragma once

#include <conveyor/storage.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
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
  void stop();

 private:
  void loop();

  Storage& storage_;
  const Sink sink_;
  const bool notifies_due_;
  std::atomic<bool> running_{false};
  // steady_clock ns of the last failed wait (min: none).
  std::atomic<int64_t> failed_at_ns_{std::numeric_limits<int64_t>::min()};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;  // the pause after a failed wait
  std::thread thread_;
};

}  // namespace conveyor
