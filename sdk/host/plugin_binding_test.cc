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
#include <cstdint>
#include <cstdio>
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
  EXPECT_EQ(slot_minor(StorageSlot::kListReadyKeys), 4u);
  for (StorageSlot s :
       {StorageSlot::kSetKeySetting, StorageSlot::kDeleteKeySetting, StorageSlot::kListKeySettings,
        StorageSlot::kDeleteSharedStates, StorageSlot::kAddSharedStates}) {
    EXPECT_EQ(slot_minor(s), 5u) << slot_name(s);
    EXPECT_FALSE(slot_info(s).required) << slot_name(s);
  }
  static_assert(slot_named("delete_shared_states") == StorageSlot::kDeleteSharedStates);
  static_assert(slot_named("add_shared_states") == StorageSlot::kAddSharedStates);
  EXPECT_EQ(table_size_of_minor(4), CONVEYOR_PLUGIN_V1_4_SIZE);
  EXPECT_EQ(table_size_of_minor(5), CONVEYOR_PLUGIN_V1_5_SIZE);
  EXPECT_EQ(slot_minor(StorageSlot::kEnqueueV5), 6u);
  EXPECT_FALSE(slot_info(StorageSlot::kEnqueueV5).required);
  static_assert(slot_named("enqueue_v5") == StorageSlot::kEnqueueV5);
  EXPECT_EQ(table_size_of_minor(6), CONVEYOR_PLUGIN_V1_6_SIZE);
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

// A conveyor_job from a plugin built before 1.6 ends after key: started_at
// and timeout read as 0, whatever lies beyond struct_size; covered, they are
// read as written.
TEST_F(PluginBindingTest, JobsWithoutTheV1_6FieldsReadAsZero) {
  conveyor_job job{};
  job.struct_size = offsetof(conveyor_job, started_at_us);
  job.state = CONVEYOR_JOB_COMPLETED;
  job.id = 5;
  job.started_at_us = 1234;  // beyond struct_size: never read
  job.timeout_ms = 99;
  std::vector<std::string> problems;
  JobCopy j = copy_job(&job, problems);
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(j.started_at, 0);
  EXPECT_EQ(j.timeout_ms, 0);
  job.struct_size = offsetof(conveyor_job, timeout_ms);  // started_at alone: not the whole 1.6
  j = copy_job(&job, problems);
  EXPECT_EQ(j.started_at, 0);
  EXPECT_EQ(j.timeout_ms, 0);
  job.struct_size = sizeof(conveyor_job);
  j = copy_job(&job, problems);
  EXPECT_EQ(j.started_at, 1234) << "covered: read as written";
  EXPECT_EQ(j.timeout_ms, 99);
}

// A plugin of ABI 1.5 (SQLite's table cut to its 1.5 size): enqueue_v5 is
// UNSUPPORTED without a call, naming the plugin, its ABI and the slot.
TEST_F(PluginBindingTest, AV1_5TableLacksEnqueueV5ByName) {
  PluginBinding& real =
      open_plugin(CONVEYOR_TEST_SQLITE_PLUGIN, {{"path", (dir_ / "15.db").string()}});
  conveyor_storage_plugin v1_5 = real.table();
  v1_5.struct_size = CONVEYOR_PLUGIN_V1_5_SIZE;
  v1_5.abi_minor = 5;
  PluginBinding b(v1_5, real.handle());
  const conveyor_new_job_v4 job{
      {{{sdk::str("q"), sdk::str("k"), sdk::str("{}"), 0, 1, kNow}, 1, 0}, conveyor_str{}}, 500};
  Result<std::vector<int64_t>> r = b.enqueue_v5(std::span(&job, 1), kNow);
  EXPECT_EQ(r.status.code, CONVEYOR_E_UNSUPPORTED);
  EXPECT_THAT(r.status.message,
              HasSubstr("storage plugin 'sqlite' implements ABI 1.5; a job timeout needs ABI 1.6 "
                        "(slot enqueue_v5): upgrade the plugin"));
  // Nothing reached the plugin.
  ASSERT_TRUE(real.has_slot(StorageSlot::kListJobs));
  EXPECT_TRUE(real.list_jobs("q", {}, "", 0, 10, kNow).value.jobs.empty());
}

