// The version handshake as a plugin author sees it: a plugin built against
// the frozen 1.0 header loads on this host; one that claims a newer minor
// loads with the slots this host knows; one of another major is refused with
// both sides' versions. Checked through the loader and through
// `conveyor plugin info`, the command an author runs to debug a load.
#include "test_support.hpp"

#include <conveyor/storage_plugin.h>
#include <conveyor/engine.hpp>
#include <conveyor/host/plugin_loader.hpp>
#include <conveyor/internal/storage.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace conveyor {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

const fs::path kV1_0Plugin = CONVEYOR_ABI_V1_0_PLUGIN;
const fs::path kTestPluginDir = CONVEYOR_TEST_BROKEN_PLUGIN_DIR;
const std::string kHostAbi =
    std::to_string(CONVEYOR_ABI_MAJOR) + "." + std::to_string(CONVEYOR_ABI_MINOR);

json plugin_info_json(const fs::path& plugin) {
  test::CommandResult r = test::run_conveyor({"--json", "plugin", "info", plugin.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? json::parse(r.out) : json::object();
}

TEST(VersionHandshake, PluginBuiltAgainstTheV1_0HeaderLoads) {
  std::shared_ptr<const Plugin> plugin = load_plugin(kV1_0Plugin);
  const PluginInfo& info = plugin->info();
  EXPECT_EQ(info.abi_major, 1u);
  EXPECT_EQ(info.abi_minor, 0u) << "the plugin was not built against tests/abi/v1_0";
  EXPECT_EQ(info.struct_size, CONVEYOR_PLUGIN_V1_0_SIZE);
  // Every slot after 1.0 is missing, and listed as such (`conveyor plugin info`).
  EXPECT_THAT(
      info.optional_slots_missing,
      ::testing::ElementsAre(
          "enqueue_v2", "claim_kinds", "list_jobs", "retry_jobs", "delete_jobs", "job_counts",
          "rescue_expired_v2", "swap_shared_state", "set_rate_limit_v2", "enqueue_v3",
          "add_shared_state", "enqueue_v4", "claim_keys", "list_ready_keys", "set_key_setting",
          "delete_key_setting", "list_key_settings", "delete_shared_states", "add_shared_states",
          "enqueue_v5"));
  // The host's copy holds the plugin's 1.0 prefix; every slot a later minor
  // appended is NULL, so the host never calls what the plugin does not have.
  const conveyor_storage_plugin& table = plugin->table();
  EXPECT_EQ(table.struct_size, CONVEYOR_PLUGIN_V1_0_SIZE);
  const auto* bytes = reinterpret_cast<const unsigned char*>(&table);
  for (size_t at = CONVEYOR_PLUGIN_V1_0_SIZE; at < sizeof table; ++at)
    EXPECT_EQ(bytes[at], 0) << "byte " << at << " of the host's table is beyond the plugin's";
}

// A call a 1.0 plugin (memory_c) must refuse: it throws UNSUPPORTED naming the
// plugin, its ABI, what needs which ABI (abi) and the slot it lacks.
void expect_refused_by_v1_0(const std::string& abi, const std::function<void()>& call,
                            const std::string& need, const std::string& slot) {
  try {
    call();
    ADD_FAILURE() << need << " on a 1.0 plugin did not throw";
  } catch (const StorageError& e) {
    EXPECT_EQ(e.code(), CONVEYOR_E_UNSUPPORTED);
    EXPECT_THAT(e.what(), HasSubstr("storage plugin 'memory_c' implements ABI 1.0; " + need +
                                    " needs ABI " + abi + " (slot " + slot + ")"));
  }
}

// A 1.0 plugin runs on this 1.1 host; every 1.1 operation answers with an
// error naming the plugin and its ABI, never a crash (job counts fall back to
// the 1.0 queue_stats: the same answer, by a scan).
TEST(VersionHandshake, V1_0PluginRunsAndRefuses1_1FeaturesByName) {
  std::shared_ptr<Storage> storage = Storage::open(load_plugin(kV1_0Plugin), {{"name", "old"}});
  const int64_t now = 4'000'000'000'000'000;
  std::vector<NewJob> jobs = {{"q", "k", "{}", 0, 1, 0}, {"q", "k", "{}", 0, 1, 0}};
  std::vector<int64_t> ids = storage->enqueue(jobs, now);
  ASSERT_EQ(ids.size(), 2u);
  std::vector<Job> claimed = storage->claim("q", 1, 7, now, now + 1'000'000);
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(storage->fail(lease_of(claimed[0]), "boom", -1, now), CONVEYOR_OK);
  for (StorageSlot slot :
       {StorageSlot::kEnqueueV2, StorageSlot::kClaimKinds, StorageSlot::kListJobs,
        StorageSlot::kRetryJobs, StorageSlot::kDeleteJobs, StorageSlot::kJobCounts})
    EXPECT_FALSE(storage->has_slot(slot)) << conveyor::host::slot_name(slot);

  JobQuery query;
  query.queue = "q";
  expect_refused_by_v1_0(
      "1.1", [&] { storage->list_jobs(query, now); }, "listing jobs", "list_jobs");
  const int64_t failed_id = claimed[0].id;
  expect_refused_by_v1_0(
      "1.1", [&] { storage->retry_jobs(std::span(&failed_id, 1), now); }, "retrying jobs",
      "retry_jobs");
  expect_refused_by_v1_0(
      "1.1", [&] { storage->delete_jobs(std::span(&failed_id, 1)); }, "deleting jobs",
      "delete_jobs");
  const std::vector<std::string> kinds = {"k"};
  expect_refused_by_v1_0(
      "1.1", [&] { storage->claim_kinds("q", kinds, 1, 8, now, now + 1); },
      "claiming only some kinds", "claim_kinds");
  // Nothing changed by the refusals: the failed job is still failed.
  std::optional<Job> failed = storage->get_job(failed_id, now);
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->state, JobState::kFailed);
  // Counts fall back to queue_stats.
  std::vector<QueueStats> counts = storage->job_counts(now);
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts[0].pending, 1);
  EXPECT_EQ(counts[0].failed, 1);
  // claim_kinds without a filter is a plain claim, which 1.0 has.
  EXPECT_EQ(storage->claim_kinds("q", {}, 1, 9, now, now + 1).size(), 1u);
}

