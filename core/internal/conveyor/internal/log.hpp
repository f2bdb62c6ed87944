// The process's logger (spdlog's default, on stderr) in the [log] format, and
// structured fields for JSON lines.
//
//   setup_logging(LogLevel::kInfo, LogFormat::kJson);
//   {
//     LogFields fields{{"queue", "email"}, {"job_id", int64_t{42}}};
//     spdlog::info("queue email: job 42 failed");  // JSON: the fields too
//   }
//
// Text lines read "2026-12-01T12:00:00.123Z info message"; JSON lines are one
// object each: {"time":"2026-12-01T12:00:00.123Z","level":"info",
// "message":"...", then the fields set on the logging thread}.
#pragma once

#include <conveyor/config.hpp>

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string_view>
#include <variant>
#include <vector>

namespace spdlog {
class formatter;
}

namespace conveyor {

struct LogField {
  std::string_view key;
  std::variant<int64_t, std::string_view> value;
};

// The fields of the lines logged on this thread while it lives (nested
// scopes add to the outer ones). The strings must outlive the scope.
class LogFields {
 public:
  LogFields(std::initializer_list<LogField> fields);
  ~LogFields();
  LogFields(const LogFields&) = delete;
  LogFields& operator=(const LogFields&) = delete;

 private:
  size_t added_;
};

// A formatter for a format (text or JSON lines, time in UTC).
std::unique_ptr<spdlog::formatter> make_log_formatter(LogFormat format);

// Makes the default logger write to stderr (or to out, for tests) in format,
// at level. Call it again to change either (a config read after the first
// setup), but not while other threads log.
void setup_logging(LogLevel level, LogFormat format, std::ostream* out = nullptr);
// Changes the level of the logger setup_logging made, in place (safe while
// other threads log: SIGHUP applies [log] level with it).
void set_log_level(LogLevel level);

}  // namespace conveyor
