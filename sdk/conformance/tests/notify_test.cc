// CONVEYOR_CAP_NOTIFY: wait_for_notification wakes waiters "without polling".
#include "fixture.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>

namespace conveyor::conformance {
namespace {

class Notify : public ConformanceTest {};

using Clock = std::chrono::steady_clock;
constexpr auto kBound = std::chrono::seconds(20);  // generous: a notification takes milliseconds
constexpr int64_t kWaitUs = 100'000;

// Waits on `waiter` (on its own thread, as the host does) until a
// notification matching `match` arrives, re-running `trigger` every 250 ms:
// when a plugin starts listening is its own business, so one early trigger
// may fall before the first wait. Returns whether the notification came
// within kBound.
bool notified(Handle& waiter, const std::function<bool(const NotificationCopy&)>& match,
              const std::function<void()>& trigger, std::string* seen) {
  std::atomic<bool> got{false};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::thread t([&] {
    while (!stop.load() && !got.load()) {
      std::vector<NotificationCopy> notes;
      Status s = waiter.wait_for_notification(kWaitUs, &notes);
      if (!s.ok() && s.code != CONVEYOR_E_UNAVAILABLE) {
        ADD_FAILURE() << s;
        return;
      }
      std::lock_guard lock(mu);
      for (const NotificationCopy& n : notes) {
        *seen += "(kind " + std::to_string(n.kind) + ", queue '" + n.queue + "') ";
        if (match(n)) got.store(true);
      }
    }
  });
  const auto deadline = Clock::now() + kBound;
  while (!got.load() && Clock::now() < deadline) {
    try {
      trigger();
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
      break;
    }
    for (int i = 0; i < 50 && !got.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop.store(true);
  t.join();
  return got.load();
}

TEST_F(Notify, WaitReturnsOkAfterTheTimeout) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_NOTIFY);
  auto h = open();
  const auto start = Clock::now();
  std::vector<NotificationCopy> notes;
  Status s = h->wait_for_notification(200'000, &notes);
  const auto elapsed = Clock::now() - start;
  EXPECT_TRUE(s.ok()) << s << " (storage_plugin.h: \"Returns CONVEYOR_OK on timeout too\")";
  EXPECT_LT(elapsed, std::chrono::seconds(10)) << "a 200 ms wait took far longer";
  if (notes.empty()) {
    EXPECT_GE(elapsed, std::chrono::milliseconds(150))
        << "with nothing to report the wait returned after "
        << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()
        << " ms instead of blocking for its 200 ms timeout (storage_plugin.h: \"Blocks until at "
           "least one notification arrives or timeout_us passes\")";
  }
}

TEST_F(Notify, EnqueueWakesAWaiter) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_NOTIFY);
  auto waiter = open();
  // The change comes from another handle when the storage allows several (as
  // another process would), else from the waiter's own handle.
  std::unique_ptr<Handle> other = has(CONVEYOR_CAP_MULTI_PROCESS) ? open() : nullptr;
  Handle& changer = other ? *other : *waiter;
  std::string seen;
  EXPECT_TRUE(notified(
      *waiter,
      [](const NotificationCopy& n) { return n.kind == CONVEYOR_NOTIFY_JOBS && n.queue == "wake"; },
      [&] { changer.add(JobSpec{.queue = "wake"}); }, &seen))
      << "no CONVEYOR_NOTIFY_JOBS for queue 'wake' within " << kBound.count()
      << " s of enqueueing ready jobs" << (other ? " on another handle" : "")
      << "; seen: " << (seen.empty() ? "nothing" : seen);
}

TEST_F(Notify, RateLimitChangeWakesAWaiter) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_NOTIFY);
  auto waiter = open();
  // The change comes from another handle when the storage allows several (as
  // another process would), else from the waiter's own handle.
  std::unique_ptr<Handle> other = has(CONVEYOR_CAP_MULTI_PROCESS) ? open() : nullptr;
  Handle& changer = other ? *other : *waiter;
  std::string seen;
  int i = 0;
  EXPECT_TRUE(notified(
      *waiter,
      [](const NotificationCopy& n) {
        return n.kind == CONVEYOR_NOTIFY_RATE_LIMITS && (n.queue.empty() || n.queue == "email");
      },
      [&] { require_ok(changer.set_rate_limit("email", 1 + i++, 1, kT0)); }, &seen))
      << "no CONVEYOR_NOTIFY_RATE_LIMITS within " << kBound.count()
      << " s of setting an override; seen: " << (seen.empty() ? "nothing" : seen);
}

