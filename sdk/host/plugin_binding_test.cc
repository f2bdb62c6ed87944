// The host binding against real plugins through the real loader: the SQLite
// plugin, wrapped by the conformance suite's mutant (one broken behaviour per
// open, mutant=none for none), the C example (notifications) and the
// newer_minor test plugin (no notification slot).
#include <conveyor/host/plugin_binding.hpp>
#include <conveyor/host/plugin_loader.hpp>
#include <conveyor/internal/storage.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace conveyor::host {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int64_t kNow = 1'000'000'000;

// What the tests enqueue: the core's NewJob (new_jobs takes any type of its shape).
using Spec = NewJob;

class PluginBindingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/conveyor-binding-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    // The mutant loads the plugin it wraps from here on its first entry call.
    ::setenv("CONVEYOR_MUTANT_INNER", CONVEYOR_TEST_SQLITE_PLUGIN, 1);
  }
  void TearDown() override {
    for (auto& b : open_) b->close();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // A migrated handle of the mutant with bug (its storage in this test's directory).
  PluginBinding& mutant(const std::string& bug) {
    return open_plugin(CONVEYOR_TEST_MUTANT_PLUGIN,
                       {{"path", (dir_ / "jobs.db").string()}, {"mutant", bug}});
  }

  PluginBinding& open_plugin(const std::string& path, const PluginBinding::Options& options) {
    plugins_.push_back(load_plugin(path));
    auto b = std::make_unique<PluginBinding>(plugins_.back()->table(), nullptr);
    Result<conveyor_storage*> opened = b->open(options);
    if (!opened.ok() || opened.value == nullptr)
      throw std::runtime_error("open failed: " + opened.status.message);
    EXPECT_EQ(b->handle(), opened.value);
    Status migrated = b->migrate();
    if (!migrated.ok()) throw std::runtime_error("migrate failed: " + migrated.message);
    open_.push_back(std::move(b));
    return *open_.back();
  }

  fs::path dir_;
  std::vector<std::shared_ptr<const Plugin>> plugins_;
  std::vector<std::unique_ptr<PluginBinding>> open_;
};

