// The plugin loader against real shared libraries: deliberately broken test
// plugins (tests/plugins) must be refused with messages naming the file and
// the reason; a plugin from a newer minor (more slots, or a kind and
// capability bits this host does not know) and a throwing C++ plugin must
// load and behave; the real sqlite plugin must load when it has been built.
#include <conveyor/storage_plugin.h>
#include <conveyor/host/plugin_loader.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace conveyor {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const fs::path kBrokenDir = CONVEYOR_TEST_BROKEN_PLUGIN_DIR;
const fs::path kPluginDir = CONVEYOR_TEST_PLUGIN_DIR;

fs::path test_plugin(const std::string& name) {
  return kBrokenDir / ("libconveyor-" + name + ".so");
}

// The message load_plugin throws for path; fails the test if it loads.
std::string load_error(const fs::path& path) {
  try {
    load_plugin(path);
  } catch (const PluginLoadError& e) {
    return e.what();
  }
  ADD_FAILURE() << "load_plugin(" << path << ") did not throw PluginLoadError";
  return {};
}

// The prefix every refusal starts with; the loader names the canonical file.
std::string prefix_for(const fs::path& path) {
  return "cannot load storage plugin " + fs::weakly_canonical(path).string() + ": ";
}

// Sets (or unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A fresh directory under the system temp dir, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "conveyor-loader-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

conveyor_str str(const char* s) { return conveyor_str{s, std::strlen(s)}; }

// ---------------------------------------------------------------- refusals

TEST(PluginLoader, MissingFileIsNotFound) {
  const fs::path path = kBrokenDir / "libconveyor-does_not_exist.so";
  const std::string msg = load_error(path);
  EXPECT_THAT(msg, StartsWith("cannot load storage plugin " + path.string() + ": "));
  EXPECT_THAT(msg, HasSubstr("file not found"));
  EXPECT_THAT(msg, HasSubstr("[storage] plugin"));
}

TEST(PluginLoader, TextFileIsNotASharedLibrary) {
  const fs::path path = kBrokenDir / "libnot_a_library.so";
  ASSERT_TRUE(fs::exists(path)) << "tests/plugins/CMakeLists.txt writes " << path;
  const std::string msg = load_error(path);
  EXPECT_THAT(msg, StartsWith(prefix_for(path)));
  EXPECT_THAT(msg, HasSubstr("not a shared library"));
  // The dynamic loader's own reason is passed on.
  EXPECT_THAT(msg, HasSubstr("invalid ELF header"));
}

TEST(PluginLoader, DirectoryIsNotARegularFile) {
  const std::string msg = load_error(kBrokenDir);
  EXPECT_THAT(msg, StartsWith(prefix_for(kBrokenDir)));
  EXPECT_THAT(msg, HasSubstr("not a regular file"));
}

TEST(PluginLoader, RunningExecutableIsRefused) {
  const std::string msg = load_error("/proc/self/exe");
  EXPECT_THAT(msg, HasSubstr("running executable, not a storage plugin"));
}

TEST(PluginLoader, MissingEntrySymbol) {
  const fs::path path = test_plugin("no_entry");
  const std::string msg = load_error(path);
  EXPECT_THAT(msg, StartsWith(prefix_for(path)));
  EXPECT_THAT(msg, HasSubstr("does not export conveyor_storage_plugin_entry; build it with "
                             "CONVEYOR_EXPORT_STORAGE_PLUGIN or export the function from "
                             "storage_plugin.h"));
}

TEST(PluginLoader, EntryReturningNull) {
  const fs::path path = test_plugin("entry_null");
  const std::string msg = load_error(path);
  EXPECT_THAT(msg, StartsWith(prefix_for(path)));
  EXPECT_THAT(msg, HasSubstr("returned NULL"));
  EXPECT_THAT(msg, HasSubstr("the plugin does not support ABI major 1"));
}

