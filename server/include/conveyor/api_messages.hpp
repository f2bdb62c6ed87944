// The engine's types and the generated conveyor.v1 messages
// (proto/conveyor/v1/*.proto), both ways: the server fills responses and reads
// requests with these; the API client (and so `conveyor --server`) fills
// requests and reads responses with them, so both sides agree on every field.
// The wire formats (binary, proto3 JSON) are libprotobuf's (api_codec.hpp).
// Reading checks what the types cannot say (times, states, sources) and
// throws ValidationError naming the field's path ("job.runAt: ...").
#pragma once

#include <conveyor/config.hpp>

#include <conveyor/internal/storage.hpp>
#include <conveyor/job_request.hpp>
#include <conveyor/queue_report.hpp>
#include <conveyor/rate_limit.hpp>

#include "conveyor/v1/admin.pb.h"
#include "conveyor/v1/task.pb.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor {
class Engine;
}  // namespace conveyor

namespace conveyor::api {

// "2024-05-01T12:00:00Z", with ".ffffff" when there are microseconds; "" for 0.
std::string rfc3339(int64_t us);
// Reads RFC 3339 (any fraction, Z or +hh:mm); "" is 0. Throws ValidationError(field, ...).
int64_t parse_rfc3339(std::string_view text, const std::string& field);

// ListRateLimitsResponse: the overrides, the global default, the kill switch
// and where its state comes from, and the settings of keys.
struct RateLimitListing {
  bool enabled = true;
  std::optional<RateLimit> default_limit;
  std::vector<RateLimitOverride> overrides;
  SwitchSource enabled_source = SwitchSource::kConfig;
  std::vector<KeyOverride> key_settings;
};

// What SetQueueRateLimit and DeleteQueueRateLimit act on (`conveyor
// ratelimit set/rm`): the queue's own override (keys false), or a setting of
// its keys: one key's own limit (key), or the limit of every key (nullopt:
// per_key, --per-key).
struct LimitTarget {
  bool keys = false;
  std::optional<std::string> key;
};

// What DeleteQueueRateLimit and DeleteKeyWeight answer with not_found (and
// `conveyor ratelimit rm`, `keys weight --reset`): "queue Q has no
// rate-limit override", "queue Q key "K" has no rate limit of its own", ...
std::string no_limit_message(std::string_view queue, const LimitTarget& target);
std::string no_key_weight_message(std::string_view queue, std::string_view key);
// What DeleteQueue (`conveyor queues rm`) answers for a queue storage does
// not know (not_found), and for one with running jobs without force
// (failed_precondition); running is how many were seen (up to 1000).
std::string unknown_queue_message(std::string_view queue);
std::string queue_running_message(std::string_view queue, int64_t running);

// What engine follows now: ListRateLimits' answer, `conveyor ratelimit ls`.
RateLimitListing rate_limit_listing(const Engine& engine);
// The key setting engine follows for key (nullopt: every key) of queue, or
// fallback when it follows none (another process removed it meanwhile).
KeyOverride followed_key_setting(const Engine& engine, const KeyOverride& fallback);

// A limit's scope as the API spells it ("process", "fleet"). Reading takes
// "" as "process" (a client or server that predates scopes); anything else
// throws ValidationError(path, ...) naming the field and the known scopes.
LimitScope parse_scope(const std::string& text, const std::string& path);
// "storage", "config"; reading refuses other text (ValidationError(path, ...)).
SwitchSource parse_switch_source(const std::string& text, const std::string& path);

// RateLimitOverride
void to_proto(const RateLimitOverride& o, v1::RateLimitOverride& out);
RateLimitOverride from_proto(const v1::RateLimitOverride& m, const std::string& path = "");

// A key in a message: quoted and escaped ("tenant-42", "" for the empty key).
std::string key_for_message(std::string_view key);

// KeySetting
void to_proto(const KeyOverride& o, v1::KeySetting& out);
KeyOverride from_proto(const v1::KeySetting& m, const std::string& path = "");

// ListRateLimitsResponse
void to_proto(const RateLimitListing& l, v1::ListRateLimitsResponse& out);
RateLimitListing from_proto(const v1::ListRateLimitsResponse& m);

// SetRateLimitingEnabledResponse: the kill switch now in force.
void to_proto(const RateLimitingState& s, v1::SetRateLimitingEnabledResponse& out);
RateLimitingState from_proto(const v1::SetRateLimitingEnabledResponse& m);

// QueueInfo (dispatched: this server's conveyor_jobs_dispatched_total)
void to_proto(const QueueReport& r, uint64_t dispatched, v1::QueueInfo& out);
QueueReport from_proto(const v1::QueueInfo& m, const std::string& path = "");

// ListKeysResponse. Reading checks the limit's source and the fairness
// ("fair", "fifo").
void to_proto(const KeysReport& r, v1::ListKeysResponse& out);
KeysReport from_proto(const v1::ListKeysResponse& m, std::string queue);

// Job
void to_proto(const Job& job, v1::Job& out);
Job from_proto(const v1::Job& m, const std::string& path = "");

// JobOutcome: "ok", "not_found", "wrong_state" for CONVEYOR_OK,
// CONVEYOR_E_NOT_FOUND, CONVEYOR_E_WRONG_STATE (a cancel's outcome) and for
// JobOutcome's kOk, kNotFound, kWrongState; "error" for another status.
// Reading refuses other text.
const char* outcome_name(conveyor_status status);
const char* outcome_name(JobOutcome::Status status);
void to_proto(const JobOutcome& o, v1::JobOutcome& out);
JobOutcome from_proto(const v1::JobOutcome& m, const std::string& path = "");

// A ListJobsRequest's states: Job.state names, "pending" also meaning
// "available"; duplicates dropped. Throws ValidationError("states[i]: ...").
std::vector<JobState> parse_job_states(
    const google::protobuf::RepeatedPtrField<std::string>& names);
// One state name as parse_job_states reads it ("pending" = available).
JobState parse_job_state(const std::string& name, const std::string& path);

// NewJob. Reading validates the request (validate_job_request; with config,
// also validate_http_job) and names the field: path + "kind: invalid job kind ...".
void to_proto(const JobRequest& job, v1::NewJob& out);
JobRequest from_proto(const v1::NewJob& m, const std::string& path = "",
                      const Config* config = nullptr);

// A ValidationError's field as the API names it ("rate" -> "ratePerSec",
// "max_attempts" -> "maxAttempts", "delay" -> "delaySeconds").
std::string api_field_name(std::string_view core_field);

}  // namespace conveyor::api