// ABI 1.2 on a 1.0 plugin: fleet limits, shared state and job costs are
// refused naming the plugin and the ABI they need; process limits and cost 1
// work as before, and the jobs read back cost 1.
TEST(VersionHandshake, V1_0PluginRefuses1_2FeaturesByName) {
  std::shared_ptr<Storage> storage = Storage::open(load_plugin(kV1_0Plugin), {{"name", "old12"}});
  const int64_t now = 4'000'000'000'000'000;
  for (StorageSlot slot :
       {StorageSlot::kSwapSharedState, StorageSlot::kSetRateLimitV2, StorageSlot::kEnqueueV3})
    EXPECT_FALSE(storage->has_slot(slot)) << conveyor::host::slot_name(slot);
  expect_refused_by_v1_0(
      "1.2", [&] { storage->swap_shared_state("ratelimit.enabled", -1, 0); },
      "sharing state across processes", "swap_shared_state");
  expect_refused_by_v1_0(
      "1.2", [&] { storage->set_rate_limit("q", make_rate_limit(5, 0, LimitScope::kFleet), now); },
      "a fleet-wide rate limit", "set_rate_limit_v2");
  NewJob costly{"q", "k", "{}", 0, 1, 0};
  costly.cost = 3;
  expect_refused_by_v1_0(
      "1.2", [&] { storage->enqueue(std::span(&costly, 1), now); }, "a job cost other than 1",
      "enqueue_v3");
  EXPECT_TRUE(storage->list_rate_limits().empty()) << "the refused fleet limit was stored";
  EXPECT_TRUE(storage->claim("q", 10, 5, now, now + 1).empty())
      << "the refused costly job was stored";
  // Process-wide limits and cost 1 work, reported as such.
  storage->set_rate_limit("q", make_rate_limit(5, 0), now);
  std::vector<RateLimitOverride> limits = storage->list_rate_limits();
  ASSERT_EQ(limits.size(), 1u);
  EXPECT_EQ(limits[0].limit.scope, LimitScope::kProcess);
  NewJob plain{"q", "k", "{}", 0, 1, 0};
  const int64_t id = storage->enqueue(std::span(&plain, 1), now).at(0);
  EXPECT_EQ(storage->get_job(id, now)->cost, 1);
}

// The same through the engine, the API the CLI and the server call.
TEST(VersionHandshake, EngineOnAV1_0PluginNamesItsAbiForJobOperations) {
  Config c;
  c.storage.plugin = kV1_0Plugin.string();
  c.storage.options = {{"name", "engine_old"}};
  Engine engine(c);
  const int64_t id = engine.enqueue("q", "k", "{}");
  try {
    engine.list_jobs(JobQuery{.queue = "q"});
    ADD_FAILURE() << "list_jobs on a 1.0 plugin did not throw";
  } catch (const StorageError& e) {
    EXPECT_EQ(e.code(), CONVEYOR_E_UNSUPPORTED);
    EXPECT_THAT(e.what(), HasSubstr("storage plugin 'memory_c' implements ABI 1.0; listing jobs "
                                    "needs ABI 1.1"));
  }
  EXPECT_THROW(engine.retry_jobs(std::span(&id, 1)), StorageError);
  EXPECT_THROW(engine.delete_jobs(std::span(&id, 1)), StorageError);
  // Counts work (queue_stats), and the job is untouched.
  std::vector<QueueStats> counts = engine.job_counts();
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts[0].pending, 1);
  EXPECT_EQ(engine.get_job(id)->state, JobState::kAvailable);
}

