// The token bucket's arithmetic (docs/design/rate-limits.md), in one place
// for every bucket: the process bucket (TokenBucket, steady clock) and the fleet bucket
// (FleetBucket, whose state lives in storage and is read on the wall clock).
//
// A bucket's whole state is one number, full_at: the time (ns on the
// bucket's clock) at which it is full again; full_at <= now means full. One
// token costs token_ns = ceil(1e9 / rate) ns of credit; the credit at now is
// cap_ns - (full_at - now), at most cap_ns = burst * token_ns. This is the
// GCRA form of a token bucket: a take of n moves full_at to
// max(full_at, now) + n * token_ns and is allowed only while full_at stays
// within cap_ns of now. Integer arithmetic, so for any sequence of takes
// from a full bucket, taken in [a, b] <= burst + (b - a) / token_ns <=
// burst + rate * (b - a), exactly. (Rounding token_ns up makes a bucket at
// most 1 ns per token slower than the configured rate.)
#pragma once

#include <conveyor/rate_limit.hpp>

#include <cstdint>

namespace conveyor::bucket {

struct Shape {
  int64_t token_ns = 1;  // credit one token costs, >= 1
  int64_t cap_ns = 1;    // burst * token_ns, saturated
  static Shape of(const RateLimit& limit);
};

// Whole tokens available at now (0 while full_at - now >= cap_ns, as
// during a backpressure hold).
uint32_t available(const Shape& s, int64_t full_at, int64_t now);

struct Take {
  uint32_t got = 0;     // tokens taken, <= n
  int64_t full_at = 0;  // the state after the take
};
// Takes up to n whole tokens at now, or none when fewer than at_least
// (>= 1) are available.
Take take(const Shape& s, int64_t full_at, uint32_t n, int64_t now, uint32_t at_least = 1);

// The credit n tokens cost (n * token_ns, saturated far from overflow).
int64_t credit_of(const Shape& s, uint32_t n);

// The state after giving back n tokens taken and not used: never fuller
// than a full bucket, so never more credit than was taken.
int64_t refund(const Shape& s, int64_t full_at, uint32_t n);

// Nanoseconds from now until n whole tokens are available (0 if they are;
// n above the burst counts as the burst).
int64_t ns_until(const Shape& s, int64_t full_at, uint32_t n, int64_t now);

// Nanoseconds from now until the bucket is full.
int64_t ns_until_full(int64_t full_at, int64_t now);

// The state of a bucket that is empty at until and refills from there
// (a backpressure hold ending), or full_at if that is later still.
int64_t empty_until(const Shape& s, int64_t full_at, int64_t until);

// The state holding `held` whole tokens at now under shape s (a limit
// changed: the tokens held carry over, at most the new burst).
int64_t holding(const Shape& s, uint32_t held, int64_t now);

}  // namespace conveyor::bucket
