// A GoogleTest listener that writes the report protocol (report_protocol.hpp)
// as the tests run: start, end with a one-line reason, done.
#pragma once

#include "report_protocol.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace conveyor::conformance {

class ReportListener : public ::testing::EmptyTestEventListener {
 public:
  // sink receives each record without its newline.
  explicit ReportListener(std::function<void(const std::string&)> sink) : sink_(std::move(sink)) {}

  void OnTestStart(const ::testing::TestInfo& test) override;
  void OnTestPartResult(const ::testing::TestPartResult& part) override;
  void OnTestEnd(const ::testing::TestInfo& test) override;
  void OnTestProgramEnd(const ::testing::UnitTest& unit) override;

 private:
  std::function<void(const std::string&)> sink_;
  std::string first_failure_;
  int failures_ = 0;
  std::string skip_reason_;
};

// A sink writing each record plus '\n' to a file descriptor.
std::function<void(const std::string&)> fd_sink(int fd);

}  // namespace conveyor::conformance
