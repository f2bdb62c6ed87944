// TokenBucket: the per-process rate limiter (scope "process"; why it lives
// in the core: docs/design/rate-limits.md).
// The arithmetic, and the bound it proves (taken in [a, b] <= burst +
// rate * (b - a), exactly; max(burst, the largest cost) + rate * (b - a)
// with takes of a cost above the burst, which put the bucket in debt), are
// bucket_math.hpp's, shared with FleetBucket.
//
// Time only goes forward for a bucket: a call whose now is earlier than the
// latest now a take or reconfigure saw counts as at that latest now. (One
// dispatcher pass reads the clock more than once; a take and refund at a
// later reading must not leave the bucket short at an earlier one.)
//
// Not thread-safe: each bucket belongs to one dispatcher thread.
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/internal/bucket_math.hpp>
#include <conveyor/rate_limit.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace conveyor {

class TokenBucket {
 public:
  // A full bucket (burst tokens) at now. limit must be validated.
  TokenBucket(const RateLimit& limit, SteadyTime now);

  // Whole tokens available at now.
  uint32_t available(SteadyTime now) const;
  // Takes up to n whole tokens at now, none when fewer than at_least are
  // available; returns how many were taken. at_least above the burst: all
  // at_least from a full bucket, into debt (bucket_math.hpp), else none.
  uint32_t take(uint32_t n, SteadyTime now, uint32_t at_least = 1);
  // Gives back n tokens taken but not used. Never fills beyond burst.
  void refund(uint32_t n);
  // How long from now until one whole token is available (zero if one is).
  std::chrono::nanoseconds time_until_next(SteadyTime now) const { return time_until(1, now); }
  // How long from now until n whole tokens can be taken (n > burst: until
  // the bucket is full, when a take of n goes into debt).
  std::chrono::nanoseconds time_until(uint32_t n, SteadyTime now) const;
  // Empties the bucket until `until`; it refills from empty after.
  void empty_until(SteadyTime until);
  // Changes rate and burst, keeping the whole tokens held (at most the new
  // burst), or the whole tokens owed (a debt is never forgiven).
  void reconfigure(const RateLimit& limit, SteadyTime now);

  const RateLimit& limit() const { return limit_; }
  int64_t token_ns() const { return shape_.token_ns; }

 private:
  static int64_t ns(SteadyTime t) { return t.time_since_epoch().count(); }
  // now, or the latest now seen if that is later.
  int64_t at(SteadyTime now) const { return std::max(ns(now), latest_); }

  RateLimit limit_;
  bucket::Shape shape_;
  int64_t full_at_;  // steady ns at which the bucket is full again
  int64_t latest_;   // the latest now a take or reconfigure saw
};

}  // namespace conveyor