// ABI 1.5: a key setting is an override one level down, and changes wake
// waiters as an override's do (storage_plugin.h set_key_setting: "sends
// CONVEYOR_NOTIFY_RATE_LIMITS for the queue, as set_rate_limit").
KeySettingCopy key_weight(int weight) {
  KeySettingCopy k;
  k.queue = "keyed";
  k.target = CONVEYOR_KEY_TARGET_ONE;
  k.key = "tenant";
  k.fields = CONVEYOR_KEY_FIELD_WEIGHT;
  k.weight = static_cast<uint32_t>(weight);
  return k;
}
bool is_keyed_rate_limits(const NotificationCopy& n) {
  return n.kind == CONVEYOR_NOTIFY_RATE_LIMITS && (n.queue.empty() || n.queue == "keyed");
}

TEST_F(Notify, KeySettingChangeWakesAWaiter) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_NOTIFY);
  auto waiter = open();
  CONFORMANCE_REQUIRE_SLOT(waiter, set_key_setting);
  std::unique_ptr<Handle> other = has(CONVEYOR_CAP_MULTI_PROCESS) ? open() : nullptr;
  Handle& changer = other ? *other : *waiter;
  std::string seen;
  int i = 0;
  EXPECT_TRUE(notified(
      *waiter, is_keyed_rate_limits,
      [&] { changer.set_key(key_weight(1 + i++ % CONVEYOR_KEY_WEIGHT_MAX), kT0); }, &seen))
      << "no CONVEYOR_NOTIFY_RATE_LIMITS for queue 'keyed' within " << kBound.count()
      << " s of setting a key's weight" << (other ? " on another handle" : "")
      << "; seen: " << (seen.empty() ? "nothing" : seen);
}

TEST_F(Notify, KeySettingDeleteWakesAWaiter) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_NOTIFY);
  auto waiter = open();
  CONFORMANCE_REQUIRE_SLOT(waiter, set_key_setting);
  CONFORMANCE_REQUIRE_SLOT(waiter, delete_key_setting);
  std::unique_ptr<Handle> other = has(CONVEYOR_CAP_MULTI_PROCESS) ? open() : nullptr;
  Handle& changer = other ? *other : *waiter;
  std::string seen;
  bool woken = false;
  const auto deadline = Clock::now() + kBound;
  // Set, let the set's own notification pass, then delete: only the
  // delete's can arrive after. Repeated until it works (when a plugin starts
  // listening is its own business).
  while (!woken && Clock::now() < deadline) {
    changer.set_key(key_weight(2), kT0);
    const auto quiet_until = Clock::now() + std::chrono::seconds(1);
    while (Clock::now() < quiet_until) {
      std::vector<NotificationCopy> drained;
      require_ok(waiter->wait_for_notification(kWaitUs, &drained));
    }
    ASSERT_EQ(
        changer.clear_key("keyed", CONVEYOR_KEY_TARGET_ONE, "tenant", CONVEYOR_KEY_FIELD_WEIGHT),
        1);
    const auto until = Clock::now() + std::chrono::seconds(3);
    while (!woken && Clock::now() < until) {
      std::vector<NotificationCopy> notes;
      require_ok(waiter->wait_for_notification(kWaitUs, &notes));
      for (const NotificationCopy& n : notes) {
        seen += "(kind " + std::to_string(n.kind) + ", queue '" + n.queue + "') ";
        woken = woken || is_keyed_rate_limits(n);
      }
    }
  }
  EXPECT_TRUE(woken) << "no CONVEYOR_NOTIFY_RATE_LIMITS for queue 'keyed' within 3 s of "
                        "delete_key_setting clearing a key's weight (storage_plugin.h: \"the "
                        "notification goes out, as set_key_setting\"); seen after the deletes: "
                     << (seen.empty() ? "nothing" : seen);
}

TEST_F(Notify, PauseWakesAWaiter) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_NOTIFY);
  auto waiter = open();
  // The change comes from another handle when the storage allows several (as
  // another process would), else from the waiter's own handle.
  std::unique_ptr<Handle> other = has(CONVEYOR_CAP_MULTI_PROCESS) ? open() : nullptr;
  Handle& changer = other ? *other : *waiter;
  std::string seen;
  bool paused = false;
  EXPECT_TRUE(notified(
      *waiter,
      [](const NotificationCopy& n) {
        return n.kind == CONVEYOR_NOTIFY_QUEUE_STATE && n.queue == "held";
      },
      [&] { changer.pause("held", paused = !paused, kT0); }, &seen))
      << "no CONVEYOR_NOTIFY_QUEUE_STATE for queue 'held' within " << kBound.count()
      << " s of pausing it; seen: " << (seen.empty() ? "nothing" : seen);
}

