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
// within cap_ns of now.
//
// Debt: a take that needs more tokens than the burst (at_least > burst: a
// job dearer than the bucket holds, its burst lowered since it was
// enqueued) waits for a full bucket and then takes exactly at_least, moving
// full_at to now + at_least * token_ns, more than cap_ns ahead of now: the
// bucket is in debt, and no token is available until it is repaid (credit
// and available() are 0 while full_at - now >= cap_ns). So the job pays its
// whole cost over time, never a burst's worth.
//
// The bound: every take leaves full_at >= max(full_at before, now) + taken *
// token_ns, and full_at - now after a take is at most cap_ns, or, for a debt
// take, at_least * token_ns. Summing over the takes in [a, b], the last at
// t <= b: a + taken * token_ns <= full_at <= b + max(cap_ns, largest
// at_least * token_ns). So, from any state, in integer arithmetic and
// exactly: taken in [a, b] <= max(burst, largest debt take) + (b - a) /
// token_ns <= max(burst, largest cost) + rate * (b - a). Without a debt
// take, burst + rate * (b - a). (Rounding token_ns up makes a bucket at most
// 1 ns per token slower than the configured rate.)
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
// (>= 1) are available. When at_least is more than the burst
// (over_burst): exactly at_least tokens when the bucket is full at now (it
// goes into debt), else none.
Take take(const Shape& s, int64_t full_at, uint32_t n, int64_t now, uint32_t at_least = 1);

// The credit n tokens cost (n * token_ns, saturated far from overflow).
int64_t credit_of(const Shape& s, uint32_t n);

// Whether n tokens are more than the bucket holds (n > burst): a take of at
// least n goes into debt.
bool over_burst(const Shape& s, uint32_t n);

// The state after giving back n tokens taken and not used: never fuller
// than a full bucket, so never more credit than was taken.
int64_t refund(const Shape& s, int64_t full_at, uint32_t n);

// Nanoseconds from now until n whole tokens can be taken (0 if they can):
// for n above the burst, until the bucket is full (a debt take's turn).
int64_t ns_until(const Shape& s, int64_t full_at, uint32_t n, int64_t now);

// Nanoseconds from now until the bucket is full.
int64_t ns_until_full(int64_t full_at, int64_t now);

// The state of a bucket that is empty at until and refills from there
// (a backpressure hold ending), or full_at if that is later still.
int64_t empty_until(const Shape& s, int64_t full_at, int64_t until);

// The state holding `held` whole tokens at now under shape s (a limit
// changed: the tokens held carry over, at most the new burst).
int64_t holding(const Shape& s, uint32_t held, int64_t now);

// The state under shape to of a bucket whose state under shape from is
// full_at (a limit changed): the whole tokens it holds carry over, at most
// the new burst, and so does a debt (the whole tokens owed, rounded up, at
// the new token_ns): a limit change never forgives a debt.
int64_t reshape(const Shape& from, const Shape& to, int64_t full_at, int64_t now);

}  // namespace conveyor::bucket