TEST(PluginLoader, WrongMajorNamesBothVersions) {
  const fs::path path = test_plugin("wrong_major");
  const std::string msg = load_error(path);
  EXPECT_THAT(msg, StartsWith(prefix_for(path)));
  EXPECT_THAT(msg, HasSubstr("plugin speaks ABI 2.0, this conveyor speaks 1." +
                             std::to_string(CONVEYOR_ABI_MINOR)));
}

TEST(PluginLoader, ShortTable) {
  const fs::path path = test_plugin("short_table");
  const std::string msg = load_error(path);
  EXPECT_THAT(msg, StartsWith(prefix_for(path)));
  EXPECT_THAT(
      msg,
      HasSubstr("function table is " + std::to_string(offsetof(conveyor_storage_plugin, claim)) +
                " bytes, at least " + std::to_string(CONVEYOR_PLUGIN_V1_0_SIZE) + " required"));
}

TEST(PluginLoader, NullRequiredSlotIsNamed) {
  const fs::path path = test_plugin("null_slot");
  const std::string msg = load_error(path);
  EXPECT_THAT(msg, StartsWith(prefix_for(path)));
  EXPECT_THAT(msg, HasSubstr("required slot claim is NULL"));
  // Only the NULL slot is named, not its neighbours.
  EXPECT_THAT(msg, Not(HasSubstr("enqueue")));
  EXPECT_THAT(msg, Not(HasSubstr("complete")));
}

TEST(PluginLoader, NotifyCapabilityWithoutWaitSlot) {
  const fs::path path = test_plugin("notify_without_slot");
  const std::string msg = load_error(path);
  EXPECT_THAT(msg, StartsWith(prefix_for(path)));
  EXPECT_THAT(msg, HasSubstr("notify capability but wait_for_notification is NULL"));
}

// A kind and a capability bit from a newer minor load (storage_plugin.h rule
// 7): PluginInfo says what the host does not know, and one warning per file
// names the plugin and the values, however often it is loaded.
TEST(PluginLoader, UnknownKindAndCapabilityBitsLoadWithOneWarning) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  auto logger = std::make_shared<spdlog::logger>("loader-test", sink);
  const std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  const fs::path path = test_plugin("unknown_kind");
  std::shared_ptr<const Plugin> plugin;
  try {
    plugin = load_plugin(path);
    load_plugin(path);  // again: no second warning
  } catch (const PluginLoadError& e) {
    ADD_FAILURE() << e.what();
  }
  spdlog::set_default_logger(previous);
  ASSERT_NE(plugin, nullptr);

  const PluginInfo& info = plugin->info();
  EXPECT_EQ(info.kind, 99u);
  EXPECT_FALSE(info.kind_known);
  EXPECT_EQ(info.capabilities, CONVEYOR_CAP_DURABLE | (uint64_t{1} << 40));
  EXPECT_EQ(info.unknown_capabilities, uint64_t{1} << 40);
  EXPECT_FALSE(info.has_notify);
  EXPECT_EQ(kind_name(info.kind), "unknown(99)");
  EXPECT_EQ(capability_names(info.capabilities), "durable,bit40");

  const std::vector<std::string> lines = sink->last_formatted();
  int kind_lines = 0, cap_lines = 0;
  for (const std::string& line : lines) {
    EXPECT_THAT(line, HasSubstr("[warning]"));
    EXPECT_THAT(line, HasSubstr("'unknown_kind'"));
    if (line.find("declares kind 99") != std::string::npos) ++kind_lines;
    if (line.find("capability bits 0x10000000000 (bit40)") != std::string::npos) ++cap_lines;
  }
  EXPECT_EQ(kind_lines, 1) << ::testing::PrintToString(lines);
  EXPECT_EQ(cap_lines, 1) << ::testing::PrintToString(lines);
  EXPECT_EQ(lines.size(), 2u) << ::testing::PrintToString(lines);

  // diagnose_plugin (conveyor plugin info) reports the same facts.
  const PluginDiagnosis d = diagnose_plugin(path);
  EXPECT_TRUE(d.error.empty()) << d.error;
  EXPECT_FALSE(d.kind_known);
  EXPECT_EQ(d.unknown_capabilities, uint64_t{1} << 40);
}