// ---- ABI 1.5 ----

// A plugin of ABI 1.4 (SQLite's table cut to its 1.4 size): each 1.5 slot is
// UNSUPPORTED without a call, naming the plugin, its ABI, what needs the slot
// and the slot.
TEST_F(PluginBindingTest, AV1_4TableLacksTheV1_5SlotsByName) {
  PluginBinding& real =
      open_plugin(CONVEYOR_TEST_SQLITE_PLUGIN, {{"path", (dir_ / "14.db").string()}});
  conveyor_storage_plugin v1_4 = real.table();
  v1_4.struct_size = CONVEYOR_PLUGIN_V1_4_SIZE;
  v1_4.abi_minor = 4;
  PluginBinding b(v1_4, real.handle());
  const std::string abi = "storage plugin 'sqlite' implements ABI 1.4; ";
  sdk::KeySetting weight;
  weight.queue = "q";
  weight.key = "k";
  weight.fields = CONVEYOR_KEY_FIELD_WEIGHT;
  weight.weight = 2;
  Status set = b.set_key_setting(weight.view(), kNow);
  EXPECT_EQ(set.code, CONVEYOR_E_UNSUPPORTED);
  EXPECT_THAT(set.message,
              HasSubstr(abi + "a key's own limit or weight needs ABI 1.5 (slot set_key_setting)"));
  Result<int32_t> cleared =
      b.delete_key_setting("q", CONVEYOR_KEY_TARGET_ONE, "k", CONVEYOR_KEY_FIELDS_ALL);
  EXPECT_EQ(cleared.status.code, CONVEYOR_E_UNSUPPORTED);
  EXPECT_THAT(cleared.status.message,
              HasSubstr(abi + "removing a key's own limit or weight needs ABI 1.5 (slot "
                              "delete_key_setting)"));
  Result<std::vector<KeySettingCopy>> listed = b.list_key_settings();
  EXPECT_EQ(listed.status.code, CONVEYOR_E_UNSUPPORTED);
  EXPECT_THAT(listed.status.message,
              HasSubstr(abi + "listing keys' own limits and weights needs ABI 1.5 (slot "
                              "list_key_settings)"));
  EXPECT_TRUE(listed.value.empty());
  ASSERT_EQ(real.swap_shared_state("p:k", 0, 1).value.applied, 1);
  Result<uint32_t> forgot = b.delete_shared_states("p:", 10, 100);
  EXPECT_EQ(forgot.status.code, CONVEYOR_E_UNSUPPORTED);
  EXPECT_THAT(forgot.status.message,
              HasSubstr(abi + "forgetting idle shared records needs ABI 1.5 (slot "
                              "delete_shared_states)"));
  const std::vector<PluginBinding::KeyedAdd> adds = {{"p:k", 0, 0, 100, 1, 1, 1}};
  Result<std::vector<PluginBinding::SharedAdded>> added = b.add_shared_states(adds);
  EXPECT_EQ(added.status.code, CONVEYOR_E_UNSUPPORTED);
  EXPECT_THAT(added.status.message,
              HasSubstr(abi + "many fleet takes in one call needs ABI 1.5 (slot "
                              "add_shared_states)"));
  EXPECT_TRUE(added.value.empty());
  // Nothing reached the plugin.
  EXPECT_EQ(real.swap_shared_state("p:k", -1, 0).value.version, 1);
  if (real.has_slot(StorageSlot::kListKeySettings)) {
    Result<std::vector<KeySettingCopy>> stored = real.list_key_settings();
    ASSERT_TRUE(stored.ok()) << stored.status.message;
    EXPECT_TRUE(stored.value.empty());
  }
}

