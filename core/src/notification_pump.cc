#include "notification_pump.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

namespace conveyor {
namespace {
constexpr int64_t kWaitUs = 200'000;
constexpr auto kPauseAfterFailure = std::chrono::milliseconds(500);
}  // namespace

NotificationPump::NotificationPump(Storage& storage, Sink sink)
    : storage_(storage),
      sink_(std::move(sink)),
      notifies_due_(supported(storage) && storage.has_capability(CONVEYOR_CAP_NOTIFY_DUE)) {}

NotificationPump::~NotificationPump() { stop(); }

bool NotificationPump::supported(const Storage& storage) {
  return storage.has_capability(CONVEYOR_CAP_NOTIFY) &&
         storage.has_slot(StorageSlot::kWaitForNotification);
}

void NotificationPump::start() {
  running_.store(true);
  thread_ = std::thread([this] { loop(); });
}

bool NotificationPump::reports_due_jobs() const {
  if (!notifies_due_ || !running_.load() || stop_.load()) return false;
  const int64_t failed = failed_at_ns_.load(std::memory_order_acquire);
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  return failed == std::numeric_limits<int64_t>::min() ||
         now - failed > std::chrono::nanoseconds(kTrustAfterFailure).count();
}

void NotificationPump::stop() {
  {
    MutexLock lock(mu_);
    stop_.store(true);
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void NotificationPump::loop() {
  std::set<std::string> queues;
  bool limits = false;
  while (!stop_.load()) {
    try {
      // Only record here: this runs inside the plugin's callback.
      storage_.wait_for_notification(kWaitUs, [&](int32_t kind, std::string_view queue) {
        if (kind == CONVEYOR_NOTIFY_RATE_LIMITS)
          limits = true;
        else if (!queue.empty())
          queues.emplace(queue);
      });
    } catch (const std::exception& e) {
      failed_at_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                          std::memory_order_release);
      spdlog::warn("waiting for storage notifications failed: {}", e.what());
      MutexLock lock(mu_);
      cv_.wait_for(mu_, kPauseAfterFailure, [this] { return stop_.load(); });
    }
    // The wait has returned: the plugin holds nothing of ours now.
    if (limits) sink_.limits_changed();
    for (const std::string& q : queues) sink_.queue_changed(q);
    limits = false;
    queues.clear();
  }
}

}  // namespace conveyor
