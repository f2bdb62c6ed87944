// A rate limit and where an effective limit comes from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace conveyor {

// A token bucket's parameters: jobs started per second and the largest
// instantaneous spike. Both already validated (rate > 0 finite, burst >= 1).
struct RateLimit {
  double rate_per_sec = 0;
  uint32_t burst = 0;
  bool operator==(const RateLimit&) const = default;
};

// Builds a validated RateLimit; burst 0 means ceil(rate). Throws ValidationError.
RateLimit make_rate_limit(double rate_per_sec, int64_t burst);

// Where a queue's effective limit came from (docs/reference.md, first match wins).
// kBackoff: the downstream asked the queue to wait (backpressure); nothing is
// dispatched until the hold ends, whatever the limit below it.
enum class LimitSource { kDisabled, kOverride, kQueueConfig, kDefault, kNone, kBackoff };

// "override", "queue-config", "default", "none", "disabled", "backoff".
const char* to_string(LimitSource source) noexcept;

struct EffectiveLimit {
  std::optional<RateLimit> limit;  // empty: unlimited
  LimitSource source = LimitSource::kNone;
  bool operator==(const EffectiveLimit&) const = default;
};

// A durable override as stored by the backend.
struct RateLimitOverride {
  std::string queue;
  RateLimit limit;
  int64_t updated_at_us = 0;
};

}  // namespace conveyor
