// conveyor-conformance: runs the storage-plugin conformance suite against one
// plugin and says which behaviours it gets wrong.
//
//   conveyor-conformance --plugin PATH [--option key=value ...] [--filter GLOB] [--list]
//
// Exit codes: 0 every selected behaviour passed (skips allowed); 1 a behaviour
// failed, crashed or hung, or the plugin could not be loaded; 2 usage error
// (bad arguments, no such plugin file, a filter that selects nothing).
#include "isolated_run.hpp"
#include "report_listener.hpp"

#include <conveyor/conformance/suite.hpp>
#include <conveyor/host/plugin_loader.hpp>

#include <gtest/gtest.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>

namespace {

using conveyor::conformance::Outcome;
using conveyor::conformance::Result;

constexpr const char* kFooter =
    R"(Options are handed to the plugin's open() as its [storage.options]. Every
test gets fresh storage: these placeholders in a value are expanded anew
for each test (all handles of one test share the expansion):
  @tmp      a file path in a new, empty temporary directory (removed after the test)
  @tmpdir   that temporary directory itself
  @unique   an identifier unique to the test ([a-z0-9_], starts with a letter)
Examples:
  conveyor-conformance --plugin build/lib/conveyor/plugins/libconveyor-sqlite.so --option path=@tmp
  conveyor-conformance --plugin ./libmy-backend.so --option dsn=postgresql://127.0.0.1/db --option schema=conf_@unique

Tests are selected by the capabilities the plugin advertises; a test that
needs one the plugin lacks is reported as skipped with the reason. Each test
runs in a supervised process: a crash or hang fails that behaviour and the
run continues. GoogleTest flags may follow a "--".

Exit status: 0 all selected behaviours passed; 1 a behaviour failed (or the
plugin could not be loaded); 2 usage error.)";

int usage_error(const std::string& message) {
  std::cerr << "conveyor-conformance: " << message << " (see --help)\n";
  return 2;
}

std::vector<char*> gtest_argv(std::vector<std::string>& storage) {
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  return argv;
}

// Runs the suite in this process (GoogleTest reads its own flags from args).
int run_here(const std::string& argv0, const std::string& filter,
             const std::vector<std::string>& gtest_args,
             std::function<void(const std::string&)> sink) {
  std::vector<std::string> args = {argv0, "--gtest_filter=" + filter};
  args.insert(args.end(), gtest_args.begin(), gtest_args.end());
  std::vector<char*> argv = gtest_argv(args);
  int argc = static_cast<int>(args.size());
  ::testing::InitGoogleTest(&argc, argv.data());
  if (sink)
    ::testing::UnitTest::GetInstance()->listeners().Append(
        new conveyor::conformance::ReportListener(std::move(sink)));
  return RUN_ALL_TESTS();
}

// A temporary directory for one run, exported as TMPDIR to the processes
// started meanwhile and removed with everything in it when the run ends.
class RunTempDir {
 public:
  RunTempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "conveyor-conformance-run-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) return;  // children use the default TMPDIR
    dir_ = pattern;
    const char* old = std::getenv("TMPDIR");
    if (old != nullptr) old_ = old;
    ::setenv("TMPDIR", dir_.c_str(), 1);
  }
  ~RunTempDir() {
    if (dir_.empty()) return;
    if (old_)
      ::setenv("TMPDIR", old_->c_str(), 1);
    else
      ::unsetenv("TMPDIR");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  RunTempDir(const RunTempDir&) = delete;
  RunTempDir& operator=(const RunTempDir&) = delete;

 private:
  std::filesystem::path dir_;
  std::optional<std::string> old_;
};

