// The conveyor.v1 messages in the proto3 JSON mapping (api_messages.hpp).
#include <conveyor/api_messages.hpp>
#include <conveyor/validation.hpp>

#include "proto_json.hpp"

#include <fmt/format.h>

#include <charconv>
#include <ctime>
#include <limits>

namespace conveyor::api {
namespace {

std::string int64_text(int64_t v) { return std::to_string(v); }
std::string uint64_text(uint64_t v) { return std::to_string(v); }

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw ValidationError(path, path + ": " + what);
}

int32_t int32_in_range(int64_t v, const std::string& path) {
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    fail(path,
         fmt::format("must be a whole number from {} to {}, got {}",
                     std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), v));
  return static_cast<int32_t>(v);
}

uint64_t uint64_of(const MessageReader& m, std::string_view camel, std::string_view snake) {
  const int64_t v = m.integer_field(camel, snake);
  if (v < 0) fail(m.path_of(camel), fmt::format("must not be negative, got {}", v));
  return static_cast<uint64_t>(v);
}

uint32_t burst_of(const MessageReader& m) {
  const int64_t v = m.integer_field("burst", "burst");
  if (v < 0 || v > std::numeric_limits<uint32_t>::max())
    fail(m.path_of("burst"), fmt::format("must be a whole number from 0 to 4294967295, got {}", v));
  return static_cast<uint32_t>(v);
}

LimitSource parse_source(const std::string& text, const std::string& path) {
  for (auto s : {LimitSource::kDisabled, LimitSource::kOverride, LimitSource::kQueueConfig,
                 LimitSource::kDefault, LimitSource::kNone})
    if (text == to_string(s)) return s;
  fail(path, "unknown limit source " + quote_for_message(text) +
                 " (known: override, queue-config, default, none, disabled)");
}

JobState parse_state(const std::string& text, const std::string& path) {
  for (auto s : {JobState::kAvailable, JobState::kScheduled, JobState::kRunning,
                 JobState::kCompleted, JobState::kFailed, JobState::kCancelled})
    if (text == to_string(s)) return s;
  fail(path, "unknown job state " + quote_for_message(text));
}

// Reads exactly n digits at text[pos...]; advances pos.
bool read_digits(std::string_view text, size_t& pos, size_t n, int& out) {
  if (pos + n > text.size()) return false;
  out = 0;
  for (size_t i = 0; i < n; ++i) {
    const char c = text[pos + i];
    if (c < '0' || c > '9') return false;
    out = out * 10 + (c - '0');
  }
  pos += n;
  return true;
}

bool expect(std::string_view text, size_t& pos, char c) {
  if (pos >= text.size() || text[pos] != c) return false;
  ++pos;
  return true;
}

}  // namespace

std::string rfc3339(int64_t us) {
  if (us == 0) return "";
  int64_t secs = us / 1'000'000;
  int64_t frac = us % 1'000'000;
  if (frac < 0) {
    frac += 1'000'000;
    --secs;
  }
  const std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::string out = fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}", tm.tm_year + 1900,
                                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  if (frac != 0) out += fmt::format(".{:06}", frac);
  return out + "Z";
}

