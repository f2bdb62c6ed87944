#include "queue_bucket.hpp"

namespace conveyor {
namespace {
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
// Spelled out: clang (the fuzz build) does not deduce an aggregate's arguments.
template <class... F>
Overloaded(F...) -> Overloaded<F...>;
}  // namespace

std::variant<TokenBucket, FleetBucket> QueueBucket::make(const RateLimit& limit,
                                                         SteadyTime now) const {
  if (limit.scope == LimitScope::kFleet)
    return std::variant<TokenBucket, FleetBucket>(std::in_place_type<FleetBucket>, storage_, queue_,
                                                  limit, clock_, counters_);
  return std::variant<TokenBucket, FleetBucket>(std::in_place_type<TokenBucket>, limit, now);
}

QueueBucket::QueueBucket(Storage& storage, std::string_view queue, const RateLimit& limit,
                         const Clock& clock, QueueCounters& counters, SteadyTime now)
    : storage_(storage),
      queue_(queue),
      clock_(clock),
      counters_(counters),
      bucket_(make(limit, now)) {}

uint32_t QueueBucket::available(SteadyTime now) const {
  return std::visit(Overloaded{[&](const TokenBucket& b) { return b.available(now); },
                               [](const FleetBucket& b) { return b.available(); }},
                    bucket_);
}

uint32_t QueueBucket::take(uint32_t n, SteadyTime now, uint32_t at_least) {
  return std::visit(Overloaded{[&](TokenBucket& b) { return b.take(n, now, at_least); },
                               [&](FleetBucket& b) { return b.take(n, at_least); }},
                    bucket_);
}

void QueueBucket::refund(uint32_t n) {
  std::visit([&](auto& b) { b.refund(n); }, bucket_);
}

std::chrono::nanoseconds QueueBucket::time_until(uint32_t n, SteadyTime now) const {
  return std::visit(Overloaded{[&](const TokenBucket& b) { return b.time_until(n, now); },
                               [&](const FleetBucket& b) { return b.time_until(n); }},
                    bucket_);
}

void QueueBucket::empty_until(SteadyTime until) {
  std::visit([&](auto& b) { b.empty_until(until); }, bucket_);
}

void QueueBucket::reconfigure(const RateLimit& limit, SteadyTime now) {
  if (limit.scope != this->limit().scope) {
    // Emplace: a FleetBucket holds references, so it is built in place.
    if (limit.scope == LimitScope::kFleet)
      bucket_.emplace<FleetBucket>(storage_, queue_, limit, clock_, counters_);
    else
      bucket_.emplace<TokenBucket>(limit, now);
    return;
  }
  std::visit(Overloaded{[&](TokenBucket& b) { b.reconfigure(limit, now); },
                        [&](FleetBucket& b) { b.reconfigure(limit); }},
             bucket_);
}

const RateLimit& QueueBucket::limit() const {
  return std::visit([](const auto& b) -> const RateLimit& { return b.limit(); }, bucket_);
}

int64_t QueueBucket::token_ns() const {
  return std::visit([](const auto& b) { return b.token_ns(); }, bucket_);
}

}  // namespace conveyor
