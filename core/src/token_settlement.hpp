// What a unit's claims may take under its rate limit, and the settling of
// what the claimed jobs cost once they are known (docs/reference.md, "Rate
// limits"):
//   tokens = bucket.take(batch * cost_hint, at least cost_hint); none: the
//            unit waits exactly until they are due; batch = tokens / cost_hint
//            (cost_hint above the burst: the take waits for a full bucket
//            and takes cost_hint into debt, for one job)
//   after the claim, jobs costing more take the tokens they lack, those that
//   still do not fit go back (their place kept), unused tokens are refunded.
// A job pays its whole cost, even above the burst (bucket_math.hpp).
// After a backpressure hold the unit's ResumeRamp paces it as well.
// A unit with no limit never touches a bucket. Dispatcher thread only.
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/internal/storage.hpp>
#include <conveyor/job.hpp>

#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace conveyor {

struct QueueRunner;

// What a unit may claim: up to jobs jobs, for which tokens were taken.
// jobs 0: throttled until wait_until, or the fleet bucket's storage failed
// (error set).
struct Grant {
  uint32_t jobs = 0;
  uint32_t tokens = 0;
  SteadyTime wait_until{};
  std::exception_ptr error = nullptr;
};

class TokenSettlement {
 public:
  explicit TokenSettlement(Storage& storage) : storage_(storage) {}

  // Tokens for up to max_jobs jobs of r at now. For an unlimited unit out
  // of a hold: {max_jobs, 0}, no bucket touched. Counts a throttle.
  Grant take(QueueRunner& r, uint32_t max_jobs, SteadyTime now);
  // jobs were claimed with tokens taken for them: takes the tokens costlier
  // jobs lack, gives back the jobs that still do not fit, refunds the rest.
  // When jobs were given back: when their tokens are due.
  std::optional<SteadyTime> settle(QueueRunner& r, std::vector<Job>& jobs, uint32_t tokens,
                                   SteadyTime now);
  // Gives n tokens back to r's bucket; a fleet bucket's failure only logs
  // (the tokens are lost: the fleet runs slower, never faster).
  void refund(QueueRunner& r, uint32_t n);
  // The tokens jobs take from r's bucket (each its whole cost).
  static uint32_t tokens_for(const QueueRunner& r, std::span<const Job> jobs);

 private:
  Storage& storage_;
};

// Releases claimed jobs unrun, each keeping its place (run_at); why says
// why, for the log line of a release that fails (its lease then expires and
// the job is rescued).
void give_back(Storage& storage, std::string_view queue, std::span<const Job> jobs,
               const char* why);

}  // namespace conveyor