// A plugin of ABI 1.5 that leaves the slots NULL (the C example implements
// the 1.0 and 1.1 slots only): UNSUPPORTED naming the plugin, its ABI and
// the slot.
TEST_F(PluginBindingTest, AV1_5TableWithoutTheSlotsSaysSo) {
  PluginBinding& b = open_plugin(CONVEYOR_TEST_MEMORY_C_PLUGIN, {{"name", "binding-test-15"}});
  ASSERT_EQ(b.table().abi_minor, uint32_t{CONVEYOR_ABI_MINOR});
  ASSERT_GE(CONVEYOR_ABI_MINOR, 5);
  const std::string abi = "storage plugin 'memory_c' (ABI 1." + std::to_string(CONVEYOR_ABI_MINOR) +
                          ") does not implement ";
  sdk::KeySetting rate;
  rate.queue = "q";
  rate.fields = CONVEYOR_KEY_FIELD_RATE;
  rate.rate_per_sec = 1;
  rate.burst = 1;
  Status set = b.set_key_setting(rate.view(), kNow);
  EXPECT_EQ(set.code, CONVEYOR_E_UNSUPPORTED);
  EXPECT_THAT(set.message, HasSubstr(abi + "set_key_setting, which a key's own limit or weight "
                                           "needs"));
  EXPECT_THAT(b.delete_key_setting("q", CONVEYOR_KEY_TARGET_EVERY, "", CONVEYOR_KEY_FIELD_RATE)
                  .status.message,
              HasSubstr(abi + "delete_key_setting"));
  EXPECT_THAT(b.list_key_settings().status.message, HasSubstr(abi + "list_key_settings"));
  EXPECT_THAT(b.delete_shared_states("p", 1, 1).status.message,
              HasSubstr(abi + "delete_shared_states, which forgetting idle shared records needs"));
  const std::vector<PluginBinding::KeyedAdd> adds = {{"p", 0, 0, 100, 1, 1, 1}};
  Result<std::vector<PluginBinding::SharedAdded>> added = b.add_shared_states(adds);
  EXPECT_EQ(added.status.code, CONVEYOR_E_UNSUPPORTED);
  EXPECT_THAT(added.status.message,
              HasSubstr(abi + "add_shared_states, which many fleet takes in one call needs"));
}

// copy_key_setting: a NULL setting, fields 0 or with unknown bits, a struct
// smaller than the 1.5 struct and a string with data NULL are problems, not
// refusals; what the struct holds is copied.
TEST(CopyKeySetting, CopiesTheFieldsAndNamesWhatIsMalformed) {
  std::vector<std::string> problems;
  KeySettingCopy none = copy_key_setting(nullptr, problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("NULL setting"));
  EXPECT_EQ(none.fields, 0u);

  conveyor_key_setting k{};
  k.struct_size = sizeof k;
  k.fields = CONVEYOR_KEY_FIELDS_ALL;
  k.queue = sdk::str("mail");
  k.key = sdk::str("tenant");
  k.target = CONVEYOR_KEY_TARGET_ONE;
  k.scope = CONVEYOR_SCOPE_FLEET;
  k.rate_per_sec = 2.5;
  k.burst = 7;
  k.weight = 9;
  k.updated_at_us = kNow;
  problems.clear();
  KeySettingCopy c = copy_key_setting(&k, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(c.queue, "mail");
  EXPECT_EQ(c.key, "tenant");
  EXPECT_EQ(c.target, CONVEYOR_KEY_TARGET_ONE);
  EXPECT_EQ(c.fields, CONVEYOR_KEY_FIELDS_ALL);
  EXPECT_EQ(c.scope, CONVEYOR_SCOPE_FLEET);
  EXPECT_EQ(c.rate_per_sec, 2.5);
  EXPECT_EQ(c.burst, 7u);
  EXPECT_EQ(c.weight, 9u);
  EXPECT_EQ(c.updated_at, kNow);

  for (uint32_t fields : {0u, 4u, CONVEYOR_KEY_FIELDS_ALL | 8u, UINT32_MAX}) {
    conveyor_key_setting bad = k;
    bad.fields = fields;
    problems.clear();
    EXPECT_EQ(copy_key_setting(&bad, problems).fields, fields) << "copied as reported";
    ASSERT_EQ(problems.size(), 1u) << "fields " << fields;
    EXPECT_THAT(problems[0], HasSubstr("conveyor_key_setting.fields is " + std::to_string(fields)));
    EXPECT_THAT(problems[0], HasSubstr("\"mail\" key \"tenant\""));
  }

  conveyor_key_setting small = k;
  small.struct_size = offsetof(conveyor_key_setting, weight);
  problems.clear();
  KeySettingCopy cut = copy_key_setting(&small, problems);
  ASSERT_FALSE(problems.empty());
  EXPECT_THAT(problems[0], HasSubstr("conveyor_key_setting.struct_size is"));
  EXPECT_EQ(cut.burst, 7u) << "what struct_size covers is read";
  EXPECT_EQ(cut.weight, 0u) << "what it does not cover is not";
  EXPECT_EQ(cut.updated_at, 0);

  conveyor_key_setting null_key = k;
  null_key.key = conveyor_str{nullptr, 3};
  problems.clear();
  EXPECT_EQ(copy_key_setting(&null_key, problems).key, "");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("conveyor_key_setting.key has data NULL with len 3"));
}

