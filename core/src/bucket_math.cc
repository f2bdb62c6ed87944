#include <conveyor/internal/bucket_math.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace conveyor::bucket {
namespace {

// Far from overflow for any sum of a time (ns since 1970: < 2^61) and a credit.
constexpr int64_t kMaxNs = std::numeric_limits<int64_t>::max() / 4;

int64_t saturating_mul(int64_t a, int64_t b) { return (b != 0 && a > kMaxNs / b) ? kMaxNs : a * b; }

// cap_ns - (full_at - now), clamped to [0, cap_ns].
int64_t credit(const Shape& s, int64_t full_at, int64_t now) {
  if (full_at <= now) return s.cap_ns;
  const int64_t owed = full_at - now;
  return owed >= s.cap_ns ? 0 : s.cap_ns - owed;
}

}  // namespace

Shape Shape::of(const RateLimit& limit) {
  Shape s;
  const double ns = std::ceil(1e9 / limit.rate_per_sec);
  s.token_ns =
      ns >= static_cast<double>(kMaxNs) ? kMaxNs : std::max<int64_t>(1, static_cast<int64_t>(ns));
  s.cap_ns = saturating_mul(limit.burst, s.token_ns);
  return s;
}

uint32_t available(const Shape& s, int64_t full_at, int64_t now) {
  return static_cast<uint32_t>(credit(s, full_at, now) / s.token_ns);
}

Take take(const Shape& s, int64_t full_at, uint32_t n, int64_t now, uint32_t at_least) {
  if (over_burst(s, at_least)) {
    // Debt: the whole at_least from a full bucket; full_at goes beyond cap_ns of now.
    if (n < at_least || full_at > now) return {0, full_at};
    return {at_least, now + credit_of(s, at_least)};
  }
  const uint32_t got = std::min(n, available(s, full_at, now));
  if (got == 0 || got < at_least) return {0, full_at};
  return {got, std::max(full_at, now) + static_cast<int64_t>(got) * s.token_ns};
}

int64_t credit_of(const Shape& s, uint32_t n) { return saturating_mul(n, s.token_ns); }

bool over_burst(const Shape& s, uint32_t n) { return credit_of(s, n) > s.cap_ns; }

int64_t refund(const Shape& s, int64_t full_at, uint32_t n) { return full_at - credit_of(s, n); }

int64_t ns_until(const Shape& s, int64_t full_at, uint32_t n, int64_t now) {
  const int64_t need = std::min(s.cap_ns, saturating_mul(std::max<uint32_t>(n, 1), s.token_ns));
  if (credit(s, full_at, now) >= need) return 0;
  // Credit grows one ns per ns once full_at - now < cap_ns: it is need when
  // full_at - now = cap_ns - need.
  return (full_at - now) - (s.cap_ns - need);
}

int64_t ns_until_full(int64_t full_at, int64_t now) { return full_at <= now ? 0 : full_at - now; }

int64_t empty_until(const Shape& s, int64_t full_at, int64_t until) {
  return std::max(full_at, until + s.cap_ns);
}

int64_t holding(const Shape& s, uint32_t held, int64_t now) {
  return now + (s.cap_ns - std::min(s.cap_ns, saturating_mul(held, s.token_ns)));
}

int64_t reshape(const Shape& from, const Shape& to, int64_t full_at, int64_t now) {
  const int64_t owed = full_at - now - from.cap_ns;  // > 0: in debt
  if (owed <= 0) return holding(to, available(from, full_at, now), now);
  const int64_t tokens = owed / from.token_ns + (owed % from.token_ns != 0 ? 1 : 0);
  // Each term below kMaxNs, now below 2^61: no overflow.
  return now + to.cap_ns + saturating_mul(tokens, to.token_ns);
}

}  // namespace conveyor::bucket
