// The core's Storage over ABI 1.2 (and 1.3's add_shared_state), through the
// real loader: on SQLite (every
// 1.2 slot) shared records, fleet scope and job costs round trip; on the C
// example (ABI 1.2 header, none of the 1.2 slots) a fleet limit and a cost
// other than 1 are refused naming the plugin and the slot, and nothing is
// stored, while process limits and cost 1 work.
#include "test_support.hpp"

#include <conveyor/host/plugin_loader.hpp>
#include <conveyor/internal/storage.hpp>
#include <conveyor/rate_limit.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

namespace conveyor {
namespace {

using test::TempDir;
using ::testing::HasSubstr;

constexpr int64_t kNow = 4'000'000'000'000'000;

std::shared_ptr<Storage> sqlite_storage(const TempDir& dir) {
  const Config c = test::sqlite_config(dir);
  return open_storage(c.storage);
}

std::shared_ptr<Storage> memory_c_storage() {
  return Storage::open(
      load_plugin(std::string(CONVEYOR_TEST_EXAMPLE_PLUGIN_DIR) + "/libconveyor-memory_c.so"),
      {{"name", "abi12"}});
}

TEST(StorageAbi12, SqliteRoundTripsCostScopeAndSharedRecords) {
  TempDir dir;
  std::shared_ptr<Storage> s = sqlite_storage(dir);
  for (StorageSlot slot :
       {StorageSlot::kSwapSharedState, StorageSlot::kSetRateLimitV2, StorageSlot::kEnqueueV3})
    EXPECT_TRUE(s->has_slot(slot)) << conveyor::host::slot_name(slot);

  std::vector<NewJob> jobs = {{"q", "k", "{}", 0, 3, 0}, {"q", "k", "{}", 1, 3, 0}};
  jobs[0].cost = 4;
  const std::vector<int64_t> ids = s->enqueue(jobs, kNow);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(s->get_job(ids[0], kNow)->cost, 4);
  std::vector<Job> claimed = s->claim("q", 10, 7, kNow, kNow + 1'000'000);
  ASSERT_EQ(claimed.size(), 2u);
  EXPECT_EQ(claimed[0].cost, 4);
  EXPECT_EQ(claimed[1].cost, 1);

  s->set_rate_limit("fleet", make_rate_limit(5, 0, LimitScope::kFleet), kNow);
  s->set_rate_limit("local", make_rate_limit(5, 0), kNow);
  std::vector<RateLimitOverride> limits = s->list_rate_limits();
  ASSERT_EQ(limits.size(), 2u);
  EXPECT_EQ(limits[0].queue, "fleet");
  EXPECT_EQ(limits[0].limit, make_rate_limit(5, 0, LimitScope::kFleet));
  EXPECT_EQ(limits[1].limit.scope, LimitScope::kProcess);

  Storage::SharedRecord first = s->swap_shared_state("ratelimit.bucket:q", 0, 100);
  EXPECT_TRUE(first.applied);
  EXPECT_EQ(first.version, 1);
  EXPECT_EQ(first.value, 100);
  Storage::SharedRecord lost = s->swap_shared_state("ratelimit.bucket:q", 0, 200);
  EXPECT_FALSE(lost.applied);
  EXPECT_EQ(lost.version, 1);
  EXPECT_EQ(lost.value, 100);
  Storage::SharedRecord read = s->swap_shared_state("ratelimit.bucket:q", -1, 0);
  EXPECT_FALSE(read.applied);
  EXPECT_EQ(read.value, 100);
  // ABI 1.3: a bounded add on the same record moves its version.
  ASSERT_TRUE(s->has_slot(StorageSlot::kAddSharedState));
  Storage::SharedAdded added = s->add_shared_state(
      "ratelimit.bucket:q",
      Storage::SharedAdd{
          .credit = 30, .low = 0, .high = 100, .unit = 10, .min_count = 1, .max_count = 9});
  EXPECT_EQ(added.count, 3u) << "from 100 - 30 = 70, three units of 10 fit under 100";
  EXPECT_EQ(added.value, 100);
  EXPECT_EQ(added.version, 2);
  EXPECT_FALSE(s->swap_shared_state("ratelimit.bucket:q", 1, 0).applied);
  try {
    s->add_shared_state("ratelimit.bucket:q", Storage::SharedAdd{.unit = 0});
    ADD_FAILURE() << "unit 0 was accepted";
  } catch (const StorageError& e) {
    EXPECT_EQ(e.code(), CONVEYOR_E_INVALID);
    EXPECT_THAT(e.what(), HasSubstr("unit must be in 1.."));
  }
  try {
    s->swap_shared_state(std::string(CONVEYOR_SHARED_KEY_MAX + 1, 'k'), 0, 1);
    ADD_FAILURE() << "a key longer than CONVEYOR_SHARED_KEY_MAX was accepted";
  } catch (const StorageError& e) {
    EXPECT_EQ(e.code(), CONVEYOR_E_INVALID);
    EXPECT_THAT(e.what(), HasSubstr("CONVEYOR_SHARED_KEY_MAX"));
  }
}

TEST(StorageAbi12, APluginWithoutThe1_2SlotsRefusesFleetAndCostByName) {
  std::shared_ptr<Storage> s = memory_c_storage();
  for (StorageSlot slot :
       {StorageSlot::kSwapSharedState, StorageSlot::kSetRateLimitV2, StorageSlot::kEnqueueV3})
    EXPECT_FALSE(s->has_slot(slot)) << conveyor::host::slot_name(slot);
  auto expect_refused = [](auto&& call, const std::string& slot, const std::string& need) {
    try {
      call();
      ADD_FAILURE() << need << " did not throw";
    } catch (const StorageError& e) {
      EXPECT_EQ(e.code(), CONVEYOR_E_UNSUPPORTED);
      EXPECT_THAT(e.what(), HasSubstr("storage plugin 'memory_c' (ABI 1." +
                                      std::to_string(CONVEYOR_ABI_MINOR) + ") does not implement " +
                                      slot + ", which " + need + " needs"));
    }
  };
  expect_refused([&] { s->set_rate_limit("q", make_rate_limit(5, 0, LimitScope::kFleet), kNow); },
                 "set_rate_limit_v2", "a fleet-wide rate limit");
  NewJob costly{"q", "k", "{}", 0, 3, 0};
  costly.cost = 2;
  NewJob plain{"q", "k", "{}", 0, 3, 0};
  std::vector<NewJob> batch = {plain, costly};
  expect_refused([&] { s->enqueue(batch, kNow); }, "enqueue_v3", "a job cost other than 1");
  expect_refused([&] { s->swap_shared_state("ratelimit.enabled", -1, 0); }, "swap_shared_state",
                 "sharing state across processes");
  EXPECT_FALSE(s->has_slot(StorageSlot::kAddSharedState));
  expect_refused([&] { s->add_shared_state("ratelimit.bucket:q", Storage::SharedAdd{}); },
                 "add_shared_state", "a fleet take in one call");
  EXPECT_TRUE(s->list_rate_limits().empty()) << "the refused fleet limit was stored";
  EXPECT_TRUE(s->claim("q", 10, 7, kNow, kNow + 1).empty()) << "the refused batch was stored";

  s->set_rate_limit("q", make_rate_limit(5, 0), kNow);
  ASSERT_EQ(s->list_rate_limits().size(), 1u);
  EXPECT_EQ(s->list_rate_limits()[0].limit.scope, LimitScope::kProcess);
  const int64_t id = s->enqueue(std::span(&plain, 1), kNow).at(0);
  EXPECT_EQ(s->get_job(id, kNow)->cost, 1);
}

}  // namespace
}  // namespace conveyor