// The binding's marshalling of the 1.5 slots, against a table of its own:
// what each call passes, what it returns, an out-parameter the plugin did
// not write, and a failure's status and message.
struct FakeKeySlots {
  static inline std::string queue, key, prefix;
  static inline int32_t target = -1;
  static inline uint32_t fields = 0, limit = 0;
  static inline int64_t now = 0, value_below = 0;
  static inline conveyor_key_setting seen{};
  static inline bool write_out = true;
  static inline bool fail = false;

  static conveyor_status failed(conveyor_error* err) {
    err->code = CONVEYOR_E_UNAVAILABLE;
    std::snprintf(err->message, sizeof err->message, "%s", "busy, try again");
    return CONVEYOR_E_UNAVAILABLE;
  }
  static conveyor_status set(conveyor_storage*, const conveyor_key_setting* s, int64_t now_us,
                             conveyor_error* err) {
    if (fail) return failed(err);
    seen = *s;
    queue.assign(s->queue.data, s->queue.len);
    key.assign(s->key.data, s->key.len);
    now = now_us;
    return CONVEYOR_OK;
  }
  static conveyor_status del(conveyor_storage*, conveyor_str q, int32_t t, conveyor_str k,
                             uint32_t f, int32_t* out, conveyor_error* err) {
    if (fail) return failed(err);
    queue.assign(q.data, q.len);
    key.assign(k.data == nullptr ? "" : std::string(k.data, k.len));
    target = t;
    fields = f;
    if (write_out) *out = 1;
    return CONVEYOR_OK;
  }
  static conveyor_status list(conveyor_storage*, conveyor_key_setting_fn fn, void* ctx,
                              conveyor_error* err) {
    if (fail) return failed(err);
    conveyor_key_setting a{};
    a.struct_size = sizeof a;
    a.fields = CONVEYOR_KEY_FIELD_WEIGHT;
    a.queue = sdk::str("q");
    a.key = sdk::str("a");
    a.weight = 3;
    a.updated_at_us = 42;
    fn(ctx, &a);
    conveyor_key_setting empty = a;  // a row with no field: a problem
    empty.key = sdk::str("b");
    empty.fields = 0;
    empty.weight = 0;
    fn(ctx, &empty);
    return CONVEYOR_OK;
  }
  static conveyor_status forget(conveyor_storage*, conveyor_str p, int64_t below, uint32_t l,
                                uint32_t* out, conveyor_error* err) {
    if (fail) return failed(err);
    prefix.assign(p.data, p.len);
    value_below = below;
    limit = l;
    if (write_out) *out = 2;
    return CONVEYOR_OK;
  }
  // add_shared_states: what it was passed (n, whether the arrays were NULL,
  // each add); it writes out[i] only for the indexes in written.
  static inline size_t adds_n = 0;
  static inline bool adds_null = false, out_null = false;
  static inline std::vector<std::string> add_keys;
  static inline std::vector<conveyor_shared_add> adds_seen;
  static inline std::vector<size_t> written;
  static conveyor_status adds(conveyor_storage*, const conveyor_shared_add* a, size_t n,
                              conveyor_shared_added* out, conveyor_error* err) {
    if (fail) return failed(err);
    adds_n = n;
    adds_null = a == nullptr;
    out_null = out == nullptr;
    add_keys.clear();
    adds_seen.clear();
    for (size_t i = 0; i < n && a != nullptr; ++i) {
      add_keys.emplace_back(a[i].key.data, a[i].key.len);
      adds_seen.push_back(a[i]);
    }
    for (size_t i : written)
      if (i < n && out != nullptr)
        out[i] = conveyor_shared_added{static_cast<int64_t>(10 + i), static_cast<int64_t>(100 + i),
                                       static_cast<uint32_t>(i), 0};
    return CONVEYOR_OK;
  }
  static conveyor_storage_plugin table() {
    conveyor_storage_plugin t{};
    t.struct_size = sizeof t;
    t.abi_major = CONVEYOR_ABI_MAJOR;
    t.abi_minor = CONVEYOR_ABI_MINOR;
    t.name = "fake";
    t.set_key_setting = &set;
    t.delete_key_setting = &del;
    t.list_key_settings = &list;
    t.delete_shared_states = &forget;
    t.add_shared_states = &adds;
    return t;
  }
};

