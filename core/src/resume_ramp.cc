#include "resume_ramp.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace conveyor {
namespace {

double seconds(SteadyTime::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

double ResumeRamp::burst_of(double rate) { return std::max(1.0, std::floor(rate / 10)); }

ResumeRamp::ResumeRamp(double refused_rate, double ceiling, SteadyTime now)
    : start_rate_(std::max(kFloor, refused_rate / 2)),
      knee_(refused_rate > 0 ? std::max(start_rate_, 0.9 * refused_rate)
                             : std::numeric_limits<double>::infinity()),
      step_(std::max(0.1, 0.01 * refused_rate)),
      ceiling_(ceiling),
      started_(now),
      bound_at_(now),
      next_due_(now) {}

double ResumeRamp::rate(SteadyTime now) const {
  const double t = std::max(0.0, seconds(now - started_));
  double r = start_rate_ * std::exp2(std::min(t, 60.0));
  if (r > knee_) {
    const double to_knee = std::log2(knee_ / start_rate_);
    r = knee_ + step_ * (t - to_knee);
  }
  return ceiling_ > 0 ? std::min(r, ceiling_) : r;
}

uint32_t ResumeRamp::take(uint32_t n, SteadyTime now) {
  const double r = rate(now);
  const double interval_s = 1.0 / r;
  // Resumes with one job, never with a banked burst.
  const SteadyTime base = std::max(next_due_, now);
  const double ahead_s = seconds(now - base);  // <= 0
  const double can = std::floor(ahead_s / interval_s + burst_of(r) + 1e-9);
  const uint32_t got = can < 1 ? 0 : static_cast<uint32_t>(std::min<double>(n, can));
  if (got < n) bound_at_ = now;
  if (got > 0)
    next_due_ = base + std::chrono::duration_cast<SteadyTime::duration>(
                           std::chrono::duration<double>(got * interval_s));
  return got;
}

void ResumeRamp::give_back(uint32_t n, SteadyTime now) {
  next_due_ -= std::chrono::duration_cast<SteadyTime::duration>(
      std::chrono::duration<double>(n / rate(now)));
}

std::chrono::nanoseconds ResumeRamp::time_until_next(SteadyTime now) const {
  const double r = rate(now);
  const SteadyTime due = next_due_ - std::chrono::duration_cast<SteadyTime::duration>(
                                         std::chrono::duration<double>((burst_of(r) - 1) / r));
  return std::max(std::chrono::nanoseconds(0),
                  std::chrono::duration_cast<std::chrono::nanoseconds>(due - now));
}

bool ResumeRamp::finished(SteadyTime now) const {
  if (ceiling_ > 0 && rate(now) >= ceiling_) return true;
  return now - bound_at_ >= kUnboundFor;
}

}  // namespace conveyor