TEST_F(PluginBindingTest, CopiesWhatTheCallbacksReportAndTheResults) {
  PluginBinding& b = mutant("none");
  const std::vector<Spec> specs = {
      Spec{.queue = "q", .kind = "k", .payload = "{\"n\":1}", .run_at_us = kNow},
      Spec{.queue = "q", .kind = "k", .payload = "{\"n\":2}", .priority = -1, .run_at_us = kNow}};
  Result<std::vector<int64_t>> ids = b.enqueue(new_jobs(std::span<const Spec>(specs)));
  ASSERT_TRUE(ids.ok()) << ids.status.message;
  ASSERT_EQ(ids.value.size(), 2u);

  Result<PluginBinding::Claimed> claimed = b.claim("q", 10, 77, kNow, kNow + 30'000'000);
  ASSERT_TRUE(claimed.ok()) << claimed.status.message;
  EXPECT_TRUE(claimed.problems.empty());
  EXPECT_EQ(claimed.value.out_claimed, 2u);
  ASSERT_EQ(claimed.value.jobs.size(), 2u);
  const JobCopy& first = claimed.value.jobs[0];
  EXPECT_EQ(first.id, ids.value[1]) << "priority -1 runs first";
  EXPECT_EQ(first.payload, "{\"n\":2}");
  EXPECT_EQ(first.state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(first.lease_token, 77);
  EXPECT_EQ(first.lease_expires, kNow + 30'000'000);
  EXPECT_EQ(first.struct_size, sizeof(conveyor_job));
  EXPECT_EQ(first.reserved0, 0);

  const std::vector<conveyor_lease> leases = {first.lease(), {ids.value[0], 78}};
  Result<std::vector<conveyor_status>> done = b.complete(leases, kNow + 1);
  ASSERT_TRUE(done.ok()) << done.status.message;
  EXPECT_EQ(done.value, (std::vector<conveyor_status>{CONVEYOR_OK, CONVEYOR_E_LEASE_LOST}));

  Result<std::vector<JobCopy>> got = b.get_job(first.id, kNow + 2);
  ASSERT_TRUE(got.ok()) << got.status.message;
  ASSERT_EQ(got.value.size(), 1u);
  EXPECT_EQ(got.value[0].state, CONVEYOR_JOB_COMPLETED);
  EXPECT_EQ(got.value[0].finalized_at, kNow + 1);

  Result<std::vector<StatsCopy>> stats = b.queue_stats(kNow + 2);
  ASSERT_TRUE(stats.ok()) << stats.status.message;
  ASSERT_EQ(stats.value.size(), 1u);
  EXPECT_EQ(stats.value[0].queue, "q");
  EXPECT_EQ(stats.value[0].running, 1);
  EXPECT_EQ(stats.value[0].completed, 1);

  ASSERT_TRUE(b.set_rate_limit("q", 2.5, 4, kNow).ok());
  Result<std::vector<LimitCopy>> limits = b.list_rate_limits();
  ASSERT_TRUE(limits.ok()) << limits.status.message;
  ASSERT_EQ(limits.value.size(), 1u);
  EXPECT_EQ(limits.value[0].rate_per_sec, 2.5);
  EXPECT_EQ(limits.value[0].burst, 4u);
  EXPECT_EQ(limits.value[0].struct_size, sizeof(conveyor_rate_limit));
}

TEST_F(PluginBindingTest, AFailureCarriesThePluginsStatusAndMessage) {
  PluginBinding& b = mutant("none");
  Status s = b.cancel(424242, kNow);
  EXPECT_EQ(s.code, CONVEYOR_E_NOT_FOUND);
  EXPECT_THAT(s.message, HasSubstr("424242"));

  Result<std::vector<JobCopy>> got = b.get_job(424242, kNow);
  EXPECT_EQ(got.status.code, CONVEYOR_E_NOT_FOUND);
  EXPECT_TRUE(got.value.empty());
}

TEST_F(PluginBindingTest, AnUndersizedStructIsAProblemNotARefusal) {
  PluginBinding& b = mutant("small_struct");
  const std::vector<Spec> specs = {
      Spec{.queue = "q", .kind = "k", .payload = "x", .run_at_us = kNow}};
  const int64_t id = b.enqueue(new_jobs(std::span<const Spec>(specs))).value.at(0);

  Result<std::vector<JobCopy>> got = b.get_job(id, kNow);
  ASSERT_TRUE(got.ok()) << got.status.message;
  ASSERT_EQ(got.problems.size(), 1u);
  EXPECT_THAT(got.problems[0], HasSubstr("conveyor_job.struct_size is"));
  ASSERT_EQ(got.value.size(), 1u);
  // The mutant reports struct_size 8: struct_size and state, nothing after.
  EXPECT_EQ(got.value[0].struct_size, 8u);
  EXPECT_EQ(got.value[0].state, CONVEYOR_JOB_AVAILABLE) << "what struct_size covers is kept";
  EXPECT_EQ(got.value[0].id, 0) << "what it does not cover is not read";
  EXPECT_EQ(got.value[0].payload, "");
}

// Reports that outlive their call, as the conformance suite keeps them.
struct KeptReports : Reports {
  std::atomic<int> late{0};
  void late_callback() noexcept override { ++late; }
};

class KeepingBinding : public PluginBinding {
 public:
  using PluginBinding::PluginBinding;
  std::vector<std::unique_ptr<KeptReports>> kept;

 protected:
  Reports* reports_for(const char*) override {
    kept.push_back(std::make_unique<KeptReports>());
    return kept.back().get();
  }
};

TEST_F(PluginBindingTest, ACallbackAfterItsCallReachesReportsThatOutlivedIt) {
  PluginBinding& plain = mutant("late_callback");
  const std::vector<Spec> specs = {
      Spec{.queue = "q", .kind = "k", .payload = "{}", .run_at_us = kNow}};
  const int64_t id = plain.enqueue(new_jobs(std::span<const Spec>(specs))).value.at(0);

  KeepingBinding b(plain.table(), plain.handle());
  ASSERT_TRUE(b.get_job(id, kNow).ok());
  ASSERT_TRUE(b.get_job(id, kNow).ok());  // the mutant calls the first call's callback again
  ASSERT_EQ(b.kept.size(), 2u);
  EXPECT_EQ(b.kept[0]->late.load(), 1);
  EXPECT_EQ(b.kept[1]->late.load(), 0);
}

TEST_F(PluginBindingTest, NotificationsReachTheHandlerAsTheyArriveAndItsFailureIsAProblem) {
  PluginBinding& b = open_plugin(CONVEYOR_TEST_MEMORY_C_PLUGIN, {{"name", "binding-test"}});
  const std::vector<Spec> specs = {
      Spec{.queue = "mail", .kind = "k", .payload = "{}", .run_at_us = kNow}};
  ASSERT_TRUE(b.enqueue(new_jobs(std::span<const Spec>(specs))).ok());

  std::vector<std::string> seen;
  Result<std::vector<NotificationCopy>> notes =
      b.wait_for_notification(1'000'000, [&](int32_t kind, std::string_view queue) {
        seen.push_back(std::to_string(kind) + ":" + std::string(queue));
        throw std::runtime_error("handler broke");
      });
  ASSERT_TRUE(notes.ok()) << notes.status.message;
  ASSERT_EQ(notes.value.size(), 1u);
  EXPECT_EQ(notes.value[0].kind, CONVEYOR_NOTIFY_JOBS);
  EXPECT_EQ(notes.value[0].queue, "mail");
  EXPECT_EQ(seen, std::vector<std::string>{std::to_string(CONVEYOR_NOTIFY_JOBS) + ":mail"});
  ASSERT_EQ(notes.problems.size(), 1u);
  EXPECT_THAT(notes.problems[0], HasSubstr("handler broke"));
}

TEST_F(PluginBindingTest, ANullOptionalSlotIsUnsupportedWithoutACall) {
  PluginBinding& b = open_plugin(CONVEYOR_TEST_NEWER_MINOR_PLUGIN, {});
  Result<std::vector<NotificationCopy>> notes = b.wait_for_notification(0);
  EXPECT_EQ(notes.status.code, CONVEYOR_E_UNSUPPORTED);
  EXPECT_THAT(notes.status.message, HasSubstr("'newer_minor' does not support notifications"));
}

// ABI 1.2 through the real SQLite plugin: the shared record, a limit's
// scope and a job's cost, each copied from what the plugin wrote.
TEST_F(PluginBindingTest, CallsTheV1_2SlotsAndCopiesCostAndScope) {
  PluginBinding& b =
      open_plugin(CONVEYOR_TEST_SQLITE_PLUGIN, {{"path", (dir_ / "12.db").string()}});
  Result<PluginBinding::Shared> read = b.swap_shared_state("k", -1, 5);
  ASSERT_TRUE(read.ok()) << read.status.message;
  EXPECT_EQ(read.value.version, 0);
  EXPECT_EQ(read.value.value, 0);
  EXPECT_EQ(read.value.applied, 0);
  Result<PluginBinding::Shared> swapped = b.swap_shared_state("k", 0, 5);
  ASSERT_TRUE(swapped.ok()) << swapped.status.message;
  EXPECT_EQ(swapped.value.applied, 1);
  EXPECT_EQ(swapped.value.version, 1);
  EXPECT_EQ(swapped.value.value, 5);
  Result<PluginBinding::Shared> lost = b.swap_shared_state("k", 0, 6);
  ASSERT_TRUE(lost.ok()) << lost.status.message;
  EXPECT_EQ(lost.value.applied, 0);
  EXPECT_EQ(lost.value.version, 1) << "the record after the call";
  EXPECT_EQ(b.swap_shared_state("", 0, 1).status.code, CONVEYOR_E_INVALID);

  ASSERT_TRUE(b.set_rate_limit_v2("fleet", 3, 2, CONVEYOR_SCOPE_FLEET, kNow).ok());
  ASSERT_TRUE(b.set_rate_limit("local", 3, 2, kNow).ok());
  Result<std::vector<LimitCopy>> limits = b.list_rate_limits();
  ASSERT_TRUE(limits.ok()) << limits.status.message;
  ASSERT_EQ(limits.value.size(), 2u);
  EXPECT_TRUE(limits.value[0].reports_scope);
  EXPECT_EQ(limits.value[0].scope, CONVEYOR_SCOPE_FLEET);
  EXPECT_EQ(limits.value[1].scope, CONVEYOR_SCOPE_PROCESS);

  const std::vector<Spec> specs = {
      Spec{.queue = "c", .kind = "k", .payload = "{}", .run_at_us = kNow, .cost = 9}};
  Result<std::vector<int64_t>> ids = b.enqueue_v3(new_jobs_v2(std::span<const Spec>(specs)), kNow);
  ASSERT_TRUE(ids.ok()) << ids.status.message;
  Result<PluginBinding::Claimed> claimed = b.claim("c", 10, 5, kNow, kNow + 1'000'000);
  ASSERT_TRUE(claimed.ok()) << claimed.status.message;
  ASSERT_EQ(claimed.value.jobs.size(), 1u);
  EXPECT_EQ(claimed.value.jobs[0].cost, 9);
  EXPECT_TRUE(claimed.problems.empty());
}

// A plugin of ABI 1.1 (here SQLite's own table cut to its 1.1 size, as a 1.1
// build would report it): every 1.2 slot is UNSUPPORTED without a call,
// naming the plugin, its ABI and the slot.
TEST_F(PluginBindingTest, AV1_1TableLacksTheV1_2SlotsByName) {
  PluginBinding& real =
      open_plugin(CONVEYOR_TEST_SQLITE_PLUGIN, {{"path", (dir_ / "11.db").string()}});
  conveyor_storage_plugin v1_1 = real.table();
  v1_1.struct_size = CONVEYOR_PLUGIN_V1_1_SIZE;
  v1_1.abi_minor = 1;
  PluginBinding b(v1_1, real.handle());
  const std::string abi = "storage plugin 'sqlite' implements ABI 1.1; ";
  Result<PluginBinding::Shared> swap = b.swap_shared_state("k", 0, 1);
  EXPECT_EQ(swap.status.code, CONVEYOR_E_UNSUPPORTED);
  EXPECT_THAT(swap.status.message,
              HasSubstr(abi + "sharing state across processes needs ABI 1.2 (slot "
                              "swap_shared_state)"));
  Status scoped = b.set_rate_limit_v2("q", 1, 1, CONVEYOR_SCOPE_FLEET, kNow);
  EXPECT_EQ(scoped.code, CONVEYOR_E_UNSUPPORTED);
  EXPECT_THAT(scoped.message,
              HasSubstr(abi + "a rate limit with a scope needs ABI 1.2 (slot set_rate_limit_v2)"));
  const std::vector<Spec> specs = {Spec{.queue = "q", .kind = "k", .payload = "{}", .cost = 2}};
  Result<std::vector<int64_t>> costly =
      b.enqueue_v3(new_jobs_v2(std::span<const Spec>(specs)), kNow);
  EXPECT_EQ(costly.status.code, CONVEYOR_E_UNSUPPORTED);
  EXPECT_THAT(costly.status.message,
              HasSubstr(abi + "a job cost other than 1 needs ABI 1.2 (slot enqueue_v3)"));
  // Nothing reached the plugin.
  EXPECT_EQ(real.swap_shared_state("k", -1, 0).value.version, 0);
  EXPECT_TRUE(real.list_rate_limits().value.empty());
  EXPECT_TRUE(real.claim("q", 10, 3, kNow, kNow + 1).value.jobs.empty());
}

TEST_F(PluginBindingTest, AV1_2TableLacksTheV1_3SlotByName) {
  PluginBinding& real =
      open_plugin(CONVEYOR_TEST_SQLITE_PLUGIN, {{"path", (dir_ / "12.db").string()}});
  conveyor_storage_plugin v1_2 = real.table();
  v1_2.struct_size = CONVEYOR_PLUGIN_V1_2_SIZE;
  v1_2.abi_minor = 2;
  PluginBinding b(v1_2, real.handle());
  Result<PluginBinding::SharedAdded> added = b.add_shared_state("k", 0, 0, 100, 10, 1, 1);
  EXPECT_EQ(added.status.code, CONVEYOR_E_UNSUPPORTED);
  EXPECT_THAT(added.status.message,
              HasSubstr("storage plugin 'sqlite' implements ABI 1.2; a fleet take in one call "
                        "needs ABI 1.3 (slot add_shared_state)"));
  EXPECT_EQ(real.swap_shared_state("k", -1, 0).value.version, 0) << "nothing reached the plugin";
  // The whole table has it, and the add reaches the plugin.
  Result<PluginBinding::SharedAdded> real_add = real.add_shared_state("k", 0, 0, 100, 10, 1, 5);
  ASSERT_TRUE(real_add.status.ok()) << real_add.status.message;
  EXPECT_EQ(real_add.value.count, 5u);
  EXPECT_EQ(real_add.value.value, 50);
  EXPECT_EQ(real.swap_shared_state("k", -1, 0).value.version, 1);
}

// The slot list answers by enum; a name is checked at compile time
// (slot_named) or, arriving at run time, throws rather than reading as a
// missing slot.
TEST(StorageSlots, NamesMapToSlotsAndAnUnknownNameIsLoud) {
  for (const SlotInfo& s : kStorageSlots) {
    EXPECT_EQ(find_storage_slot(s.name), s.slot) << s.name;
    EXPECT_EQ(storage_slot_named(s.name), s.slot) << s.name;
  }
  static_assert(slot_named("claim_kinds") == StorageSlot::kClaimKinds);
  EXPECT_EQ(find_storage_slot("claim_kind"), std::nullopt);
  EXPECT_THROW(storage_slot_named("claim_kind"), std::invalid_argument);
  EXPECT_TRUE(slot_info(StorageSlot::kClaim).required);
  EXPECT_FALSE(slot_info(StorageSlot::kWaitForNotification).required);
  EXPECT_EQ(slot_minor(StorageSlot::kWaitForNotification), 0u);
  EXPECT_EQ(slot_minor(StorageSlot::kRescueExpiredV2), 1u);
  EXPECT_EQ(slot_minor(StorageSlot::kEnqueueV3), 2u);
  EXPECT_EQ(slot_minor(StorageSlot::kAddSharedState), 3u);
}

// has_slot follows struct_size: a table cut to each minor's size has exactly
// the slots of that minor and older (of those the plugin fills).
TEST_F(PluginBindingTest, HasSlotFollowsTheTablesMinor) {
  PluginBinding& real =
      open_plugin(CONVEYOR_TEST_SQLITE_PLUGIN, {{"path", (dir_ / "minors.db").string()}});
  ASSERT_TRUE(real.has_slot(StorageSlot::kAddSharedState)) << "SQLite fills every 1.x slot";
  for (uint32_t minor = 0; minor <= CONVEYOR_ABI_MINOR; ++minor) {
    conveyor_storage_plugin cut = real.table();
    cut.struct_size = static_cast<uint32_t>(table_size_of_minor(minor));
    cut.abi_minor = minor;
    PluginBinding b(cut, real.handle());
    for (const SlotInfo& s : kStorageSlots)
      EXPECT_EQ(b.has_slot(s.slot), s.minor <= minor && real.has_slot(s.slot))
          << "ABI 1." << minor << ", " << s.name;
  }
}

// Structs from a plugin built before 1.2 end before cost and scope: those
// read as 1 and PROCESS, whatever lies beyond struct_size, and that is no
// problem (the struct is a 1.1 struct, not an undersized one).
TEST_F(PluginBindingTest, StructsWithoutTheV1_2FieldsReadAsCostOneAndProcessScope) {
  conveyor_job job{};
  job.struct_size = offsetof(conveyor_job, cost);
  job.state = CONVEYOR_JOB_AVAILABLE;
  job.id = 3;
  job.cost = 77;  // beyond struct_size: never read
  std::vector<std::string> problems;
  JobCopy j = copy_job(&job, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(j.id, 3);
  EXPECT_EQ(j.cost, 1);
  job.struct_size = sizeof(conveyor_job);
  EXPECT_EQ(copy_job(&job, problems).cost, 77) << "covered: read as written";

  conveyor_rate_limit limit{};
  limit.struct_size = offsetof(conveyor_rate_limit, scope);
  limit.burst = 1;
  limit.rate_per_sec = 1;
  limit.scope = CONVEYOR_SCOPE_FLEET;  // beyond struct_size: never read
  LimitCopy l = copy_limit(&limit, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_FALSE(l.reports_scope);
  EXPECT_EQ(l.scope, CONVEYOR_SCOPE_PROCESS);
  limit.struct_size = sizeof(conveyor_rate_limit);
  l = copy_limit(&limit, problems);
  EXPECT_TRUE(l.reports_scope);
  EXPECT_EQ(l.scope, CONVEYOR_SCOPE_FLEET);
}

}  // namespace
}  // namespace conveyor::host
