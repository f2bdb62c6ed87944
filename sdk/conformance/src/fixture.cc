#include "fixture.hpp"

#include "call_context.hpp"

#include <conveyor/conformance/suite.hpp>

#include <cstring>
#include <mutex>
#include <sstream>

namespace conveyor::conformance {
namespace {

// The plugin is loaded once per process; a load failure is kept and reported
// by every test.
struct LoadedOnce {
  std::once_flag once;
  std::shared_ptr<const Plugin> plugin;
  std::string error;
};

LoadedOnce& loaded() {
  static LoadedOnce l;
  std::call_once(l.once, [] {
    try {
      l.plugin = load_plugin(parameters().plugin);
    } catch (const std::exception& e) {
      l.error = e.what();
    }
  });
  return l;
}

conveyor_str cstr(std::string_view s) { return conveyor_str{s.data(), s.size()}; }

}  // namespace

std::string capability_label(uint64_t capability) {
  switch (capability) {
    case CONVEYOR_CAP_DURABLE:
      return "durable (CONVEYOR_CAP_DURABLE)";
    case CONVEYOR_CAP_MULTI_PROCESS:
      return "multi-process (CONVEYOR_CAP_MULTI_PROCESS)";
    case CONVEYOR_CAP_MULTI_HOST:
      return "multi-host (CONVEYOR_CAP_MULTI_HOST)";
    case CONVEYOR_CAP_NOTIFY:
      return "notify (CONVEYOR_CAP_NOTIFY)";
    case CONVEYOR_CAP_NOTIFY_DUE:
      return "notify when delayed jobs come due (CONVEYOR_CAP_NOTIFY_DUE)";
    default:
      return capability_names(capability);
  }
}

::testing::AssertionResult status_is(const char* actual_expr, const char*, conveyor_status actual,
                                     conveyor_status expected) {
  if (actual == expected) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << actual_expr << " is " << status_name(actual) << ", expected " << status_name(expected);
}

::testing::AssertionResult state_is(const char* actual_expr, const char*, int32_t actual,
                                    int32_t expected) {
  if (actual == expected) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << actual_expr << " is " << state_name(actual) << ", expected " << state_name(expected);
}

void ConformanceTest::SetUp() {
  take_late_callbacks();  // a previous test's stragglers are not this test's
  ASSERT_TRUE(parameters_set())
      << "conformance parameters were not set: call conveyor::conformance::set_parameters() "
         "before RUN_ALL_TESTS()";
  LoadedOnce& l = loaded();
  ASSERT_TRUE(l.plugin) << l.error;
  plugin_ = l.plugin;
  storage_ = std::make_unique<FreshStorage>(parameters().options);
}

void ConformanceTest::TearDown() {
  for (const std::string& op : take_late_callbacks())
    ADD_FAILURE() << op << " called its callback after the call had returned (storage_plugin.h: "
                  << "strings a plugin hands to a callback are valid \"only during that callback\""
                  << "; callbacks belong to the call that was given them)";
  storage_.reset();
}

Status ConformanceTest::open_raw(const OptionList& extra, conveyor_storage** out) {
  OptionList all = options();
  all.insert(all.end(), extra.begin(), extra.end());
  std::vector<conveyor_option> c;
  for (const auto& [k, v] : all) c.push_back(conveyor_option{cstr(k), cstr(v)});
  conveyor_error err = poisoned_error();
  const conveyor_status code = table().open(c.empty() ? nullptr : c.data(), c.size(), out, &err);
  Status s;
  s.op = "open";
  s.code = code;
  if (code != CONVEYOR_OK) {
    s.message.assign(err.message, strnlen(err.message, sizeof err.message));
    if (std::string problems = check_error(code, err); !problems.empty())
      ADD_FAILURE() << "open returned " << status_name(code) << " but " << problems;
  }
  return s;
}

std::unique_ptr<Handle> ConformanceTest::open(bool migrate) {
  conveyor_storage* raw = nullptr;
  Status s = open_raw({}, &raw);
  if (!s.ok())
    throw CallFailed("open with " + storage_->describe() + " returned " + status_name(s.code) +
                     ": \"" + s.message + "\"");
  if (raw == nullptr)
    throw CallFailed(
        "open returned CONVEYOR_OK but left *out NULL (storage_plugin.h: "
        "\"Success: *out is a new handle\")");
  auto handle = std::make_unique<Handle>(plugin_, raw);
  if (!migrate) return handle;
  Status m = handle->migrate();
  if (!m.ok()) {
    std::ostringstream msg;
    msg << m << " on fresh storage opened with " << storage_->describe();
    throw CallFailed(msg.str());
  }
  if (opened_++ == 0) {
    // Every test assumes it starts from nothing; shared storage would make
    // counts and listings meaningless.
    std::vector<QueueCopy> queues = handle->queues();
    std::vector<LimitCopy> limits = handle->limits();
    if (!queues.empty() || !limits.empty())
      throw CallFailed("the storage opened with " + storage_->describe() + " is not empty (" +
                       std::to_string(queues.size()) + " queues, " + std::to_string(limits.size()) +
                       " rate limits): every test needs fresh storage; use @tmp, @tmpdir or "
                       "@unique in an option (see conveyor-conformance --help)");
  }
  return handle;
}

}  // namespace conveyor::conformance