// Notifications depend on the notify capability and its slot only.
TEST(PluginLoader, HasNotifyNeedsTheCapabilityAndTheSlot) {
  EXPECT_TRUE(load_plugin(test_plugin("reentry_guard"))->info().has_notify);
  EXPECT_FALSE(load_plugin(test_plugin("newer_minor"))->info().has_notify);  // neither
}

TEST(PluginLoader, NullName) {
  const fs::path path = test_plugin("null_name");
  const std::string msg = load_error(path);
  EXPECT_THAT(msg, StartsWith(prefix_for(path)));
  EXPECT_THAT(msg, HasSubstr("has no name"));
}

TEST(PluginLoader, ThrowingEntryIsCaught) {
  const fs::path path = test_plugin("entry_throws");
  const std::string msg = load_error(path);
  EXPECT_THAT(msg, StartsWith(prefix_for(path)));
  EXPECT_THAT(msg, HasSubstr("conveyor_storage_plugin_entry threw an exception (entry exploded)"));
}

// ---------------------------------------------- a plugin from a newer minor

struct Claimed {
  std::vector<int64_t> ids;
  std::vector<int64_t> tokens;
  std::vector<int32_t> attempts;
  std::vector<std::string> payloads;
};

void collect_claimed(void* ctx, const conveyor_job* job) {
  auto* out = static_cast<Claimed*>(ctx);
  out->ids.push_back(job->id);
  out->tokens.push_back(job->lease_token);
  out->attempts.push_back(job->attempt);
  out->payloads.emplace_back(job->payload.data, job->payload.len);
}

void collect_state(void* ctx, const conveyor_job* job) { *static_cast<int32_t*>(ctx) = job->state; }

