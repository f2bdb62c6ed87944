#include <conveyor/token_bucket.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace conveyor {
namespace {

constexpr int64_t kMaxNs = std::numeric_limits<int64_t>::max() / 4;

int64_t cost_of_one_token(double rate) {
  double ns = std::ceil(1e9 / rate);
  return ns >= static_cast<double>(kMaxNs) ? kMaxNs : std::max<int64_t>(1, static_cast<int64_t>(ns));
}

int64_t saturating_mul(int64_t a, int64_t b) {
  return (b != 0 && a > kMaxNs / b) ? kMaxNs : a * b;
}

}  // namespace

TokenBucket::TokenBucket(const RateLimit& limit, SteadyTime now)
    : limit_(limit),
      token_ns_(cost_of_one_token(limit.rate_per_sec)),
      cap_ns_(saturating_mul(limit.burst, token_ns_)),
      credit_ns_(cap_ns_),
      last_(now) {}

void TokenBucket::refill(SteadyTime now) {
  if (now <= last_) return;  // time never runs backwards for us
  int64_t elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count();
  credit_ns_ = (elapsed >= cap_ns_ - credit_ns_) ? cap_ns_ : credit_ns_ + elapsed;
  last_ = now;
}

uint32_t TokenBucket::available(SteadyTime now) {
  refill(now);
  return static_cast<uint32_t>(credit_ns_ / token_ns_);
}

uint32_t TokenBucket::take(uint32_t n, SteadyTime now) {
  uint32_t got = std::min(n, available(now));
  credit_ns_ -= static_cast<int64_t>(got) * token_ns_;
  return got;
}

void TokenBucket::refund(uint32_t n) {
  credit_ns_ = std::min(cap_ns_, credit_ns_ + saturating_mul(n, token_ns_));
}

std::chrono::nanoseconds TokenBucket::time_until_next(SteadyTime now) {
  refill(now);
  return std::chrono::nanoseconds(credit_ns_ >= token_ns_ ? 0 : token_ns_ - credit_ns_);
}

void TokenBucket::reconfigure(const RateLimit& limit, SteadyTime now) {
  uint32_t held = available(now);
  limit_ = limit;
  token_ns_ = cost_of_one_token(limit.rate_per_sec);
  cap_ns_ = saturating_mul(limit.burst, token_ns_);
  credit_ns_ = std::min(cap_ns_, saturating_mul(held, token_ns_));
}

}  // namespace conveyor
