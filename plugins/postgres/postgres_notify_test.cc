// LISTEN/NOTIFY through wait_for_notification: enqueues, overrides and
// pause/resume made through one handle wake a waiter on another at once.
#include "pg_test_support.hpp"

#include <chrono>
#include <future>
#include <thread>

namespace conveyor::postgres::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

class PgNotifyTest : public PgTest {
 protected:
  // Opens a listening handle and consumes the catch-up it reports first.
  conveyor_storage* open_listener() {
    conveyor_storage* h = open_store();
    if (h == nullptr) return nullptr;
    std::vector<Notice> catch_up;
    std::string msg;
    EXPECT_EQ(wait_notify(h, 1'000'000, &catch_up, &msg), CONVEYOR_OK) << msg;
    EXPECT_FALSE(catch_up.empty()) << "a fresh LISTEN reports a catch-up";
    if (!catch_up.empty()) {
      EXPECT_EQ(catch_up[0].kind, CONVEYOR_NOTIFY_RATE_LIMITS);
    }
    return h;
  }

  // Waits up to timeout for notifications on h; returns them.
  std::vector<Notice> collect(conveyor_storage* h, milliseconds timeout) {
    std::vector<Notice> out;
    const auto deadline = steady_clock::now() + timeout;
    while (out.empty() && steady_clock::now() < deadline) {
      std::string msg;
      EXPECT_EQ(wait_notify(h, 100'000, &out, &msg), CONVEYOR_OK) << msg;
    }
    return out;
  }
};

TEST_F(PgNotifyTest, EnqueueWakesAWaiterAtOnce) {
  conveyor_storage* listener = open_listener();
  conveyor_storage* producer = open_store();
  ASSERT_NE(listener, nullptr);
  ASSERT_NE(producer, nullptr);
  // The waiter blocks first; the enqueue happens while it waits.
  std::vector<Notice> got;
  auto waiting = std::async(std::launch::async, [&] {
    std::string msg;
    const auto start = steady_clock::now();
    EXPECT_EQ(wait_notify(listener, 10'000'000, &got, &msg), CONVEYOR_OK) << msg;
    return steady_clock::now() - start;
  });
  // Usually sent while the waiter blocks; if it is sent first, the LISTEN
  // connection holds it for the wait, so either order must work.
  std::this_thread::sleep_for(milliseconds(50));
  const auto sent = steady_clock::now();
  enqueue(producer, "mail");
  auto waited = waiting.get();
  const auto latency = steady_clock::now() - sent;
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].kind, CONVEYOR_NOTIFY_JOBS);
  EXPECT_EQ(got[0].queue, "mail");
  EXPECT_LT(waited, std::chrono::seconds(5)) << "woken by the notification, not the timeout";
  EXPECT_LT(latency, std::chrono::seconds(2));
}

TEST_F(PgNotifyTest, OneNotificationPerQueueInABatch) {
  conveyor_storage* listener = open_listener();
  ASSERT_NE(listener, nullptr);
  std::vector<conveyor_new_job> batch;
  for (int i = 0; i < 50; ++i) {
    batch.push_back({str("b"), str("k"), str("{}"), 0, 1, 0});
    batch.push_back({str("a"), str("k"), str("{}"), 0, 1, 0});
  }
  std::vector<int64_t> ids(batch.size());
  conveyor_error err{};
  ASSERT_EQ(api_->enqueue(listener, batch.data(), batch.size(), ids.data(), &err), CONVEYOR_OK)
      << err.message;
  std::vector<Notice> got = collect(listener, milliseconds(3000));
  // Whatever else arrives in the next moment must not add to these.
  std::string msg;
  EXPECT_EQ(wait_notify(listener, 300'000, &got, &msg), CONVEYOR_OK) << msg;
  ASSERT_EQ(got.size(), 2u) << "one per queue, not one per job";
  EXPECT_EQ(got[0].kind, CONVEYOR_NOTIFY_JOBS);
  EXPECT_EQ(got[0].queue, "a");
  EXPECT_EQ(got[1].queue, "b");
}

TEST_F(PgNotifyTest, OverridesAndPauseNotifyTheControlChannel) {
  conveyor_storage* listener = open_listener();
  conveyor_storage* admin = open_store();
  ASSERT_NE(listener, nullptr);
  ASSERT_NE(admin, nullptr);
  conveyor_error err{};
  ASSERT_EQ(api_->set_rate_limit(admin, str("email"), 5, 1, 0, &err), CONVEYOR_OK);
  auto got = collect(listener, milliseconds(3000));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].kind, CONVEYOR_NOTIFY_RATE_LIMITS);
  EXPECT_EQ(got[0].queue, "email");

  ASSERT_EQ(api_->delete_rate_limit(admin, str("email"), &err), CONVEYOR_OK);
  got = collect(listener, milliseconds(3000));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].kind, CONVEYOR_NOTIFY_RATE_LIMITS);

  pause(admin, "email", true);
  got = collect(listener, milliseconds(3000));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].kind, CONVEYOR_NOTIFY_QUEUE_STATE);
  EXPECT_EQ(got[0].queue, "email");
  pause(admin, "email", false);
  got = collect(listener, milliseconds(3000));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].kind, CONVEYOR_NOTIFY_QUEUE_STATE);
}

TEST_F(PgNotifyTest, TimeoutReturnsQuietly) {
  conveyor_storage* listener = open_listener();
  ASSERT_NE(listener, nullptr);
  std::vector<Notice> got;
  std::string msg;
  const auto start = steady_clock::now();
  EXPECT_EQ(wait_notify(listener, 200'000, &got, &msg), CONVEYOR_OK) << msg;
  const auto took = steady_clock::now() - start;
  EXPECT_TRUE(got.empty());
  EXPECT_GE(took, milliseconds(150));
  EXPECT_LT(took, milliseconds(2000));
  EXPECT_EQ(wait_notify(listener, 0, &got, &msg), CONVEYOR_OK) << "zero: just a look";
  EXPECT_EQ(wait_notify(listener, -5, &got, &msg), CONVEYOR_OK) << "negative: same";
}

TEST_F(PgNotifyTest, CatchUpAfterConnectNamesEveryQueueNotPaused) {
  conveyor_storage* setup = open_store();
  ASSERT_NE(setup, nullptr);
  enqueue(setup, "one");
  enqueue(setup, "two");
  pause(setup, "held", true);
  conveyor_storage* listener = open_store();
  ASSERT_NE(listener, nullptr);
  std::vector<Notice> got;
  std::string msg;
  ASSERT_EQ(wait_notify(listener, 1'000'000, &got, &msg), CONVEYOR_OK) << msg;
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].kind, CONVEYOR_NOTIFY_RATE_LIMITS);
  EXPECT_EQ(got[1].kind, CONVEYOR_NOTIFY_JOBS);
  EXPECT_EQ(got[1].queue, "one");
  EXPECT_EQ(got[2].queue, "two");
}

}  // namespace
}  // namespace conveyor::postgres::test