TEST(KeySettingSlots, TheBindingPassesTheArgumentsAndCopiesTheResults) {
  const conveyor_storage_plugin table = FakeKeySlots::table();
  PluginBinding b(table, reinterpret_cast<conveyor_storage*>(0x1));
  ASSERT_TRUE(b.has_slot(StorageSlot::kSetKeySetting));
  FakeKeySlots::write_out = true;
  FakeKeySlots::fail = false;

  sdk::KeySetting s;
  s.queue = "mail";
  s.key = "tenant";
  s.fields = CONVEYOR_KEY_FIELD_RATE;
  s.rate_per_sec = 2.5;
  s.burst = 7;
  s.scope = CONVEYOR_SCOPE_FLEET;
  ASSERT_TRUE(b.set_key_setting(s.view(), kNow).ok());
  EXPECT_EQ(FakeKeySlots::queue, "mail");
  EXPECT_EQ(FakeKeySlots::key, "tenant");
  EXPECT_EQ(FakeKeySlots::now, kNow);
  EXPECT_EQ(FakeKeySlots::seen.struct_size, sizeof(conveyor_key_setting));
  EXPECT_EQ(FakeKeySlots::seen.fields, CONVEYOR_KEY_FIELD_RATE);
  EXPECT_EQ(FakeKeySlots::seen.rate_per_sec, 2.5);
  EXPECT_EQ(FakeKeySlots::seen.burst, 7u);
  EXPECT_EQ(FakeKeySlots::seen.scope, CONVEYOR_SCOPE_FLEET);

  Result<int32_t> cleared =
      b.delete_key_setting("mail", CONVEYOR_KEY_TARGET_EVERY, "", CONVEYOR_KEY_FIELD_WEIGHT);
  ASSERT_TRUE(cleared.ok()) << cleared.status.message;
  EXPECT_EQ(cleared.value, 1);
  EXPECT_EQ(FakeKeySlots::queue, "mail");
  EXPECT_EQ(FakeKeySlots::key, "");
  EXPECT_EQ(FakeKeySlots::target, CONVEYOR_KEY_TARGET_EVERY);
  EXPECT_EQ(FakeKeySlots::fields, CONVEYOR_KEY_FIELD_WEIGHT);

  Result<std::vector<KeySettingCopy>> listed = b.list_key_settings();
  ASSERT_TRUE(listed.ok()) << listed.status.message;
  ASSERT_EQ(listed.value.size(), 2u);
  EXPECT_EQ(listed.value[0].key, "a");
  EXPECT_EQ(listed.value[0].weight, 3u);
  EXPECT_EQ(listed.value[0].updated_at, 42);
  EXPECT_EQ(listed.value[1].key, "b");
  ASSERT_EQ(listed.problems.size(), 1u) << "the row with no field";
  EXPECT_THAT(listed.problems[0], HasSubstr("conveyor_key_setting.fields is 0"));

  Result<uint32_t> forgot = b.delete_shared_states("ratelimit.key:", -5, 64);
  ASSERT_TRUE(forgot.ok()) << forgot.status.message;
  EXPECT_EQ(forgot.value, 2u);
  EXPECT_EQ(FakeKeySlots::prefix, "ratelimit.key:");
  EXPECT_EQ(FakeKeySlots::value_below, -5);
  EXPECT_EQ(FakeKeySlots::limit, 64u);

  // add_shared_states: each add passed in order; out[i] as written.
  FakeKeySlots::written = {0, 1, 2};
  const std::vector<PluginBinding::KeyedAdd> adds = {{"ratelimit.key:a", 1, -2, 30, 4, 5, 6},
                                                     {"ratelimit.key:b", 0, 0, 100, 1, 1, 1},
                                                     {"ratelimit.key:c", 7, 8, 90, 10, 2, 3}};
  Result<std::vector<PluginBinding::SharedAdded>> added = b.add_shared_states(adds);
  ASSERT_TRUE(added.ok()) << added.status.message;
  ASSERT_EQ(FakeKeySlots::adds_n, 3u);
  EXPECT_EQ(FakeKeySlots::add_keys,
            (std::vector<std::string>{"ratelimit.key:a", "ratelimit.key:b", "ratelimit.key:c"}));
  const conveyor_shared_add& a0 = FakeKeySlots::adds_seen.at(0);
  EXPECT_EQ(a0.credit, 1);
  EXPECT_EQ(a0.low, -2);
  EXPECT_EQ(a0.high, 30);
  EXPECT_EQ(a0.unit, 4);
  EXPECT_EQ(a0.min_count, 5u);
  EXPECT_EQ(a0.max_count, 6u);
  EXPECT_EQ(FakeKeySlots::adds_seen.at(2).credit, 7);
  EXPECT_EQ(FakeKeySlots::adds_seen.at(2).max_count, 3u);
  ASSERT_EQ(added.value.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(added.value[i].version, static_cast<int64_t>(10 + i));
    EXPECT_EQ(added.value[i].value, static_cast<int64_t>(100 + i));
    EXPECT_EQ(added.value[i].count, i);
  }
  // No adds: n 0 with NULL arrays, no out.
  Result<std::vector<PluginBinding::SharedAdded>> none = b.add_shared_states({});
  ASSERT_TRUE(none.ok()) << none.status.message;
  EXPECT_EQ(FakeKeySlots::adds_n, 0u);
  EXPECT_TRUE(FakeKeySlots::adds_null);
  EXPECT_TRUE(FakeKeySlots::out_null);
  EXPECT_TRUE(none.value.empty());
  // The binding fills out with the unwritten markers before the call: what
  // the plugin leaves alone reads as them.
  FakeKeySlots::written = {1};
  added = b.add_shared_states(adds);
  ASSERT_TRUE(added.ok()) << added.status.message;
  ASSERT_EQ(added.value.size(), 3u);
  for (size_t i : {size_t{0}, size_t{2}}) {
    EXPECT_EQ(added.value[i].version, kUnwrittenValue) << "out[" << i << "]";
    EXPECT_EQ(added.value[i].value, kUnwrittenValue) << "out[" << i << "]";
    EXPECT_EQ(added.value[i].count, kUnwrittenCount) << "out[" << i << "]";
  }
  EXPECT_EQ(added.value[1].version, 11);
  EXPECT_EQ(added.value[1].value, 101);
  EXPECT_EQ(added.value[1].count, 1u);

  // Out-parameters the plugin left alone read as the binding's markers.
  FakeKeySlots::write_out = false;
  EXPECT_EQ(b.delete_key_setting("q", CONVEYOR_KEY_TARGET_ONE, "k", 1).value, kUnwritten);
  EXPECT_EQ(b.delete_shared_states("p", 1, 1).value, kUnwrittenCount);

  // A failure carries the plugin's status and message.
  FakeKeySlots::fail = true;
  Status failed = b.set_key_setting(s.view(), kNow);
  EXPECT_EQ(failed.code, CONVEYOR_E_UNAVAILABLE);
  EXPECT_EQ(failed.message, "busy, try again");
  EXPECT_EQ(b.delete_key_setting("q", 0, "k", 1).status.code, CONVEYOR_E_UNAVAILABLE);
  EXPECT_EQ(b.list_key_settings().status.code, CONVEYOR_E_UNAVAILABLE);
  EXPECT_EQ(b.delete_shared_states("p", 1, 1).status.message, "busy, try again");
  Result<std::vector<PluginBinding::SharedAdded>> refused = b.add_shared_states(adds);
  EXPECT_EQ(refused.status.code, CONVEYOR_E_UNAVAILABLE);
  EXPECT_EQ(refused.status.message, "busy, try again");
}

}  // namespace
}  // namespace conveyor::host
