// QueueBucket: a limited queue's bucket as the dispatcher sees it, whatever
// the limit's scope: a TokenBucket (process) or a FleetBucket (fleet). Both
// run bucket_math.hpp's arithmetic; only where the state lives differs.
//
// Not thread-safe (the dispatcher thread's). take, refund and empty_until of
// a fleet bucket call storage and may throw StorageError.
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/internal/storage.hpp>
#include <conveyor/internal/token_bucket.hpp>
#include <conveyor/rate_limit.hpp>

#include "fleet_bucket.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

namespace conveyor {

class QueueBucket {
 public:
  // A full process bucket, or the queue's fleet bucket as storage holds it.
  // storage, clock and counters outlive the bucket.
  QueueBucket(Storage& storage, std::string_view queue, const RateLimit& limit, const Clock& clock,
              QueueCounters& counters, SteadyTime now);

  uint32_t available(SteadyTime now) const;
  uint32_t take(uint32_t n, SteadyTime now, uint32_t at_least = 1);
  void refund(uint32_t n);
  std::chrono::nanoseconds time_until(uint32_t n, SteadyTime now) const;
  void empty_until(SteadyTime until);
  // A new limit of the same scope keeps the bucket's state; a new scope
  // starts the other kind of bucket.
  void reconfigure(const RateLimit& limit, SteadyTime now);

  const RateLimit& limit() const;
  int64_t token_ns() const;
  // The fleet bucket, or null for a process bucket.
  const FleetBucket* fleet() const { return std::get_if<FleetBucket>(&bucket_); }

 private:
  std::variant<TokenBucket, FleetBucket> make(const RateLimit& limit, SteadyTime now) const;

  Storage& storage_;
  const std::string queue_;
  const Clock& clock_;
  QueueCounters& counters_;
  std::variant<TokenBucket, FleetBucket> bucket_;
};

}  // namespace conveyor
