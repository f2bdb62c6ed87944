#include "token_settlement.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "dispatch_unit.hpp"

namespace conveyor {
namespace {

// A fleet-limited unit takes at least this long's worth of tokens per take,
// so its bucket's storage writes per second are bounded by the processes,
// never the job rate.
constexpr std::chrono::milliseconds kFleetTakeQuantum{10};

// The tokens job takes from a bucket of burst: its cost, at most the burst
// (a job dearer than a burst lowered since it was enqueued takes a full one).
uint32_t token_cost(const Job& job, uint32_t burst) {
  return std::clamp<uint32_t>(static_cast<uint32_t>(std::max(job.cost, 1)), 1, burst);
}

}  // namespace

Grant TokenSettlement::take(QueueRunner& r, uint32_t max_jobs, SteadyTime now) {
  if (ResumeRamp* ramp = r.hold.ramp(); ramp && ramp->finished(now)) {
    r.hold.end_ramp();
    // Back at the unit's own pace, from an empty bucket: the tokens banked
    // while the ramp held it back would be a burst into the downstream.
    if (r.bucket && !r.bucket->fleet()) r.bucket->empty_until(now);
  }
  ResumeRamp* ramp = r.hold.ramp();
  if (ramp) {
    const uint32_t paced = ramp->take(max_jobs, now);
    if (paced == 0) {
      r.counters.throttled.fetch_add(1, std::memory_order_relaxed);
      return {.wait_until = now + ramp->time_until_next(now)};
    }
    max_jobs = paced;
  }
  if (!r.bucket) return {.jobs = max_jobs};
  const RateLimit& limit = r.bucket->limit();
  const uint32_t hint = std::max<uint32_t>(1, std::min(r.cost_hint, limit.burst));
  const uint64_t want = std::min<uint64_t>(uint64_t{max_jobs} * hint, UINT32_MAX);
  uint32_t at_least = hint;
  if (r.bucket->fleet()) {
    const double quantum = std::ceil(limit.rate_per_sec * kFleetTakeQuantum.count() / 1000.0);
    const uint64_t cap = std::min<uint64_t>(limit.burst, want);
    at_least = static_cast<uint32_t>(
        std::max<uint64_t>(hint, std::min<uint64_t>(cap, static_cast<uint64_t>(quantum))));
  }
  uint32_t got = 0;
  try {
    got = r.bucket->take(static_cast<uint32_t>(want), now, at_least);
  } catch (const std::exception&) {
    if (ramp) ramp->give_back(max_jobs, now);
    return {.error = std::current_exception()};
  }
  const uint32_t jobs = got == 0 ? 0 : std::min(max_jobs, std::max<uint32_t>(1, got / hint));
  if (ramp && jobs < max_jobs) ramp->give_back(max_jobs - jobs, now);
  if (got == 0) {
    r.counters.throttled.fetch_add(1, std::memory_order_relaxed);
    return {.wait_until = now + r.bucket->time_until(at_least, now)};
  }
  return {.jobs = jobs, .tokens = got};
}

uint32_t TokenSettlement::tokens_for(const QueueRunner& r, std::span<const Job> jobs) {
  if (!r.bucket) return 0;
  const uint32_t burst = r.bucket->limit().burst;
  uint64_t sum = 0;
  for (const Job& job : jobs) sum += token_cost(job, burst);
  return static_cast<uint32_t>(std::min<uint64_t>(sum, UINT32_MAX));
}

void TokenSettlement::refund(QueueRunner& r, uint32_t n) {
  if (!r.bucket || n == 0) return;
  try {
    r.bucket->refund(n);
  } catch (const std::exception& e) {
    spdlog::debug("queue {}: giving back {} fleet token(s) failed (they are lost): {}", r.name, n,
                  e.what());
  }
}

std::optional<SteadyTime> TokenSettlement::settle(QueueRunner& r, std::vector<Job>& jobs,
                                                  uint32_t tokens, SteadyTime now) {
  if (!r.bucket) return std::nullopt;
  const uint32_t burst = r.bucket->limit().burst;
  const auto cost = [burst](const Job& job) { return token_cost(job, burst); };
  // The most a job of this batch cost: the next claims wait for that many
  // tokens and ask for tokens / cost_hint jobs, so jobs that cost more than
  // one rarely need giving back.
  uint32_t most = 1;
  for (const Job& job : jobs) most = std::max(most, cost(job));
  if (!jobs.empty()) r.cost_hint = most;
  const uint32_t need = tokens_for(r, jobs);
  uint32_t have = tokens;
  if (need > have) {
    try {
      have += r.bucket->take(need - have, now);
    } catch (const std::exception& e) {
      spdlog::debug("queue {}: taking fleet tokens for costly jobs failed: {}", r.name, e.what());
    }
  }
  std::optional<SteadyTime> wait;
  uint32_t used = need;
  if (need > have) {
    // Start the jobs that fit, in claim order; the rest wait for their tokens.
    size_t keep = 0;
    used = 0;
    for (; keep < jobs.size() && used + cost(jobs[keep]) <= have; ++keep) used += cost(jobs[keep]);
    give_back(storage_, r.name, std::span<const Job>(jobs.data() + keep, jobs.size() - keep),
              "its tokens were not there yet");
    jobs.erase(jobs.begin() + static_cast<std::ptrdiff_t>(keep), jobs.end());
    wait = now;  // set below, after the refund
  }
  refund(r, have - used);
  if (wait) wait = now + r.bucket->time_until(r.cost_hint, now);
  return wait;
}

void give_back(Storage& storage, std::string_view queue, std::span<const Job> jobs,
               const char* why) {
  // One release per job with its own run_at as "now": it stays where it was
  // in claim order, and its time waiting (the unserved report's grace) keeps
  // counting. Rare: unserved kinds once per queue per filter hold; costly
  // jobs when cost_hint underestimated them (the first batch, mixed costs).
  for (const Job& job : jobs) {
    const conveyor_lease lease = lease_of(job);
    try {
      storage.release(std::span<const conveyor_lease>(&lease, 1), job.run_at_us);
    } catch (const std::exception& e) {
      spdlog::warn(
          "queue {}: giving back job {} of kind '{}' ({}) failed (its lease expires "
          "and it is rescued): {}",
          queue, job.id, job.kind, why, e.what());
    }
  }
}

}  // namespace conveyor
