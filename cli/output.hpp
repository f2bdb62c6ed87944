// What the commands print, human or --json: one formatting path whether the
// data came from storage or from a server's API, so both modes print the same.
#pragma once

#include "commands.hpp"

#include <conveyor/admin_client.hpp>
#include <conveyor/api_messages.hpp>
#include <conveyor/queue_report.hpp>
#include <conveyor/rate_limit.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace conveyor::cli {

// ids in the order storage returned them (one per job, at least one).
void print_enqueued(const GlobalOptions& g, const std::string& queue, const std::string& kind,
                    const std::vector<int64_t>& ids);
// target: the queue's override, a key's own limit or every key's.
void print_rate_limit_set(const GlobalOptions& g, const std::string& queue, const RateLimit& limit,
                          const api::LimitTarget& target = {});
void print_rate_limits(const GlobalOptions& g, const api::RateLimitListing& listing);
// `ratelimit disable` / `enable`: the state now in force.
void print_rate_limiting_switched(const GlobalOptions& g, const RateLimitingState& state);
void print_rate_limit_cleared(const GlobalOptions& g, const std::string& queue,
                              const api::LimitTarget& target = {});
// `keys weight`: the weight set, or nullopt after --reset.
void print_key_weight(const GlobalOptions& g, const std::string& queue, const std::string& key,
                      std::optional<uint32_t> weight);
void print_queues(const GlobalOptions& g, const std::vector<QueueReport>& reports);
void print_queue_paused(const GlobalOptions& g, const std::string& queue, bool paused);
// `keys`: a table KEY READY RUNNING THROTTLED LIMIT SOURCE WEIGHT (running
// and throttled "-" when not live; null in --json), then the per-key limit
// and its source.
void print_keys(const GlobalOptions& g, const KeysReport& report);

// `jobs ls`: a table (or {"jobs": [...], "next_after_id": N}); the cursor of
// the next page when there may be one.
void print_jobs(const GlobalOptions& g, const JobPage& page);
void print_job(const GlobalOptions& g, const Job& job);
// `jobs retry ID...` and `jobs rm ID...` (op "retry" or "rm"): a line per
// id; failures on stderr.
void print_outcomes(const GlobalOptions& g, const std::string& op,
                    const std::vector<JobOutcome>& outcomes);
void print_bulk_retried(const GlobalOptions& g, const std::string& queue, const std::string& state,
                        int64_t total, int64_t batches);
struct CancelOutcome {
  int64_t id = 0;
  conveyor_status status = CONVEYOR_OK;
  std::optional<Job> job;  // after the cancel; the final job for WRONG_STATE
};
void print_cancelled(const GlobalOptions& g, const std::vector<CancelOutcome>& outcomes);
// `jobs cancel --queue` / `jobs rm --queue`: op "cancel" or "rm".
void print_bulk_done(const GlobalOptions& g, const std::string& op, const std::string& queue,
                     const std::vector<JobState>& states, int64_t done, int64_t refused,
                     int64_t batches);
// `queues rm`: the totals of every batch.
void print_queue_removed(const GlobalOptions& g, const std::string& queue,
                         const Engine::QueueRemoval& total, int64_t batches);

}  // namespace conveyor::cli
