// NotificationPump against the in-memory plugin (which notifies) behind a
// FaultInjectingStorage that watches for calls made while a wait is open.
#include "notification_pump.hpp"
#include "testing/fault_injecting_storage.hpp"
#include "testing/sync.hpp"

#include <conveyor/clock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::FaultInjectingStorage;
using testing::StorageOp;

TEST(NotificationPump, WakeUpsRunAfterTheWaitNeverInsideIt) {
  auto storage = std::make_shared<FaultInjectingStorage>(testing::open_memory_storage());
  ASSERT_TRUE(NotificationPump::supported(*storage));
  // The pump thread is the only one waiting: a storage call from it while
  // its wait is open would be a call from inside the plugin's callback.
  std::atomic<int> waits_open{0};
  std::atomic<int> calls_inside{0};
  storage->set_hook(StorageOp::kWaitForNotification, [&] { ++waits_open; });
  storage->set_after_hook(StorageOp::kWaitForNotification, [&] { --waits_open; });
  storage->set_hook(StorageOp::kChangeMarker, [&] { calls_inside += waits_open.load() > 0; });
  storage->set_hook(StorageOp::kListRateLimits, [&] { calls_inside += waits_open.load() > 0; });

  std::mutex mu;
  std::set<std::string> woken;
  std::atomic<int> limit_changes{0};
  NotificationPump pump(*storage, {[&](const std::string& q) {
                                     std::lock_guard lock(mu);
                                     woken.insert(q);
                                   },
                                   [&] {
                                     // What the engine's refresh does.
                                     storage->change_marker();
                                     storage->list_rate_limits();
                                     ++limit_changes;
                                   }});
  pump.start();
  const int64_t now = SystemClock::instance().wall_now_us();
  std::vector<NewJob> jobs(1);
  jobs[0].queue = "mail";
  jobs[0].kind = "k";
  jobs[0].run_at_us = now;
  storage->inner().enqueue(jobs, now);
  storage->inner().set_rate_limit("mail", RateLimit{3, 3}, now);
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mu);
    return woken.count("mail") == 1 && limit_changes.load() >= 1;
  }));
  pump.stop();
  EXPECT_EQ(calls_inside.load(), 0);
  EXPECT_GE(storage->calls(StorageOp::kChangeMarker), 1u);
}

}  // namespace
}  // namespace conveyor
