// Runs the suite in child processes so that a plugin that crashes or hangs
// costs one behaviour, not the whole run: the child reports each test's start
// and end (report_protocol.hpp); when it dies inside a test, that test is
// recorded as crashed and a new child carries on with the tests not yet run.
// A test running longer than the timeout is recorded as timed out and its
// child killed.
#pragma once

#include "report_protocol.hpp"

#include <chrono>
#include <string>
#include <vector>

namespace conveyor::conformance {

struct IsolatedRun {
  std::vector<Outcome> outcomes;
  // Failures of the child process outside any test (e.g. a leak reported by a
  // sanitizer at exit); each makes the run fail.
  std::vector<std::string> process_errors;
};

// Runs `executable args... --filter F --report-fd N [-- gtest_args...]`,
// where F is `filter` minus the tests already finished, until every selected
// test has an outcome.
IsolatedRun run_isolated(const std::string& executable, const std::vector<std::string>& args,
                         const std::string& filter, const std::vector<std::string>& gtest_args,
                         std::chrono::seconds test_timeout);

// `filter` (a GoogleTest filter: POSITIVE[-NEGATIVE]) with `exclude` added to
// its negative patterns.
std::string filter_excluding(const std::string& filter, const std::vector<std::string>& exclude);

}  // namespace conveyor::conformance
