#include <conveyor/internal/token_bucket.hpp>

namespace conveyor {

static_assert(std::is_same_v<SteadyTime::duration, std::chrono::nanoseconds>,
              "the bucket counts steady time in nanoseconds");

TokenBucket::TokenBucket(const RateLimit& limit, SteadyTime now)
    : limit_(limit), shape_(bucket::Shape::of(limit)), full_at_(ns(now)), latest_(ns(now)) {}

uint32_t TokenBucket::available(SteadyTime now) const {
  return bucket::available(shape_, full_at_, at(now));
}

uint32_t TokenBucket::take(uint32_t n, SteadyTime now, uint32_t at_least) {
  latest_ = at(now);
  const bucket::Take t = bucket::take(shape_, full_at_, n, latest_, at_least);
  full_at_ = t.full_at;
  return t.got;
}

void TokenBucket::refund(uint32_t n) { full_at_ = bucket::refund(shape_, full_at_, n); }

std::chrono::nanoseconds TokenBucket::time_until(uint32_t n, SteadyTime now) const {
  return std::chrono::nanoseconds(bucket::ns_until(shape_, full_at_, n, at(now)));
}

void TokenBucket::empty_until(SteadyTime until) {
  full_at_ = bucket::empty_until(shape_, full_at_, ns(until));
}

void TokenBucket::reconfigure(const RateLimit& limit, SteadyTime now) {
  latest_ = at(now);
  const bucket::Shape next = bucket::Shape::of(limit);
  full_at_ = bucket::reshape(shape_, next, full_at_, latest_);
  limit_ = limit;
  shape_ = next;
}

}  // namespace conveyor