TEST(VersionHandshake, PluginInfoShowsAV1_0Plugin) {
  json info = plugin_info_json(kV1_0Plugin);
  EXPECT_EQ(info.value("abi_version", ""), "1.0");
  EXPECT_EQ(info.value("host_abi_version", ""), kHostAbi);
  EXPECT_EQ(info.value("table_size", 0u), CONVEYOR_PLUGIN_V1_0_SIZE);
  EXPECT_EQ(info.value("path", ""), fs::canonical(kV1_0Plugin).string());
  EXPECT_EQ(info.value("entry_symbol", ""), CONVEYOR_PLUGIN_ENTRY_SYMBOL);
}

TEST(VersionHandshake, PluginInfoShowsANewerMinorBesideTheHosts) {
  const fs::path newer = kTestPluginDir / "libconveyor-newer_minor.so";
  json info = plugin_info_json(newer);
  EXPECT_EQ(info.value("abi_version", ""),
            std::to_string(CONVEYOR_ABI_MAJOR) + "." + std::to_string(CONVEYOR_ABI_MINOR + 1));
  EXPECT_EQ(info.value("host_abi_version", ""), kHostAbi);
  // Its table is one slot longer than the host's: loaded, the extra slot unused.
  EXPECT_EQ(info.value("table_size", 0u), sizeof(conveyor_storage_plugin) + sizeof(void (*)()));
}

TEST(VersionHandshake, AnotherMajorIsRefusedNamingBothVersions) {
  const fs::path other = kTestPluginDir / "libconveyor-wrong_major.so";
  test::CommandResult r = test::run_conveyor({"plugin", "info", other.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr(fs::canonical(other).string()));
  EXPECT_THAT(r.err, HasSubstr("plugin speaks ABI " + std::to_string(CONVEYOR_ABI_MAJOR + 1) +
                               ".0, this conveyor speaks " + kHostAbi));
}

// `conveyor plugin info` on a library the loader refuses: what it found up
// to the refusal on stdout, the refusal on stderr, exit 1.
TEST(VersionHandshake, PluginInfoShowsWhatItFoundWhenALoadFails) {
  const fs::path broken = kTestPluginDir / "libconveyor-null_slot.so";
  test::CommandResult r = test::run_conveyor({"plugin", "info", broken.string()});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.out, HasSubstr("path:          " + fs::canonical(broken).string() + "\n"));
  EXPECT_THAT(r.out, HasSubstr("entry symbol:  " CONVEYOR_PLUGIN_ENTRY_SYMBOL " (found)\n"));
  EXPECT_THAT(r.out, HasSubstr("ABI version:   " + kHostAbi + " (host speaks " + kHostAbi + ")\n"));
  EXPECT_THAT(r.out, HasSubstr("table size:    " + std::to_string(sizeof(conveyor_storage_plugin)) +
                               " bytes\n"));
  EXPECT_THAT(r.out, HasSubstr("required slots missing: claim\n"));
  EXPECT_THAT(r.err, HasSubstr("required slot claim is NULL"));

  r = test::run_conveyor({"--json", "plugin", "info", broken.string()});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j.value("loads", true), false);
  EXPECT_EQ(j.value("entry_symbol_found", false), true);
  EXPECT_EQ(j.value("required_slots_missing", json::array()), json::array({"claim"}));
  EXPECT_EQ(j.value("abi_version", ""), kHostAbi);
  EXPECT_THAT(j.value("error", ""), HasSubstr("required slot claim is NULL"));
}

TEST(VersionHandshake, PluginInfoSaysWhenTheEntrySymbolIsMissing) {
  const fs::path broken = kTestPluginDir / "libconveyor-no_entry.so";
  test::CommandResult r = test::run_conveyor({"plugin", "info", broken.string()});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.out, HasSubstr("path:          " + fs::canonical(broken).string() + "\n"));
  EXPECT_THAT(r.out, HasSubstr("entry symbol:  " CONVEYOR_PLUGIN_ENTRY_SYMBOL " (NOT FOUND)\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("ABI version")));
  EXPECT_THAT(r.err, HasSubstr("does not export " CONVEYOR_PLUGIN_ENTRY_SYMBOL));
}

}  // namespace
}  // namespace conveyor
