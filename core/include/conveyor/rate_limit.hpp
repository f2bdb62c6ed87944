// A rate limit and where an effective limit comes from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace conveyor {

// Whose bucket a limit fills (docs/design/rate-limits.md). kProcess: each
// process has its own, so N processes start up to N * rate. kFleet: one bucket per queue shared
// by every process on the same storage (needs ABI 1.2's swap_shared_state).
enum class LimitScope { kProcess, kFleet };

// "process", "fleet".
const char* to_string(LimitScope scope) noexcept;
// Parses "process" or "fleet"; throws ValidationError("scope", ...) otherwise.
LimitScope parse_limit_scope(std::string_view text);

// A token bucket's parameters: jobs started per second and the largest
// instantaneous spike. Both already validated (rate > 0 finite, burst >= 1).
struct RateLimit {
  double rate_per_sec = 0;
  uint32_t burst = 0;
  LimitScope scope = LimitScope::kProcess;
  bool operator==(const RateLimit&) const = default;
};

// Builds a validated RateLimit; burst 0 means ceil(rate). Throws ValidationError.
RateLimit make_rate_limit(double rate_per_sec, int64_t burst,
                          LimitScope scope = LimitScope::kProcess);

// Where the kill switch's state comes from: storage (conveyor ratelimit
// disable/enable, shared by every process) or, when storage says nothing,
// the config file's [engine] rate_limit_enabled.
enum class SwitchSource { kConfig, kStorage };
const char* to_string(SwitchSource source) noexcept;  // "config", "storage"

struct RateLimitingState {
  bool enabled = true;
  SwitchSource source = SwitchSource::kConfig;
  bool operator==(const RateLimitingState&) const = default;
};

// Where a queue's effective limit came from (docs/reference.md, first match wins).
// kBackoff: the downstream asked the queue to wait (backpressure); nothing is
// dispatched until the hold ends, whatever the limit below it.
// kEveryKeyOverride: a key's limit set for every key of its queue at run
// time (conveyor ratelimit set Q --per-key); a key's own (--key K) is kOverride.
enum class LimitSource {
  kDisabled,
  kOverride,
  kQueueConfig,
  kDefault,
  kNone,
  kBackoff,
  kEveryKeyOverride
};

// "override", "queue-config", "default", "none", "disabled", "backoff",
// "per-key-override".
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

// The largest weight of a key (conveyor keys weight): its share of turns.
inline constexpr uint32_t kKeyWeightMax = 1000;

// A setting of a queue's keys made at run time, durable and shared by every
// process on the storage (storage ABI 1.5): a key's own rate limit
// (conveyor ratelimit set Q --key K), the limit of every key of the queue
// (--per-key; key is nullopt), a key's weight (conveyor keys weight Q K W).
// What is not set falls back to the queue's config (key_rate_limit) and
// weight 1.
struct KeyOverride {
  std::string queue;
  std::optional<std::string> key;  // nullopt: every key of the queue
  std::optional<RateLimit> limit;
  std::optional<uint32_t> weight;  // 1..kKeyWeightMax; only for one key
  int64_t updated_at_us = 0;
  bool operator==(const KeyOverride&) const = default;
};

}  // namespace conveyor
