// The version handshake as a plugin author sees it: a plugin built against
// the frozen 1.0 header loads on this host; one that claims a newer minor
// loads with the slots this host knows; one of another major is refused with
// both sides' versions. Checked through the loader and through
// `conveyor plugin info`, the command an author runs to debug a load.
#include "test_support.hpp"

#include <conveyor/storage_plugin.h>
#include <conveyor/plugin_loader.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

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
  EXPECT_TRUE(info.optional_slots_missing.empty());
  // The host's copy holds the plugin's 1.0 prefix; every slot a later minor
  // appended (none while the host is 1.0) is NULL, so the host never calls
  // what the plugin does not have.
  const conveyor_storage_plugin& table = plugin->table();
  EXPECT_EQ(table.struct_size, CONVEYOR_PLUGIN_V1_0_SIZE);
  const auto* bytes = reinterpret_cast<const unsigned char*>(&table);
  for (size_t at = CONVEYOR_PLUGIN_V1_0_SIZE; at < sizeof table; ++at)
    EXPECT_EQ(bytes[at], 0) << "byte " << at << " of the host's table is beyond the plugin's";
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
