// The PostgreSQL plugins' own log lines. The storage ABI has no logging
// service, so the plugins write to standard error, in the host's line format
// ("[2024-05-01 12:00:00.123] [warning] ..."), where `conveyor serve` logs
// too. Tests may capture the lines instead (set_log_capture).
#ifndef CONVEYOR_PLUGINS_POSTGRES_COMMON_PG_LOG_HPP
#define CONVEYOR_PLUGINS_POSTGRES_COMMON_PG_LOG_HPP

#include <functional>
#include <string>
#include <string_view>

namespace conveyor::postgres {

enum class LogLevel { kInfo, kWarning };

void log_line(LogLevel level, std::string_view message) noexcept;
inline void log_info(std::string_view message) noexcept { log_line(LogLevel::kInfo, message); }
inline void log_warning(std::string_view message) noexcept {
  log_line(LogLevel::kWarning, message);
}

// Tests: every line goes to capture instead of standard error (none: back to
// standard error).
using LogCapture = std::function<void(LogLevel, std::string_view)>;
void set_log_capture(LogCapture capture);

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_COMMON_PG_LOG_HPP
