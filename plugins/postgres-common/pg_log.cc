#include "pg_log.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <utility>

namespace conveyor::postgres {
namespace {

std::mutex& log_mu() {
  static std::mutex mu;
  return mu;
}

LogCapture& capture_slot() {
  static LogCapture capture;
  return capture;
}

}  // namespace

void log_line(LogLevel level, std::string_view message) noexcept {
  try {
    std::lock_guard lock(log_mu());
    if (capture_slot()) {
      capture_slot()(level, message);
      return;
    }
    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
        1000;
    std::tm tm{};
    localtime_r(&t, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    std::fprintf(stderr, "[%s.%03d] [%s] %.*s\n", stamp, static_cast<int>(ms),
                 level == LogLevel::kWarning ? "warning" : "info", static_cast<int>(message.size()),
                 message.data());
    std::fflush(stderr);
  } catch (...) {
    // Logging never fails a call.
  }
}

void set_log_capture(LogCapture capture) {
  std::lock_guard lock(log_mu());
  capture_slot() = std::move(capture);
}

}  // namespace conveyor::postgres
