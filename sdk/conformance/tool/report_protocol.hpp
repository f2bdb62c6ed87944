// The line protocol between a process running the suite and the process that
// supervises it, and the parser that turns it into per-test outcomes. One
// record per line, fields separated by tabs:
//   S <test>                          a test started
//   E <test> <result> <reason>        it ended: passed, failed or skipped
//   D                                 every selected test ran
// Knowing which test started but never ended is what lets the supervisor name
// the behaviour that crashed or hung the plugin.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::conformance {

enum class Result { kPassed, kFailed, kSkipped, kCrashed, kTimedOut };

struct Outcome {
  std::string test;  // "Group.Behaviour"
  Result result = Result::kPassed;
  std::string reason;  // one line; empty when passed
};

// Text safe for one field: tabs and line breaks become spaces, runs of
// spaces collapse, and it is cut at max_len (with "...").
std::string one_line(std::string_view text, size_t max_len = 600);

std::string start_record(std::string_view test);
std::string end_record(std::string_view test, Result result, std::string_view reason);
std::string done_record();

class ReportParser {
 public:
  // Feeds one record (without its newline). Unknown records are ignored.
  void feed(std::string_view line);
  // The test that started and has not ended, if any.
  const std::optional<std::string>& running() const { return running_; }
  bool done() const { return done_; }
  // Ends the running test with a result the process could not report itself.
  void end_running(Result result, std::string reason);
  // Starts a new process's stream (a restart after a crash).
  void restart() { running_.reset(), done_ = false; }
  const std::vector<Outcome>& outcomes() const { return outcomes_; }

 private:
  std::vector<Outcome> outcomes_;
  std::optional<std::string> running_;
  bool done_ = false;
};

}  // namespace conveyor::conformance
