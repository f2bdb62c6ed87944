// Log setup and the JSON line formatter (log.hpp).
#include <conveyor/internal/log.hpp>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <ctime>

namespace conveyor {
namespace {

thread_local std::vector<LogField> t_fields;

// A JSON string, invalid UTF-8 replaced (an error text may carry anything).
void append_json_string(spdlog::memory_buf_t& dest, std::string_view text) {
  const std::string quoted = nlohmann::json(std::string(text))
                                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  dest.append(quoted.data(), quoted.data() + quoted.size());
}

void append(spdlog::memory_buf_t& dest, std::string_view text) {
  dest.append(text.data(), text.data() + text.size());
}

class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto since_epoch = msg.time.time_since_epoch();
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch - secs);
    const std::time_t t = secs.count();
    std::tm tm{};
    gmtime_r(&t, &tm);
    char when[40];
    const size_t n = std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    append(dest, "{\"time\":\"");
    append(dest, std::string_view(when, n));
    fmt::format_to(std::back_inserter(dest), ".{:03}Z\",\"level\":\"", ms.count());
    append(dest, level_name(msg.level));
    append(dest, "\",\"message\":");
    append_json_string(dest, std::string_view(msg.payload.data(), msg.payload.size()));
    for (const LogField& f : t_fields) {
      append(dest, ",");
      append_json_string(dest, f.key);
      append(dest, ":");
      if (const auto* i = std::get_if<int64_t>(&f.value))
        fmt::format_to(std::back_inserter(dest), "{}", *i);
      else
        append_json_string(dest, std::get<std::string_view>(f.value));
    }
    append(dest, "}\n");
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }

 private:
  // The names [log] level takes ("warn", not spdlog's "warning").
  static std::string_view level_name(spdlog::level::level_enum level) {
    switch (level) {
      case spdlog::level::trace:
        return "trace";
      case spdlog::level::debug:
        return "debug";
      case spdlog::level::info:
        return "info";
      case spdlog::level::warn:
        return "warn";
      case spdlog::level::err:
        return "error";
      case spdlog::level::critical:
        return "critical";
      default:
        return "off";
    }
  }
};

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return spdlog::level::trace;
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kCritical:
      return spdlog::level::critical;
    case LogLevel::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

}  // namespace

LogFields::LogFields(std::initializer_list<LogField> fields) : added_(fields.size()) {
  t_fields.insert(t_fields.end(), fields.begin(), fields.end());
}

LogFields::~LogFields() { t_fields.resize(t_fields.size() - added_); }

std::unique_ptr<spdlog::formatter> make_log_formatter(LogFormat format) {
  if (format == LogFormat::kJson) return std::make_unique<JsonFormatter>();
  return std::make_unique<spdlog::pattern_formatter>("%Y-%m-%dT%H:%M:%S.%eZ %^%l%$ %v",
                                                     spdlog::pattern_time_type::utc);
}

void setup_logging(LogLevel level, LogFormat format, std::ostream* out) {
  std::shared_ptr<spdlog::sinks::sink> sink;
  // JSON lines are for machines: no colour codes in them.
  if (out != nullptr)
    sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*out);
  else if (format == LogFormat::kJson)
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  else
    sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("conveyor", std::move(sink));
  logger->set_formatter(make_log_formatter(format));
  logger->set_level(to_spdlog(level));
  spdlog::set_default_logger(std::move(logger));
}

void set_log_level(LogLevel level) { spdlog::default_logger_raw()->set_level(to_spdlog(level)); }

}  // namespace conveyor