int print_summary(const conveyor::PluginInfo& info, const std::vector<Outcome>& outcomes,
                  const std::vector<std::string>& process_errors) {
  std::map<Result, int> count;
  for (const Outcome& o : outcomes) ++count[o.result];
  const int failed = count[Result::kFailed] + count[Result::kCrashed] + count[Result::kTimedOut];
  std::printf("\nconveyor-conformance: plugin %s %s (%s; ABI %u.%u; capabilities: %s)\n",
              info.name.c_str(), info.version.c_str(), conveyor::kind_name(info.kind).c_str(),
              info.abi_major, info.abi_minor,
              conveyor::capability_names(info.capabilities).c_str());
  std::printf("conveyor-conformance: %d passed, %d failed, %d skipped (%zu behaviours)\n",
              count[Result::kPassed], failed, count[Result::kSkipped], outcomes.size());
  auto list = [&](Result r, const char* label) {
    for (const Outcome& o : outcomes)
      if (o.result == r) std::printf("  %-8s %s: %s\n", label, o.test.c_str(), o.reason.c_str());
  };
  list(Result::kFailed, "FAILED");
  list(Result::kCrashed, "CRASHED");
  list(Result::kTimedOut, "TIMEOUT");
  list(Result::kSkipped, "SKIPPED");
  for (const std::string& e : process_errors) std::printf("  %-8s %s\n", "ERROR", e.c_str());
  const bool ok = failed == 0 && process_errors.empty();
  if (ok)
    std::printf("conveyor-conformance: PASS\n");
  else
    std::printf("conveyor-conformance: FAIL (%d behaviour%s failed%s)\n", failed,
                failed == 1 ? "" : "s", process_errors.empty() ? "" : "; see ERROR above");
  std::fflush(stdout);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Runs the Conveyor storage-plugin conformance suite against a plugin and reports "
      "which behaviours it gets wrong.",
      "conveyor-conformance"};
  std::string plugin;
  std::vector<std::string> options;
  std::string filter = "*";
  bool list = false;
  bool in_process = false;
  int timeout_s = 120;
  int report_fd = -1;
  std::vector<std::string> gtest_args;
  app.add_option("--plugin", plugin,
                 "the plugin: a path to its .so, or a name found in the "
                 "default plugin directory");
  app.add_option("--option", options, "a storage option key=value (repeatable); see below")
      ->allow_extra_args(false);
  app.add_option("--filter", filter,
                 "run only the tests matching this GoogleTest filter, e.g. "
                 "'Claim.*:Lease*' or '*-Concurrency.*'");
  app.add_flag("--list", list, "list the tests (Group.Behaviour) and exit");
  app.add_flag("--in-process", in_process,
               "run every test in this process (for a debugger; a crash ends the run)");
  app.add_option("--test-timeout", timeout_s,
                 "seconds one test may take before it counts as "
                 "hung (default 120)")
      ->check(CLI::Range(1, 86400));
  app.add_option("--report-fd", report_fd, "internal: report to this descriptor")->group("");
  app.add_option("gtest_flags", gtest_args, "GoogleTest flags, after --");
  app.footer(kFooter);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  for (const std::string& g : gtest_args)
    if (g.rfind("--gtest_", 0) != 0)
      return usage_error("unexpected argument '" + g +
                         "': only GoogleTest flags (--gtest_...) "
                         "may follow --");

  if (list) {
    conveyor::conformance::set_parameters({});
    std::vector<std::string> args = gtest_args;
    args.push_back("--gtest_list_tests");
    return run_here(argv[0], filter, args, nullptr);
  }

  if (plugin.empty()) return usage_error("--plugin is required");
  conveyor::conformance::Parameters params;
  for (const std::string& o : options) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0)
      return usage_error("--option '" + o + "' is not key=value");
    params.options.emplace_back(o.substr(0, eq), o.substr(eq + 1));
  }
  std::shared_ptr<const conveyor::Plugin> loaded;
  try {
    params.plugin = conveyor::resolve_plugin_path(plugin, "");
    std::error_code ec;
    if (!std::filesystem::exists(params.plugin, ec))
      return usage_error("plugin file " + params.plugin.string() + " does not exist");
    loaded = conveyor::load_plugin(params.plugin);
  } catch (const conveyor::PluginLoadError& e) {
    std::cerr << "conveyor-conformance: " << e.what() << "\n";
    if (params.plugin.empty()) return 2;  // a name that resolves to no file: usage
    std::cerr << "conveyor-conformance: FAIL (the plugin cannot be loaded, so no behaviour was "
                 "tested)\n";
    return 1;
  }
  params.plugin = loaded->info().path;
  conveyor::conformance::set_parameters(params);

  if (report_fd >= 0)  // a supervised child: run and report, the parent judges
    return run_here(argv[0], filter, gtest_args, conveyor::conformance::fd_sink(report_fd)), 0;

  const conveyor::PluginInfo& info = loaded->info();
  std::printf("conveyor-conformance: testing %s (%s %s, %s, ABI %u.%u, capabilities: %s)\n",
              info.path.c_str(), info.name.c_str(), info.version.c_str(),
              conveyor::kind_name(info.kind).c_str(), info.abi_major, info.abi_minor,
              conveyor::capability_names(info.capabilities).c_str());
  std::fflush(stdout);

  std::vector<Outcome> outcomes;
  std::vector<std::string> process_errors;
  if (in_process) {
    conveyor::conformance::ReportParser parser;
    run_here(argv[0], filter, gtest_args, [&](const std::string& r) { parser.feed(r); });
    outcomes = parser.outcomes();
  } else {
    // The children's temporary files (the @tmp directories) live in one
    // directory of this run, removed at its end: a test process that crashed
    // or was killed cannot clean up after itself.
    const RunTempDir run_tmp;
    std::vector<std::string> child_args = {"--plugin", params.plugin.string()};
    for (const std::string& o : options) child_args.insert(child_args.end(), {"--option", o});
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    conveyor::conformance::IsolatedRun run = conveyor::conformance::run_isolated(
        ec ? std::string("/proc/self/exe") : self.string(), child_args, filter, gtest_args,
        std::chrono::seconds(timeout_s));
    outcomes = std::move(run.outcomes);
    process_errors = std::move(run.process_errors);
  }
  if (outcomes.empty() && process_errors.empty())
    return usage_error("the filter '" + filter + "' selects no test (try --list)");
  return print_summary(info, outcomes, process_errors);
}