int64_t parse_rfc3339(std::string_view text, const std::string& field) {
  if (text.empty()) return 0;
  std::tm tm{};
  size_t pos = 0;
  int year, mon, day, hour, min, sec;
  bool ok = read_digits(text, pos, 4, year) && expect(text, pos, '-') &&
            read_digits(text, pos, 2, mon) && expect(text, pos, '-') &&
            read_digits(text, pos, 2, day) && pos < text.size() &&
            (text[pos] == 'T' || text[pos] == 't') && ++pos && read_digits(text, pos, 2, hour) &&
            expect(text, pos, ':') && read_digits(text, pos, 2, min) && expect(text, pos, ':') &&
            read_digits(text, pos, 2, sec);
  int64_t micros = 0;
  if (ok && pos < text.size() && text[pos] == '.') {
    ++pos;
    int64_t scale = 100'000;
    size_t digits = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      micros += (text[pos] - '0') * scale;
      scale /= 10;
      ++pos;
      ++digits;
    }
    ok = digits > 0;
  }
  int64_t offset_s = 0;
  if (ok && pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (ok && pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    const int sign = text[pos] == '-' ? -1 : 1;
    ++pos;
    int oh = 0, om = 0;  // read only when ok: zero keeps a failed read defined
    ok = read_digits(text, pos, 2, oh) && expect(text, pos, ':') && read_digits(text, pos, 2, om) &&
         oh <= 23 && om <= 59;
    offset_s = sign * (oh * 3600 + om * 60);
  } else {
    ok = false;
  }
  ok = ok && pos == text.size() && mon >= 1 && mon <= 12 && day >= 1 && day <= 31 && hour <= 23 &&
       min <= 59 && sec <= 60;
  if (!ok)
    fail(field,
         "must be an RFC 3339 time like \"2024-05-01T12:00:00Z\", got " + quote_for_message(text));
  tm.tm_year = year - 1900;
  tm.tm_mon = mon - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = min;
  tm.tm_sec = sec;
  const int64_t secs = static_cast<int64_t>(timegm(&tm)) - offset_s;
  return secs * 1'000'000 + micros;
}

json override_json(const RateLimitOverride& o) {
  return json{{"queue", o.queue},
              {"ratePerSec", o.limit.rate_per_sec},
              {"burst", o.limit.burst},
              {"updatedAt", rfc3339(o.updated_at_us)}};
}

namespace {
RateLimitOverride read_override(const MessageReader& m) {
  RateLimitOverride o;
  o.queue = m.string_field("queue", "queue");
  o.limit.rate_per_sec = m.double_field("ratePerSec", "rate_per_sec");
  o.limit.burst = burst_of(m);
  o.updated_at_us =
      parse_rfc3339(m.string_field("updatedAt", "updated_at"), m.path_of("updatedAt"));
  return o;
}
}  // namespace

RateLimitOverride parse_override(const json& j, const std::string& path) {
  return read_override(MessageReader(j, path));
}

json listing_json(const RateLimitListing& l) {
  json overrides = json::array();
  for (const auto& o : l.overrides) overrides.push_back(override_json(o));
  json out{{"overrides", std::move(overrides)}, {"enabled", l.enabled}};
  if (l.default_limit)
    out["defaultLimit"] =
        json{{"ratePerSec", l.default_limit->rate_per_sec}, {"burst", l.default_limit->burst}};
  return out;
}

RateLimitListing parse_listing(const json& j) {
  MessageReader m(j, "");
  RateLimitListing l;
  l.enabled = m.bool_field("enabled", "enabled");
  for (const auto& o : m.repeated_messages("overrides", "overrides"))
    l.overrides.push_back(read_override(o));
  if (m.find("defaultLimit", "default_limit")) {
    MessageReader d = m.message_field("defaultLimit", "default_limit");
    l.default_limit = RateLimit{d.double_field("ratePerSec", "rate_per_sec"), burst_of(d)};
  }
  return l;
}

json queue_info_json(const QueueReport& r, uint64_t dispatched) {
  const QueueStats& s = r.stats;
  json limit{{"source", to_string(r.limit.source)}};
  if (r.limit.limit) {
    limit["ratePerSec"] = r.limit.limit->rate_per_sec;
    limit["burst"] = r.limit.limit->burst;
  }
  return json{{"queue", s.queue},
              {"paused", s.paused},
              {"pending", int64_text(s.pending)},
              {"scheduled", int64_text(s.scheduled)},
              {"running", int64_text(s.running)},
              {"completed", int64_text(s.completed)},
              {"failed", int64_text(s.failed)},
              {"cancelled", int64_text(s.cancelled)},
              {"limit", std::move(limit)},
              {"throttled", uint64_text(r.throttled)},
              {"dispatched", uint64_text(dispatched)}};
}