// Drives one enqueue / claim / complete round through a table copy.
void exercise_in_memory_plugin(const conveyor_storage_plugin& t) {
  conveyor_error err{};
  conveyor_storage* storage = nullptr;
  ASSERT_EQ(t.open(nullptr, 0, &storage, &err), CONVEYOR_OK) << err.message;
  ASSERT_NE(storage, nullptr);
  ASSERT_EQ(t.migrate(storage, &err), CONVEYOR_OK) << err.message;

  const int64_t now = 1'000'000;
  conveyor_new_job jobs[2] = {
      {str("default"), str("email"), str("{\"n\":1}"), 0, 3, now},
      {str("default"), str("email"), str("{\"n\":2}"), -1, 3, now},  // runs first
  };
  int64_t ids[2] = {};
  ASSERT_EQ(t.enqueue(storage, jobs, 2, ids, &err), CONVEYOR_OK) << err.message;
  EXPECT_GT(ids[0], 0);
  EXPECT_NE(ids[0], ids[1]);

  Claimed claimed;
  uint32_t n = 0;
  ASSERT_EQ(t.claim(storage, str("default"), 10, /*lease_token=*/77, now, now + 30'000'000,
                    &collect_claimed, &claimed, &n, &err),
            CONVEYOR_OK)
      << err.message;
  ASSERT_EQ(n, 2u);
  ASSERT_EQ(claimed.ids.size(), 2u);
  EXPECT_EQ(claimed.ids[0], ids[1]);  // priority -1 before 0
  EXPECT_EQ(claimed.ids[1], ids[0]);
  EXPECT_EQ(claimed.payloads[0], "{\"n\":2}");
  EXPECT_EQ(claimed.tokens[0], 77);
  EXPECT_EQ(claimed.attempts[0], 1);

  const conveyor_lease leases[2] = {{ids[0], 77}, {ids[1], 78}};  // second: wrong token
  conveyor_status results[2] = {-1, -1};
  ASSERT_EQ(t.complete(storage, leases, 2, now + 1, results, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(results[0], CONVEYOR_OK);
  EXPECT_EQ(results[1], CONVEYOR_E_LEASE_LOST);

  int32_t state = 0;
  ASSERT_EQ(t.get_job(storage, ids[0], now + 2, &collect_state, &state, &err), CONVEYOR_OK);
  EXPECT_EQ(state, CONVEYOR_JOB_COMPLETED);
  ASSERT_EQ(t.get_job(storage, ids[1], now + 2, &collect_state, &state, &err), CONVEYOR_OK);
  EXPECT_EQ(state, CONVEYOR_JOB_RUNNING);

  std::vector<std::string> queues;
  ASSERT_EQ(t.list_queues(
                storage,
                [](void* ctx, conveyor_str queue, int32_t) {
                  static_cast<std::vector<std::string>*>(ctx)->emplace_back(queue.data, queue.len);
                },
                &queues, &err),
            CONVEYOR_OK)
      << err.message;
  EXPECT_EQ(queues, std::vector<std::string>{"default"});

  t.close(storage);
}

TEST(PluginLoader, NewerMinorLoadsWithTheHostsSlots) {
  const fs::path path = test_plugin("newer_minor");
  std::shared_ptr<const Plugin> plugin = load_plugin(path);
  ASSERT_NE(plugin, nullptr);

  const PluginInfo& info = plugin->info();
  EXPECT_EQ(info.path, fs::canonical(path));
  EXPECT_TRUE(info.path.is_absolute());
  EXPECT_EQ(info.name, "newer_minor");
  EXPECT_EQ(info.version, "0.0.1");
  EXPECT_EQ(info.kind, uint32_t{CONVEYOR_KIND_CANONICAL});
  EXPECT_EQ(info.capabilities, 0u);
  EXPECT_EQ(info.abi_major, uint32_t{CONVEYOR_ABI_MAJOR});
  EXPECT_EQ(info.abi_minor, uint32_t{CONVEYOR_ABI_MINOR + 1});
  // The plugin's table is one slot larger than the host's struct.
  EXPECT_EQ(info.struct_size, sizeof(conveyor_storage_plugin) + sizeof(void (*)()));
  EXPECT_GT(info.struct_size, sizeof(conveyor_storage_plugin));
  // It is memory_c's table, which has no ABI 1.2 to 1.5 slots.
  EXPECT_EQ(info.optional_slots_missing,
            (std::vector<std::string>{"wait_for_notification", "swap_shared_state",
                                      "set_rate_limit_v2", "enqueue_v3", "add_shared_state",
                                      "enqueue_v4", "claim_keys", "list_ready_keys",
                                      "set_key_setting", "delete_key_setting", "list_key_settings",
                                      "delete_shared_states", "add_shared_states",
                                      "enqueue_v5"}));

  // The host copy is the host's size and says so.
  const conveyor_storage_plugin& t = plugin->table();
  EXPECT_EQ(t.struct_size, sizeof(conveyor_storage_plugin));
  EXPECT_EQ(t.abi_minor, uint32_t{CONVEYOR_ABI_MINOR + 1});
  EXPECT_EQ(t.wait_for_notification, nullptr);

  exercise_in_memory_plugin(t);
}

TEST(PluginLoader, PluginRejectsUnknownOption) {
  auto plugin = load_plugin(test_plugin("newer_minor"));
  const conveyor_option option{str("path"), str("/tmp/x")};
  conveyor_error err{};
  conveyor_storage* storage = nullptr;
  EXPECT_EQ(plugin->table().open(&option, 1, &storage, &err), CONVEYOR_E_INVALID);
  EXPECT_THAT(err.message, HasSubstr("'path'"));
  EXPECT_EQ(storage, nullptr);
}

TEST(PluginLoader, LoadsThroughSymlinkAndRelativePath) {
  TempDir dir;
  const fs::path target = fs::canonical(test_plugin("newer_minor"));
  const fs::path link = dir.path() / "libconveyor-linked.so";
  fs::create_symlink(target, link);
  EXPECT_EQ(load_plugin(link)->info().path, target);

  const fs::path relative = fs::relative(target, fs::current_path());
  ASSERT_TRUE(relative.is_relative());
  EXPECT_EQ(load_plugin(relative)->info().path, target);
}

// ----------------------------------------------------------- exceptions

TEST(PluginLoader, ThrowingCppPluginReturnsInternal) {
  std::shared_ptr<const Plugin> plugin = load_plugin(test_plugin("throws"));
  const PluginInfo& info = plugin->info();
  EXPECT_EQ(info.name, "throws");
  EXPECT_EQ(info.abi_minor, uint32_t{CONVEYOR_ABI_MINOR});
  EXPECT_EQ(info.struct_size, sizeof(conveyor_storage_plugin));
  // It implements wait_for_notification (throwing), so the helper advertises
  // notify; it has none of the 1.1 methods, so the helper leaves those NULL.
  EXPECT_THAT(
      info.optional_slots_missing,
      ::testing::ElementsAre("enqueue_v2", "claim_kinds", "list_jobs", "retry_jobs", "delete_jobs",
                             "job_counts", "rescue_expired_v2", "swap_shared_state",
                             "set_rate_limit_v2", "enqueue_v3", "add_shared_state", "enqueue_v4",
                             "claim_keys", "list_ready_keys", "set_key_setting",
                             "delete_key_setting", "list_key_settings", "delete_shared_states",
                             "add_shared_states", "enqueue_v5"));
  EXPECT_NE(info.capabilities & CONVEYOR_CAP_NOTIFY, 0u);

  const conveyor_storage_plugin& t = plugin->table();
  conveyor_error err{};
  conveyor_storage* storage = nullptr;
  ASSERT_EQ(t.open(nullptr, 0, &storage, &err), CONVEYOR_OK) << err.message;
  ASSERT_NE(storage, nullptr);

  err = conveyor_error{};
  uint32_t n = 99;
  Claimed claimed;
  EXPECT_EQ(t.claim(storage, str("default"), 1, 5, 0, 1, &collect_claimed, &claimed, &n, &err),
            CONVEYOR_E_INTERNAL);
  EXPECT_EQ(err.code, CONVEYOR_E_INTERNAL);
  EXPECT_THAT(err.message, HasSubstr("boom from plugin"));
  EXPECT_TRUE(claimed.ids.empty());

  err = conveyor_error{};
  EXPECT_EQ(t.migrate(storage, &err), CONVEYOR_E_INTERNAL);
  EXPECT_THAT(err.message, HasSubstr("boom from plugin"));

  // A thrown int is not a std::exception: the catch-all names it.
  err = conveyor_error{};
  int64_t marker = 0;
  EXPECT_EQ(t.change_marker(storage, &marker, &err), CONVEYOR_E_INTERNAL);
  EXPECT_THAT(err.message, HasSubstr("unknown exception"));

  err = conveyor_error{};
  EXPECT_EQ(t.wait_for_notification(
                storage, 1000, [](void*, int32_t, conveyor_str) {}, nullptr, &err),
            CONVEYOR_E_INTERNAL);
  EXPECT_THAT(err.message, HasSubstr("boom from plugin"));

  // A NULL err is allowed: the status alone comes back.
  EXPECT_EQ(t.cancel(storage, 1, 0, nullptr), CONVEYOR_E_INTERNAL);

  t.close(storage);
}

// ------------------------------------------------------------- lifetime

TEST(PluginLoader, AliasingPointerKeepsLibraryMapped) {
  const fs::path path = fs::canonical(test_plugin("newer_minor"));
  std::weak_ptr<const Plugin> weak;
  std::shared_ptr<const conveyor_storage_plugin> table;
  {
    std::shared_ptr<const Plugin> plugin = load_plugin(path);
    weak = plugin;
    // The pattern the core uses: a pointer to the table that owns the Plugin.
    table = std::shared_ptr<const conveyor_storage_plugin>(plugin, &plugin->table());
  }
  // Only the aliasing pointer is left; the Plugin and its library live on.
  ASSERT_FALSE(weak.expired());
  void* mapped = ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(mapped, nullptr) << "library unmapped while a table pointer is alive";
  ::dlclose(mapped);  // NOLOAD still took a reference: give it back

  exercise_in_memory_plugin(*table);

  // Dropping the last reference unloads the library: nothing leaks a handle.
  table.reset();
  EXPECT_TRUE(weak.expired());
  void* still = ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  EXPECT_EQ(still, nullptr) << "library still mapped after the last reference was dropped";
  if (still != nullptr) ::dlclose(still);
}

TEST(PluginLoader, ConcurrentLoadsAreSafe) {
  const fs::path good = test_plugin("newer_minor");
  const fs::path bad = test_plugin("null_slot");
  std::atomic<int> loaded{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < 20; ++j) {
        if (load_plugin(good)->info().name == "newer_minor") ++loaded;
        try {
          load_plugin(bad);
        } catch (const PluginLoadError& e) {
          if (std::string(e.what()).find("required slot claim") != std::string::npos) ++refused;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(loaded.load(), 160);
  EXPECT_EQ(refused.load(), 160);
}

// ------------------------------------------------------- name resolution

TEST(ResolvePluginPath, NameFoundInDirectory) {
  EXPECT_EQ(resolve_plugin_path("newer_minor", kBrokenDir.string()),
            kBrokenDir / "libconveyor-newer_minor.so");
}

TEST(ResolvePluginPath, NameNotFoundListsAvailablePlugins) {
  try {
    resolve_plugin_path("nosuch", kBrokenDir.string());
    FAIL() << "expected PluginLoadError";
  } catch (const PluginLoadError& e) {
    const std::string msg = e.what();
    EXPECT_THAT(msg, HasSubstr("storage plugin 'nosuch' not found in " + kBrokenDir.string()));
    EXPECT_THAT(msg, HasSubstr("available: "));
    EXPECT_THAT(msg, HasSubstr("entry_null, entry_throws, newer_minor, no_entry"));
    EXPECT_THAT(msg, HasSubstr("throws"));
    // Only libconveyor-NAME.so files are plugins.
    EXPECT_THAT(msg, Not(HasSubstr("not_a_library")));
    EXPECT_THAT(msg, HasSubstr("set [storage] plugin to one of these or to a path to a .so"));
  }
}

TEST(ResolvePluginPath, MissingDirectoryIsSaid) {
  try {
    resolve_plugin_path("sqlite", "/nonexistent/conveyor/plugins");
    FAIL() << "expected PluginLoadError";
  } catch (const PluginLoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("storage plugin 'sqlite' not found in "
                                    "/nonexistent/conveyor/plugins"));
    EXPECT_THAT(e.what(), HasSubstr("does not exist"));
  }
}

TEST(ResolvePluginPath, EmptyDirectoryHasNoPlugins) {
  TempDir dir;
  try {
    resolve_plugin_path("sqlite", dir.path().string());
    FAIL() << "expected PluginLoadError";
  } catch (const PluginLoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no plugins there"));
  }
}

TEST(ResolvePluginPath, PathFormsAreUsedAsGiven) {
  EXPECT_EQ(resolve_plugin_path("/opt/x/libfoo.so", "/ignored"), fs::path("/opt/x/libfoo.so"));
  EXPECT_EQ(resolve_plugin_path("./plugins/foo", "/ignored"), fs::path("./plugins/foo"));
  EXPECT_EQ(resolve_plugin_path("libfoo.so", "/ignored"), fs::path("libfoo.so"));
  // A missing file in path form is load_plugin's to report.
  EXPECT_THAT(load_error(resolve_plugin_path("/nonexistent/libfoo.so", "")),
              HasSubstr("file not found"));
}

TEST(ResolvePluginPath, InvalidNamesAreRefused) {
  for (const char* name : {"sql ite", "sqlite!", "..", "na\\me"}) {
    try {
      resolve_plugin_path(name, kBrokenDir.string());
      ADD_FAILURE() << "accepted " << name;
    } catch (const PluginLoadError& e) {
      EXPECT_THAT(e.what(), HasSubstr("is not valid")) << name;
      EXPECT_THAT(e.what(), HasSubstr(std::string("'") + name + "'"));
    }
  }
  EXPECT_THROW(resolve_plugin_path("", kBrokenDir.string()), PluginLoadError);
}

TEST(ResolvePluginPath, EmptyDirectoryArgumentUsesDefault) {
  ScopedEnv env("CONVEYOR_PLUGIN_DIR", kBrokenDir.c_str());
  EXPECT_EQ(resolve_plugin_path("newer_minor", ""),
            (kBrokenDir / "libconveyor-newer_minor.so").lexically_normal());
}

TEST(DefaultPluginDir, BesideTheExecutable) {
  ScopedEnv env("CONVEYOR_PLUGIN_DIR", nullptr);
  const fs::path dir = default_plugin_dir();
  EXPECT_TRUE(dir.is_absolute());
  EXPECT_EQ(dir, dir.lexically_normal());
  // integration_tests sits in <build>/bin; the plugins in <build>/lib/conveyor/plugins.
  EXPECT_EQ(fs::weakly_canonical(dir), fs::weakly_canonical(kPluginDir));
}

TEST(DefaultPluginDir, EnvironmentOverrides) {
  ScopedEnv env("CONVEYOR_PLUGIN_DIR", "/opt/conveyor/./plugins/");
  EXPECT_EQ(default_plugin_dir(), fs::path("/opt/conveyor/plugins/"));
}

// ----------------------------------------------------------------- names

TEST(PluginNames, KindNames) {
  EXPECT_EQ(kind_name(CONVEYOR_KIND_CANONICAL), "canonical");
  EXPECT_EQ(kind_name(CONVEYOR_KIND_QUEUE_STORAGE), "queue-storage");
  EXPECT_EQ(kind_name(7), "unknown(7)");
}

TEST(PluginNames, CapabilityNames) {
  EXPECT_EQ(capability_names(0), "none");
  EXPECT_EQ(capability_names(CONVEYOR_CAP_DURABLE), "durable");
  EXPECT_EQ(capability_names(CONVEYOR_CAP_NOTIFY | CONVEYOR_CAP_DURABLE | CONVEYOR_CAP_MULTI_HOST |
                             CONVEYOR_CAP_MULTI_PROCESS),
            "durable,multi-process,multi-host,notify");
  EXPECT_EQ(capability_names(CONVEYOR_CAP_NOTIFY | CONVEYOR_CAP_NOTIFY_DUE), "notify,notify-due");
  EXPECT_EQ(capability_names(CONVEYOR_CAP_DURABLE | (uint64_t{1} << 9)), "durable,bit9");
}

// ------------------------------------------------------ the real plugin

TEST(PluginLoader, SqlitePluginLoads) {
  const fs::path path = kPluginDir / "libconveyor-sqlite.so";
  if (!fs::exists(path)) GTEST_SKIP() << path << " not built yet";
  std::shared_ptr<const Plugin> plugin = load_plugin(path);
  const PluginInfo& info = plugin->info();
  EXPECT_EQ(info.name, "sqlite");
  EXPECT_EQ(info.kind, uint32_t{CONVEYOR_KIND_CANONICAL});
  EXPECT_EQ(info.abi_major, uint32_t{CONVEYOR_ABI_MAJOR});
  EXPECT_NE(info.capabilities & CONVEYOR_CAP_DURABLE, 0u);
  EXPECT_FALSE(info.version.empty());

  // And by name, from the default directory beside the executable.
  ScopedEnv env("CONVEYOR_PLUGIN_DIR", nullptr);
  EXPECT_EQ(fs::weakly_canonical(resolve_plugin_path("sqlite", "")), fs::weakly_canonical(path));
}

}  // namespace
}  // namespace conveyor