int64_t real_wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST_F(Notify, DelayedJobWakesAWaiterWhenItComesDue) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_NOTIFY);
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_NOTIFY_DUE);
  auto waiter = open();
  std::unique_ptr<Handle> other = has(CONVEYOR_CAP_MULTI_PROCESS) ? open() : nullptr;
  Handle& changer = other ? *other : *waiter;
  constexpr int64_t kDelayUs = 1'500'000;
  std::string seen;
  bool woken_when_due = false;
  int64_t late_us = 0;
  const auto deadline = Clock::now() + kBound;
  // Re-enqueued until it works: when a plugin starts listening is its own
  // business, so the first job may be announced before anyone listens.
  while (!woken_when_due && Clock::now() < deadline) {
    std::vector<NotificationCopy> notes;
    require_ok(waiter->wait_for_notification(kWaitUs, &notes));
    const int64_t run_at = real_wall_us() + kDelayUs;
    changer.add(JobSpec{.queue = "later", .run_at_us = run_at});
    // Waits until 3 s past run_at for a wake of the queue at or after it
    // (the one at enqueue does not count: the job was not ready then).
    while (!woken_when_due && real_wall_us() < run_at + 3'000'000) {
      notes.clear();
      Status st = waiter->wait_for_notification(kWaitUs, &notes);
      ASSERT_TRUE(st.ok() || st.code == CONVEYOR_E_UNAVAILABLE) << st;
      const int64_t at = real_wall_us();
      for (const NotificationCopy& n : notes) {
        seen += "(kind " + std::to_string(n.kind) + ", queue '" + n.queue + "', " +
                std::to_string((at - run_at) / 1000) + " ms after run_at) ";
        if (n.kind == CONVEYOR_NOTIFY_JOBS && n.queue == "later" && at >= run_at) {
          woken_when_due = true;
          late_us = at - run_at;
        }
      }
    }
  }
  EXPECT_TRUE(woken_when_due)
      << "no CONVEYOR_NOTIFY_JOBS for queue 'later' once a job enqueued to run 1.5 s later came "
         "due (storage_plugin.h, CONVEYOR_CAP_NOTIFY_DUE: \"reported again ... once that run_at "
         "has come\"); seen: "
      << (seen.empty() ? "nothing" : seen);
  // Generous: a wait of kWaitUs may have started just before the time.
  EXPECT_LT(late_us, 2'000'000) << "the wake came long after run_at; seen: " << seen;
}

TEST_F(Notify, RetryJobsWakesAWaiter) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_NOTIFY);
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_NOTIFY_DUE);
  auto waiter = open();
  CONFORMANCE_REQUIRE_SLOT(waiter, retry_jobs);
  std::unique_ptr<Handle> other = has(CONVEYOR_CAP_MULTI_PROCESS) ? open() : nullptr;
  Handle& changer = other ? *other : *waiter;
  std::string seen;
  bool woken = false;
  const auto deadline = Clock::now() + kBound;
  // A cancelled job made ready again: no enqueue announces it, so only
  // retry_jobs' own notification can wake a host that polls drained queues
  // rarely. Repeated until it works (when a plugin starts listening is its
  // own business).
  while (!woken && Clock::now() < deadline) {
    const int64_t id = changer.add(JobSpec{.queue = "again"});
    require_ok(changer.cancel(id, kT0));
    // The enqueue's own notification arrives within this second: after it,
    // only a notification the retry sent is in the window.
    const auto quiet_until = Clock::now() + std::chrono::seconds(1);
    while (Clock::now() < quiet_until) {
      std::vector<NotificationCopy> drained;
      require_ok(waiter->wait_for_notification(kWaitUs, &drained));
    }
    std::vector<conveyor_status> results;
    require_ok(changer.retry_jobs({id}, kT0, &results));
    ASSERT_EQ(results, std::vector<conveyor_status>{CONVEYOR_OK});
    const auto until = Clock::now() + std::chrono::seconds(3);
    while (!woken && Clock::now() < until) {
      std::vector<NotificationCopy> notes;
      require_ok(waiter->wait_for_notification(kWaitUs, &notes));
      for (const NotificationCopy& n : notes) {
        seen += "(kind " + std::to_string(n.kind) + ", queue '" + n.queue + "') ";
        woken = woken || (n.kind == CONVEYOR_NOTIFY_JOBS && n.queue == "again");
      }
    }
  }
  EXPECT_TRUE(woken) << "no CONVEYOR_NOTIFY_JOBS for queue 'again' within 3 s of retry_jobs "
                        "making a cancelled job ready again (storage_plugin.h, "
                        "CONVEYOR_CAP_NOTIFY_DUE); seen after the retries: "
                     << (seen.empty() ? "nothing" : seen);
}

}  // namespace
}  // namespace conveyor::conformance
