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

// The tokens job takes from its bucket: its whole cost, even above the
// burst (a burst lowered since it was enqueued, or an override): such a job
// waits for a full bucket and puts it in debt (bucket_math.hpp), so the
// units taken stay within max(burst, cost) + rate * t.
uint32_t token_cost(const Job& job) { return static_cast<uint32_t>(std::max(job.cost, 1)); }

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
  // A hint above the burst (the last batch held a job dearer than it): the
  // take waits for a full bucket and takes the hint's tokens, into debt, for
  // one job (bucket_math.hpp).
  const uint32_t hint = std::max<uint32_t>(1, r.cost_hint);
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
  uint64_t sum = 0;
  for (const Job& job : jobs) sum += token_cost(job);
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
  const auto cost = [](const Job& job) { return token_cost(job); };
  // The most a job of this batch cost: the next claims wait for that many
  // tokens and ask for tokens / cost_hint jobs, so jobs that cost more than
  // one rarely need giving back.
  //
  // A job dearer than the burst is never starved by cheap jobs of the unit:
  // the batch that found it sets cost_hint to its cost (or more), so it goes
  // back (keeping its place, with every job after it) at most once per
  // claim that underestimated it; the unit's next take waits for a full
  // bucket and takes that whole cost into debt for one job (bucket_math.hpp),
  // and the claim finds the job first again. Only takers that never see it
  // can keep the bucket from filling and delay it (other processes on a
  // fleet bucket, or the queue's remote workers, that do not serve its
  // kind), and those only while they take the whole rate.
  uint32_t most = 1;
  for (const Job& job : jobs) most = std::max(most, cost(job));
  if (!jobs.empty()) r.cost_hint = most;
  const uint32_t need = tokens_for(r, jobs);
  uint32_t have = tokens;
  if (need > have) {
    // Never into debt (at_least 1): a job dearer than the burst starts only
    // from a take of its whole cost (the next claim's, when cost_hint is
    // raised above); here it goes back.
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
