#include "report_listener.hpp"

#include <unistd.h>

#include <cerrno>

namespace conveyor::conformance {
namespace {

std::string full_name(const ::testing::TestInfo& test) {
  return std::string(test.test_suite_name()) + "." + test.name();
}

}  // namespace

void ReportListener::OnTestStart(const ::testing::TestInfo& test) {
  first_failure_.clear();
  failures_ = 0;
  skip_reason_.clear();
  sink_(start_record(full_name(test)));
}

void ReportListener::OnTestPartResult(const ::testing::TestPartResult& part) {
  if (part.skipped()) {
    if (skip_reason_.empty()) skip_reason_ = part.message();
    return;
  }
  if (!part.failed()) return;
  if (failures_++ == 0) {
    first_failure_ = part.message();
    if (part.file_name() != nullptr) {
      const std::string file = part.file_name();
      first_failure_ +=
          " [" + file.substr(file.rfind('/') + 1) + ":" + std::to_string(part.line_number()) + "]";
    }
  }
}

void ReportListener::OnTestEnd(const ::testing::TestInfo& test) {
  const ::testing::TestResult& r = *test.result();
  Result result = Result::kPassed;
  std::string reason;
  if (r.Failed()) {
    result = Result::kFailed;
    reason = first_failure_;
    if (failures_ > 1)
      reason = "(" + std::to_string(failures_) + " failures; the first:) " + reason;
  } else if (r.Skipped()) {
    result = Result::kSkipped;
    reason = skip_reason_;
  }
  sink_(end_record(full_name(test), result, reason));
}

void ReportListener::OnTestProgramEnd(const ::testing::UnitTest&) { sink_(done_record()); }

std::function<void(const std::string&)> fd_sink(int fd) {
  return [fd](const std::string& record) {
    const std::string line = record + "\n";
    for (size_t off = 0; off < line.size();) {
      const ssize_t n = ::write(fd, line.data() + off, line.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // the supervisor is gone; the run's own output remains
      off += static_cast<size_t>(n);
    }
  };
}

}  // namespace conveyor::conformance
