// The conveyor.v1 messages (proto/conveyor/v1/*.proto) in the proto3 JSON
// mapping, both ways: the server writes responses and reads requests with
// these; the API client (and so `conveyor --server`) writes requests and reads
// responses with them, so both sides agree on every field.
//
// Written: lowerCamelCase, every field (defaults too) except unset `optional`
// fields; int64/uint64 as strings; times RFC 3339 UTC.
// Read: either spelling, null = unset, integers as numbers or strings,
// unknown fields ignored. Bad input throws ValidationError naming the field's
// path ("jobs[1].kind: ...").
#pragma once

#include <conveyor/job_request.hpp>
#include <conveyor/queue_report.hpp>
#include <conveyor/rate_limit.hpp>
#include <conveyor/storage.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::api {

using nlohmann::json;

// "2024-05-01T12:00:00Z", with ".ffffff" when there are microseconds; "" for 0.
std::string rfc3339(int64_t us);
// Reads RFC 3339 (any fraction, Z or +hh:mm); "" is 0. Throws ValidationError(field, ...).
int64_t parse_rfc3339(std::string_view text, const std::string& field);

// ListRateLimitsResponse: the overrides, the global default, the kill switch.
struct RateLimitListing {
  bool enabled = true;
  std::optional<RateLimit> default_limit;
  std::vector<RateLimitOverride> overrides;
};

// RateLimitOverride
json override_json(const RateLimitOverride& o);
RateLimitOverride parse_override(const json& j, const std::string& path = "");

// ListRateLimitsResponse
json listing_json(const RateLimitListing& l);
RateLimitListing parse_listing(const json& j);

// QueueInfo (dispatched: this server's conveyor_jobs_dispatched_total)
json queue_info_json(const QueueReport& r, uint64_t dispatched);
QueueReport parse_queue_info(const json& j, const std::string& path = "");

// Job
json job_json(const Job& job);
Job parse_job(const json& j, const std::string& path = "");

// NewJob
json new_job_json(const JobRequest& job);
JobRequest parse_new_job(const json& j, const std::string& path = "");

// A ValidationError's field as the API names it ("rate" -> "ratePerSec",
// "max_attempts" -> "maxAttempts", "delay" -> "delaySeconds").
std::string api_field_name(std::string_view core_field);

}  // namespace conveyor::api
