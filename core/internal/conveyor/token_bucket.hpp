// TokenBucket: the per-queue rate limiter of ADR-010.
//
// Tokens are kept as integer nanoseconds of refill credit: one token costs
// token_ns = ceil(1e9 / rate) nanoseconds of credit, and credit grows by the
// elapsed time, capped at burst * token_ns. Integer arithmetic means no
// rounding drift, so for any sequence of takes starting from a full bucket,
// taken in [0, t] <= burst + t / token_ns <= burst + rate * t, exactly.
// (Rounding token_ns up makes the bucket at most 1 ns per token slower than
// the configured rate: far below any measurable error.)
//
// Not thread-safe: each bucket belongs to one dispatcher thread.
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/rate_limit.hpp>

#include <chrono>
#include <cstdint>

namespace conveyor {

class TokenBucket {
 public:
  // A full bucket (burst tokens) at now. limit must be validated.
  TokenBucket(const RateLimit& limit, SteadyTime now);

  // Whole tokens available at now.
  uint32_t available(SteadyTime now);
  // Takes up to n whole tokens at now; returns how many were taken.
  uint32_t take(uint32_t n, SteadyTime now);
  // Gives back n tokens taken but not used. Never fills beyond burst.
  void refund(uint32_t n);
  // How long from now until one whole token is available (zero if one is).
  std::chrono::nanoseconds time_until_next(SteadyTime now);
  // Changes rate and burst, keeping the whole tokens held (at most the new burst).
  void reconfigure(const RateLimit& limit, SteadyTime now);

  const RateLimit& limit() const { return limit_; }
  int64_t token_ns() const { return token_ns_; }

 private:
  void refill(SteadyTime now);

  RateLimit limit_;
  int64_t token_ns_;   // credit one token costs
  int64_t cap_ns_;     // burst * token_ns_, saturated
  int64_t credit_ns_;  // current credit, 0 <= credit_ns_ <= cap_ns_
  SteadyTime last_;    // when credit_ns_ was last refilled
};

}  // namespace conveyor