QueueReport parse_queue_info(const json& j, const std::string& path) {
  MessageReader m(j, path);
  QueueReport r;
  QueueStats& s = r.stats;
  s.queue = m.string_field("queue", "queue");
  s.paused = m.bool_field("paused", "paused");
  s.pending = m.integer_field("pending", "pending");
  s.scheduled = m.integer_field("scheduled", "scheduled");
  s.running = m.integer_field("running", "running");
  s.completed = m.integer_field("completed", "completed");
  s.failed = m.integer_field("failed", "failed");
  s.cancelled = m.integer_field("cancelled", "cancelled");
  r.throttled = uint64_of(m, "throttled", "throttled");
  MessageReader l = m.message_field("limit", "limit");
  r.limit.source = parse_source(l.string_field("source", "source"), l.path_of("source"));
  if (auto rate = l.optional_double("ratePerSec", "rate_per_sec"))
    r.limit.limit = RateLimit{*rate, burst_of(l)};
  return r;
}

json job_json(const Job& job) {
  return json{{"id", int64_text(job.id)},
              {"queue", job.queue},
              {"kind", job.kind},
              {"payload", job.payload},
              {"state", to_string(job.state)},
              {"priority", job.priority},
              {"attempt", job.attempt},
              {"maxAttempts", job.max_attempts},
              {"runAt", rfc3339(job.run_at_us)},
              {"createdAt", rfc3339(job.created_at_us)},
              {"finalizedAt", rfc3339(job.finalized_at_us)},
              {"lastError", job.last_error}};
}

Job parse_job(const json& j, const std::string& path) {
  MessageReader m(j, path);
  Job job;
  job.id = m.integer_field("id", "id");
  job.queue = m.string_field("queue", "queue");
  job.kind = m.string_field("kind", "kind");
  job.payload = m.string_field("payload", "payload");
  job.state = parse_state(m.string_field("state", "state"), m.path_of("state"));
  job.priority = int32_in_range(m.integer_field("priority", "priority"), m.path_of("priority"));
  job.attempt = int32_in_range(m.integer_field("attempt", "attempt"), m.path_of("attempt"));
  job.max_attempts =
      int32_in_range(m.integer_field("maxAttempts", "max_attempts"), m.path_of("maxAttempts"));
  job.run_at_us = parse_rfc3339(m.string_field("runAt", "run_at"), m.path_of("runAt"));
  job.created_at_us =
      parse_rfc3339(m.string_field("createdAt", "created_at"), m.path_of("createdAt"));
  job.finalized_at_us =
      parse_rfc3339(m.string_field("finalizedAt", "finalized_at"), m.path_of("finalizedAt"));
  job.last_error = m.string_field("lastError", "last_error");
  return job;
}

json new_job_json(const JobRequest& job) {
  json out{{"queue", job.queue},
           {"kind", job.kind},
           {"payload", job.payload},
           {"priority", job.priority},
           {"delaySeconds", job.delay_s}};
  if (job.max_attempts) out["maxAttempts"] = *job.max_attempts;
  return out;
}

JobRequest parse_new_job(const json& j, const std::string& path) {
  MessageReader m(j, path);
  JobRequest job;
  job.queue = m.string_field("queue", "queue");
  job.kind = m.string_field("kind", "kind");
  job.payload = m.string_field("payload", "payload");
  if (job.payload.empty()) job.payload = "{}";
  job.priority = int32_in_range(m.integer_field("priority", "priority"), m.path_of("priority"));
  if (auto v = m.optional_integer("maxAttempts", "max_attempts"))
    job.max_attempts = int32_in_range(*v, m.path_of("maxAttempts"));
  job.delay_s = m.double_field("delaySeconds", "delay_seconds");
  try {
    validate_job_request(job);
  } catch (const ValidationError& e) {
    fail(path + api_field_name(e.field()), e.what());
  }
  return job;
}

std::string api_field_name(std::string_view core_field) {
  if (core_field == "rate") return "ratePerSec";
  if (core_field == "max_attempts") return "maxAttempts";
  if (core_field == "delay") return "delaySeconds";
  return std::string(core_field);
}

}  // namespace conveyor::api
