// The engine's types to and from the conveyor.v1 messages (api_messages.hpp).
#include <conveyor/api_messages.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/http_call.hpp>
#include <conveyor/internal/engine_internals.hpp>
#include <conveyor/validation.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <limits>

namespace conveyor::api {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw ValidationError(path, path + ": " + what);
}

LimitSource parse_source(const std::string& text, const std::string& path) {
  for (auto s : {LimitSource::kDisabled, LimitSource::kOverride, LimitSource::kQueueConfig,
                 LimitSource::kDefault, LimitSource::kNone, LimitSource::kBackoff,
                 LimitSource::kEveryKeyOverride})
    if (text == to_string(s)) return s;
  fail(path, "unknown limit source " + quote_for_message(text) +
                 " (known: override, queue-config, default, none, disabled, backoff, "
                 "per-key-override)");
}

void set_limit(const RateLimit& l, v1::RateLimit& out) {
  out.set_rate_per_sec(l.rate_per_sec);
  out.set_burst(l.burst);
  out.set_scope(to_string(l.scope));
}

RateLimit read_limit(const v1::RateLimit& m, const std::string& path) {
  return RateLimit{m.rate_per_sec(), m.burst(), parse_scope(m.scope(), path + "scope")};
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

LimitScope parse_scope(const std::string& text, const std::string& path) {
  if (text.empty()) return LimitScope::kProcess;
  try {
    return parse_limit_scope(text);
  } catch (const ValidationError& e) {
    fail(path, e.what());
  }
}

SwitchSource parse_switch_source(const std::string& text, const std::string& path) {
  for (auto s : {SwitchSource::kStorage, SwitchSource::kConfig})
    if (text == to_string(s)) return s;
  fail(path, "unknown kill-switch source " + quote_for_message(text) + " (known: storage, config)");
}

void to_proto(const RateLimitOverride& o, v1::RateLimitOverride& out) {
  out.set_queue(o.queue);
  out.set_rate_per_sec(o.limit.rate_per_sec);
  out.set_burst(o.limit.burst);
  out.set_updated_at(rfc3339(o.updated_at_us));
  out.set_scope(to_string(o.limit.scope));
}

RateLimitOverride from_proto(const v1::RateLimitOverride& m, const std::string& path) {
  RateLimitOverride o;
  o.queue = m.queue();
  o.limit = RateLimit{m.rate_per_sec(), m.burst(), parse_scope(m.scope(), path + "scope")};
  o.updated_at_us = parse_rfc3339(m.updated_at(), path + "updatedAt");
  return o;
}

std::string key_for_message(std::string_view key) {
  return quote_for_message(key, kMaxJobKeyBytes);
}

std::string no_limit_message(std::string_view queue, const LimitTarget& target) {
  if (!target.keys) return fmt::format("queue {} has no rate-limit override", queue);
  if (!target.key) return fmt::format("queue {} has no rate limit for every key", queue);
  return fmt::format("queue {} key {} has no rate limit of its own", queue,
                     key_for_message(*target.key));
}

std::string no_key_weight_message(std::string_view queue, std::string_view key) {
  return fmt::format("queue {} key {} has no weight set: its weight is the default, 1", queue,
                     key_for_message(key));
}

std::string unknown_queue_message(std::string_view queue) {
  return fmt::format(
      "queue {} not found: storage has no job, paused flag, override or key setting of it (see: "
      "conveyor queues)",
      queue);
}

std::string queue_running_message(std::string_view queue, int64_t running) {
  return fmt::format(
      "queue {} has {}{} running job(s): nothing removed; wait for them to finish, or remove it "
      "anyway with force (conveyor queues rm {} --force): the running jobs are then cancelled, "
      "their handlers' results refused",
      queue, running, running >= static_cast<int64_t>(kListJobsMax) ? " or more" : "", queue);
}

void to_proto(const KeyOverride& o, v1::KeySetting& out) {
  out.set_queue(o.queue);
  if (o.key) out.set_key(*o.key);
  if (o.limit) set_limit(*o.limit, *out.mutable_limit());
  if (o.weight) out.set_weight(*o.weight);
  out.set_updated_at(rfc3339(o.updated_at_us));
}

KeyOverride from_proto(const v1::KeySetting& m, const std::string& path) {
  KeyOverride o;
  o.queue = m.queue();
  if (m.has_key()) o.key = m.key();
  if (m.has_limit()) o.limit = read_limit(m.limit(), path + "limit.");
  if (m.has_weight()) o.weight = m.weight();
  o.updated_at_us = parse_rfc3339(m.updated_at(), path + "updatedAt");
  return o;
}

void to_proto(const RateLimitListing& l, v1::ListRateLimitsResponse& out) {
  for (const auto& o : l.overrides) to_proto(o, *out.add_overrides());
  out.set_enabled(l.enabled);
  out.set_enabled_source(to_string(l.enabled_source));
  if (l.default_limit) set_limit(*l.default_limit, *out.mutable_default_limit());
  for (const auto& k : l.key_settings) to_proto(k, *out.add_key_settings());
}

RateLimitListing rate_limit_listing(const Engine& engine) {
  const LimitResolver& limits = EngineInternals::limits(engine);
  const RateLimitingState state = engine.rate_limiting();
  return RateLimitListing{state.enabled, limits.default_limit(), limits.overrides(), state.source,
                          engine.key_overrides()};
}

KeyOverride followed_key_setting(const Engine& engine, const KeyOverride& fallback) {
  for (KeyOverride& o : engine.key_overrides())
    if (o.queue == fallback.queue && o.key == fallback.key) return std::move(o);
  return fallback;
}

RateLimitListing from_proto(const v1::ListRateLimitsResponse& m) {
  RateLimitListing l;
  l.enabled = m.enabled();
  // A server that predates the live switch has only the config's.
  l.enabled_source = m.enabled_source().empty()
                         ? SwitchSource::kConfig
                         : parse_switch_source(m.enabled_source(), "enabledSource");
  for (int i = 0; i < m.overrides_size(); ++i)
    l.overrides.push_back(from_proto(m.overrides(i), fmt::format("overrides[{}].", i)));
  if (m.has_default_limit()) l.default_limit = read_limit(m.default_limit(), "defaultLimit.");
  for (int i = 0; i < m.key_settings_size(); ++i)
    l.key_settings.push_back(from_proto(m.key_settings(i), fmt::format("keySettings[{}].", i)));
  return l;
}

void to_proto(const RateLimitingState& s, v1::SetRateLimitingEnabledResponse& out) {
  out.set_enabled(s.enabled);
  out.set_enabled_source(to_string(s.source));
}

RateLimitingState from_proto(const v1::SetRateLimitingEnabledResponse& m) {
  return RateLimitingState{m.enabled(), parse_switch_source(m.enabled_source(), "enabledSource")};
}

void to_proto(const QueueReport& r, uint64_t dispatched, v1::QueueInfo& out) {
  const QueueStats& s = r.stats;
  out.set_queue(s.queue);
  out.set_paused(s.paused);
  out.set_pending(s.pending);
  out.set_scheduled(s.scheduled);
  out.set_running(s.running);
  out.set_completed(s.completed);
  out.set_failed(s.failed);
  out.set_cancelled(s.cancelled);
  v1::EffectiveLimit& limit = *out.mutable_limit();
  limit.set_source(to_string(r.limit.source));
  if (r.limit.source == LimitSource::kBackoff) {
    limit.set_backoff_until(rfc3339(r.backoff_until_us));
    limit.set_backoff_reason(r.backoff_reason);
  }
  if (r.limit.limit) {
    limit.set_rate_per_sec(r.limit.limit->rate_per_sec);
    limit.set_burst(r.limit.limit->burst);
    limit.set_scope(to_string(r.limit.limit->scope));
  }
  out.set_throttled(r.throttled);
  out.set_dispatched(dispatched);
  out.set_oldest_pending_age_seconds(r.oldest_pending_age_seconds);
  for (const KindCount& k : r.unserved_kinds) {
    v1::KindCount& m = *out.add_unserved_kinds();
    m.set_kind(k.kind);
    m.set_pending(k.pending);
  }
}

QueueReport from_proto(const v1::QueueInfo& m, const std::string& path) {
  QueueReport r;
  QueueStats& s = r.stats;
  s.queue = m.queue();
  s.paused = m.paused();
  s.pending = m.pending();
  s.scheduled = m.scheduled();
  s.running = m.running();
  s.completed = m.completed();
  s.failed = m.failed();
  s.cancelled = m.cancelled();
  r.throttled = m.throttled();
  r.oldest_pending_age_seconds = m.oldest_pending_age_seconds();
  r.limit.source = parse_source(m.limit().source(), path + "limit.source");
  if (r.limit.source == LimitSource::kBackoff) {
    r.backoff_until_us = parse_rfc3339(m.limit().backoff_until(), path + "limit.backoffUntil");
    r.backoff_reason = m.limit().backoff_reason();
  }
  if (m.limit().has_rate_per_sec())
    r.limit.limit = RateLimit{m.limit().rate_per_sec(), m.limit().burst(),
                              parse_scope(m.limit().scope(), path + "limit.scope")};
  for (const v1::KindCount& k : m.unserved_kinds())
    r.unserved_kinds.push_back({k.kind(), k.pending()});
  return r;
}

void to_proto(const KeysReport& r, v1::ListKeysResponse& out) {
  for (const KeyReport& k : r.keys) {
    v1::KeyInfo& m = *out.add_keys();
    m.set_key(k.key);
    m.set_ready(k.ready);
    m.set_ready_capped(k.ready_capped);
    m.set_running(k.running);
    m.set_throttled(k.throttled);
    if (k.limit) set_limit(*k.limit, *m.mutable_limit());
    m.set_limit_source(to_string(k.limit_source));
    m.set_weight(k.weight);
  }
  out.set_total_keys(static_cast<int64_t>(r.total_keys));
  out.set_complete(r.complete);
  v1::KeyLimit& limit = *out.mutable_limit();
  if (r.key_rate_limit) {
    limit.set_rate_per_sec(r.key_rate_limit->rate_per_sec);
    limit.set_burst(r.key_rate_limit->burst);
    limit.set_scope(to_string(r.key_rate_limit->scope));
  }
  if (r.key_max_workers) limit.set_max_workers(*r.key_max_workers);
  limit.set_source(to_string(r.limit_source));
  out.set_fairness(to_string(r.fairness));
  out.set_live(r.live);
}

KeysReport from_proto(const v1::ListKeysResponse& m, std::string queue) {
  KeysReport r;
  r.queue = std::move(queue);
  for (int i = 0; i < m.keys_size(); ++i) {
    const v1::KeyInfo& k = m.keys(i);
    const std::string path = fmt::format("keys[{}].", i);
    r.keys.push_back(
        KeyReport{.key = k.key(),
                  .ready = k.ready(),
                  .ready_capped = k.ready_capped(),
                  .running = static_cast<uint32_t>(
                      std::clamp<int64_t>(k.running(), 0, std::numeric_limits<uint32_t>::max())),
                  .throttled = k.throttled(),
                  .limit = k.has_limit() ? std::optional(read_limit(k.limit(), path + "limit."))
                                         : std::nullopt,
                  // "" and 0: a server that predates them.
                  .limit_source = k.limit_source().empty()
                                      ? LimitSource::kNone
                                      : parse_source(k.limit_source(), path + "limitSource"),
                  .weight = k.weight() == 0 ? 1 : k.weight()});
  }
  r.total_keys = static_cast<uint64_t>(std::max<int64_t>(m.total_keys(), 0));
  r.complete = m.complete();
  r.live = m.live();
  if (m.limit().has_rate_per_sec())
    r.key_rate_limit = RateLimit{m.limit().rate_per_sec(), m.limit().burst(),
                                 parse_scope(m.limit().scope(), "limit.scope")};
  if (m.limit().has_max_workers()) r.key_max_workers = m.limit().max_workers();
  r.limit_source = parse_source(m.limit().source(), "limit.source");
  if (m.fairness() != "fair" && m.fairness() != "fifo")
    fail("fairness",
         "unknown fairness " + quote_for_message(m.fairness()) + " (known: fair, fifo)");
  r.fairness = m.fairness() == "fifo" ? Fairness::kFifo : Fairness::kFair;
  return r;
}

void to_proto(const Job& job, v1::Job& out) {
  out.set_id(job.id);
  out.set_queue(job.queue);
  out.set_kind(job.kind);
  out.set_payload(job.payload);
  out.set_state(to_string(job.state));
  out.set_priority(job.priority);
  out.set_attempt(job.attempt);
  out.set_max_attempts(job.max_attempts);
  out.set_run_at(rfc3339(job.run_at_us));
  out.set_created_at(rfc3339(job.created_at_us));
  out.set_finalized_at(rfc3339(job.finalized_at_us));
  out.set_last_error(job.last_error);
  // A final or pending job keeps no live lease, whatever storage left behind.
  out.set_lease_expires_at(job.state == JobState::kRunning ? rfc3339(job.lease_expires_us) : "");
  out.set_cost(job.cost);
  out.set_key(job.key);
  out.set_started_at(rfc3339(job.started_at_us));
  out.set_timeout_seconds(static_cast<double>(job.timeout_ms) / 1e3);
}

Job from_proto(const v1::Job& m, const std::string& path) {
  Job job;
  job.id = m.id();
  job.queue = m.queue();
  job.kind = m.kind();
  job.payload = m.payload();
  job.state = parse_job_state(m.state(), path + "state");
  job.priority = m.priority();
  job.attempt = m.attempt();
  job.max_attempts = m.max_attempts();
  job.run_at_us = parse_rfc3339(m.run_at(), path + "runAt");
  job.created_at_us = parse_rfc3339(m.created_at(), path + "createdAt");
  job.finalized_at_us = parse_rfc3339(m.finalized_at(), path + "finalizedAt");
  job.last_error = m.last_error();
  job.lease_expires_us = parse_rfc3339(m.lease_expires_at(), path + "leaseExpiresAt");
  job.cost = m.cost() == 0 ? 1 : m.cost();  // 0: a server that predates costs
  job.key = m.key();                        // "": the empty key, or a server that predates keys
  job.started_at_us = parse_rfc3339(m.started_at(), path + "startedAt");  // "": never started
  if (!(m.timeout_seconds() >= 0 &&
        m.timeout_seconds() * 1e3 <= static_cast<double>(kMaxJobTimeoutMs)))
    fail(path + "timeoutSeconds",
         "timeout must be 0 to 604800 seconds, got " + format_number(m.timeout_seconds()));
  job.timeout_ms = std::llround(m.timeout_seconds() * 1e3);
  return job;
}

JobState parse_job_state(const std::string& name, const std::string& path) {
  if (name == "pending") return JobState::kAvailable;
  for (auto s : {JobState::kAvailable, JobState::kScheduled, JobState::kRunning,
                 JobState::kCompleted, JobState::kFailed, JobState::kCancelled})
    if (name == to_string(s)) return s;
  fail(path, "unknown job state " + quote_for_message(name) +
                 " (known: available or pending, scheduled, running, completed, failed, "
                 "cancelled)");
}

std::vector<JobState> parse_job_states(
    const google::protobuf::RepeatedPtrField<std::string>& names) {
  std::vector<JobState> out;
  for (int i = 0; i < names.size(); ++i) {
    const JobState s = parse_job_state(names.Get(i), fmt::format("states[{}]", i));
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

const char* outcome_name(conveyor_status status) {
  switch (status) {
    case CONVEYOR_OK:
      return "ok";
    case CONVEYOR_E_NOT_FOUND:
      return "not_found";
    case CONVEYOR_E_WRONG_STATE:
      return "wrong_state";
    default:
      return "error";
  }
}

const char* outcome_name(JobOutcome::Status status) {
  switch (status) {
    case JobOutcome::Status::kOk:
      return outcome_name(CONVEYOR_OK);
    case JobOutcome::Status::kNotFound:
      return outcome_name(CONVEYOR_E_NOT_FOUND);
    case JobOutcome::Status::kWrongState:
      return outcome_name(CONVEYOR_E_WRONG_STATE);
  }
  return "error";
}

void to_proto(const JobOutcome& o, v1::JobOutcome& out) {
  out.set_id(o.id);
  out.set_outcome(outcome_name(o.status));
}

JobOutcome from_proto(const v1::JobOutcome& m, const std::string& path) {
  using Status = JobOutcome::Status;
  for (Status s : {Status::kOk, Status::kNotFound, Status::kWrongState})
    if (m.outcome() == outcome_name(s)) return JobOutcome{m.id(), s};
  fail(path + "outcome", "unknown outcome " + quote_for_message(m.outcome()) +
                             " (known: ok, not_found, wrong_state)");
}

void to_proto(const JobRequest& job, v1::NewJob& out) {
  out.set_queue(job.queue);
  out.set_kind(job.kind);
  out.set_payload(job.payload);
  out.set_priority(job.priority);
  if (job.max_attempts) out.set_max_attempts(*job.max_attempts);
  out.set_delay_seconds(job.delay_s);
  out.set_cost(job.cost);
  out.set_key(job.key);
  out.set_timeout_seconds(job.timeout_s);
}

JobRequest from_proto(const v1::NewJob& m, const std::string& path, const Config* config) {
  JobRequest job;
  job.queue = m.queue();
  job.kind = m.kind();
  job.payload = m.payload().empty() ? "{}" : m.payload();
  job.priority = m.priority();
  if (m.has_max_attempts()) job.max_attempts = m.max_attempts();
  job.delay_s = m.delay_seconds();
  job.cost = m.cost() == 0 ? 1 : m.cost();  // proto3: absent is 0, meaning the default
  job.key = m.key();
  job.timeout_s = m.timeout_seconds();
  try {
    validate_job_request(job);
    if (config != nullptr) validate_http_job(*config, job.queue, job.kind, job.payload);
    if (config != nullptr && job.kind == "sleep") parse_sleep_payload(job.payload);
  } catch (const ValidationError& e) {
    fail(path + api_field_name(e.field()), e.what());
  }
  return job;
}

std::string api_field_name(std::string_view core_field) {
  if (core_field == "rate") return "ratePerSec";
  if (core_field == "max_attempts") return "maxAttempts";
  if (core_field == "delay") return "delaySeconds";
  if (core_field == "timeout") return "timeoutSeconds";
  return std::string(core_field);
}

}  // namespace conveyor::api
