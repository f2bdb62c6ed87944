// OverrideFollower against the in-memory plugin behind a FaultInjectingStorage.
#include "override_follower.hpp"
#include "testing/fault_injecting_storage.hpp"

#include <conveyor/clock.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using testing::FaultInjectingStorage;
using testing::StorageOp;

class OverrideFollowerTest : public ::testing::Test {
 protected:
  std::shared_ptr<FaultInjectingStorage> storage =
      std::make_shared<FaultInjectingStorage>(testing::open_memory_storage());
  EngineConfig engine;
  LimitResolver limits{engine, {}};
  OverrideFollower follower{*storage, limits};
  int64_t now() const { return SystemClock::instance().wall_now_us(); }
};

TEST_F(OverrideFollowerTest, ReadsTheListOnlyWhenTheMarkerMoved) {
  EXPECT_TRUE(follower.refresh());
  EXPECT_FALSE(follower.refresh());
  EXPECT_EQ(storage->calls(StorageOp::kListRateLimits), 1u);
  storage->inner().set_rate_limit("q", RateLimit{5, 5}, now());
  EXPECT_TRUE(follower.refresh());
  ASSERT_EQ(limits.overrides().size(), 1u);
  EXPECT_EQ(limits.resolve("q").source, LimitSource::kOverride);
}

TEST_F(OverrideFollowerTest, AFailedReadKeepsTheInstalledListAndIsRetried) {
  storage->inner().set_rate_limit("q", RateLimit{5, 5}, now());
  ASSERT_TRUE(follower.refresh());
  storage->inner().delete_rate_limit("q");
  storage->fail_next(StorageOp::kListRateLimits);
  EXPECT_THROW(follower.refresh(), StorageError);
  EXPECT_EQ(limits.overrides().size(), 1u);
  EXPECT_TRUE(follower.refresh()) << "the marker of the failed read was not installed";
  EXPECT_TRUE(limits.overrides().empty());
}

// Two refreshes that interleave must never leave the older list installed:
// A reads the list, stalls before installing it; meanwhile an override is
// set and B refreshes. Whatever the order, the follower ends on the newer list.
TEST_F(OverrideFollowerTest, InterleavedRefreshesNeverInstallAnOlderList) {
  ASSERT_TRUE(follower.refresh());
  std::mutex mu;
  std::condition_variable cv;
  bool a_read = false, a_go = false;
  storage->set_after_hook(StorageOp::kListRateLimits, [&] {
    std::unique_lock lock(mu);
    if (a_read) return;  // only A's read stalls
    a_read = true;
    cv.notify_all();
    cv.wait(lock, [&] { return a_go; });
  });
  storage->inner().set_rate_limit("other", RateLimit{1, 1}, now());  // A has something to read
  auto a = std::async(std::launch::async, [&] { follower.refresh(); });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return a_read; });
  }
  storage->inner().set_rate_limit("q", RateLimit{7, 7}, now());
  auto b = std::async(std::launch::async, [&] { follower.refresh(); });
  // B either finishes (refreshes do not exclude each other: the defect) or
  // waits for A; give it the chance to finish before letting A install.
  b.wait_for(500ms);
  {
    std::lock_guard lock(mu);
    a_go = true;
    cv.notify_all();
  }
  a.get();
  b.get();
  EXPECT_EQ(limits.resolve("q").source, LimitSource::kOverride);
  EXPECT_EQ(limits.resolve("q").limit->rate_per_sec, 7);
}

}  // namespace
}  // namespace conveyor
