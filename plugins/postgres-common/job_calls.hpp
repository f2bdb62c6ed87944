// The parts of the job calls that are the same in both PostgreSQL plugins,
// whatever their tables: checking and encoding an enqueue batch, running a
// lease batch (complete / extend / release) and reading its outcome, and
// reading job and queue-stats rows laid out alike by both plugins' SQL.
#ifndef CONVEYOR_PLUGINS_POSTGRES_COMMON_JOB_CALLS_HPP
#define CONVEYOR_PLUGINS_POSTGRES_COMMON_JOB_CALLS_HPP

#include "pg_rows.hpp"

#include <conveyor/storage_plugin.hpp>

#include <pqxx/result>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::postgres {

class ConnectionPool;

// An enqueue batch as bound array parameters (text form), in batch order.
struct EnqueueArrays {
  std::string queues, kinds, payloads_hex, priorities, max_attempts, run_ats;
  std::string costs;            // ABI 1.2: one per job (1 without a cost)
  std::string keys;             // ABI 1.4: one per job ('' without a key)
  std::string timeouts;         // ABI 1.6: one per job (0 without a timeout)
  std::string distinct_queues;  // sorted: concurrent enqueues register queues in one order
  // The later channel's payloads (due_wakes.hpp): one per queue and
  // kLaterGrainUs of run_at among the jobs not due at now_us, the time
  // rounded up, so a wake never comes before the job can be claimed.
  std::string later_payloads;
};
inline constexpr int64_t kLaterGrainUs = 10'000;
// Throws sdk::Error(CONVEYOR_E_INVALID) naming the job and what is wrong.
// costs: one per job (enqueue_v3, checked by the SDK adapter), or empty for 1.
// keys: one per job (enqueue_v4; lengths checked by the SDK adapter), or
// empty for the empty key.
// timeouts: one per job (enqueue_v5; ranges checked by the SDK adapter), or
// empty for 0.
// now_us: the enqueue's clock, which tells delayed jobs from due ones.
EnqueueArrays encode_enqueue_batch(std::span<const conveyor_new_job> jobs, int64_t now_us,
                                   std::span<const int32_t> costs = {},
                                   std::span<const std::string_view> keys = {},
                                   std::span<const int64_t> timeouts = {});
// enqueue_v3's jobs split into the plain jobs and their costs.
struct CostedJobs {
  std::vector<conveyor_new_job> jobs;
  std::vector<int32_t> costs;
};
CostedJobs split_costed(std::span<const conveyor_new_job_v2> jobs);
// enqueue_v4's jobs split into the plain jobs, their costs and their keys
// (borrowed from the caller's array).
struct KeyedJobs {
  std::vector<conveyor_new_job> jobs;
  std::vector<int32_t> costs;
  std::vector<std::string_view> keys;
};
KeyedJobs split_keyed(std::span<const conveyor_new_job_v3> jobs);
// enqueue_v5's jobs: as split_keyed, with their timeouts.
struct TimedJobs {
  std::vector<conveyor_new_job> jobs;
  std::vector<int32_t> costs;
  std::vector<std::string_view> keys;
  std::vector<int64_t> timeouts;
};
TimedJobs split_timed(std::span<const conveyor_new_job_v4> jobs);

// ABI 1.4 claim_keys: the keys of a call that want jobs (max_jobs > 0), in
// the caller's order. Throws sdk::Error(CONVEYOR_E_INVALID) for a key a text
// column cannot hold (not UTF-8, or a NUL byte); the SDK adapter has checked
// lengths and duplicates.
std::vector<sdk::KeyClaim> wanted_keys(std::span<const sdk::KeyClaim> keys, const char* op);
// Keys and their counts as bound array parameters (text[], bigint[]), and
// the total (at most UINT32_MAX: no call reports more jobs).
struct KeyClaimArrays {
  std::string keys, counts;
  uint32_t total = 0;
};
KeyClaimArrays key_claim_arrays(std::span<const sdk::KeyClaim> keys);

// ABI 1.4 list_ready_keys: throws sdk::Error(CONVEYOR_E_INVALID) for a queue
// or after_key a text column cannot hold (the SDK adapter has checked the
// limits and lengths).
void check_ready_keys_call(std::string_view queue, std::optional<std::string_view> after_key);
// Rows (key, ready) copied out of a result, then reported in key order
// (bytewise), at most limit of them. Returns how many were reported.
std::vector<sdk::OwnedReadyKey> ready_key_rows(const pqxx::result& r);
uint32_t report_ready_keys(std::vector<sdk::OwnedReadyKey>& keys, uint32_t limit,
                           const sdk::ReadyKeySink& sink);

// Runs statement(value, ids[], tokens[]) for a batch of leases, sorted by id
// (concurrent batches over the same jobs lock them in one order). The
// statement returns (job id, token) of every lease it applied to; results[i]
// is CONVEYOR_OK for those, CONVEYOR_E_LEASE_LOST for the others.
void run_lease_batch(ConnectionPool& pool, const char* op, const char* statement,
                     std::span<const conveyor_lease> leases, int64_t value,
                     std::span<conveyor_status> results);

// A claimed job from a row (id, kind, payload, priority, attempt,
// max_attempts, run_at, created_at, last_error, cost, key, started_at,
// timeout_ms), RUNNING in queue
// under the lease given.
OwnedJob claimed_job_at(const pqxx::row& row, const std::string& queue, int64_t lease_token,
                        int64_t lease_expires_us);
// Reports claimed jobs in claim order (RETURNING promises none).
void report_claimed(std::vector<OwnedJob>& jobs, const sdk::JobSink& sink);

// A job from a row (id, queue, kind, payload, priority, state, attempt,
// max_attempts, run_at, created_at, finalized_at, lease_token, lease_expires,
// last_error, cost, key, started_at, timeout_ms) starting at column first, as get_job reports it at
// now_us (AVAILABLE before run_at is SCHEDULED; a lease only while RUNNING).
OwnedJob stored_job_at(const pqxx::row& row, pqxx::row::size_type first, int64_t now_us);

// The queue_stats statement of both plugins over SOURCE, a FROM item (SQL
// text, "{s}" the schema) with columns queue, state (1 available, 3 running,
// 4 completed, 5 failed, 6 cancelled) and run_at, one row per retained job:
// rows (name, paused, pending, scheduled, running, completed, failed,
// cancelled) in name order, paused queues without jobs included. $1 is the
// host's now.
#define CONVEYOR_QUEUE_STATS_SQL(SOURCE)                                                    \
  "SELECT coalesce(c.queue, p.name) COLLATE \"C\" AS name, coalesce(p.paused, false),\n"    \
  "       coalesce(c.pending, 0), coalesce(c.scheduled, 0), coalesce(c.running, 0),\n"      \
  "       coalesce(c.completed, 0), coalesce(c.failed, 0), coalesce(c.cancelled, 0)\n"      \
  "FROM (\n"                                                                                \
  "  SELECT queue,\n"                                                                       \
  "         count(*) FILTER (WHERE state = 1 AND run_at <= $1::bigint) AS pending,\n"       \
  "         count(*) FILTER (WHERE state = 1 AND run_at > $1::bigint) AS scheduled,\n"      \
  "         count(*) FILTER (WHERE state = 3) AS running,\n"                                \
  "         count(*) FILTER (WHERE state = 4) AS completed,\n"                              \
  "         count(*) FILTER (WHERE state = 5) AS failed,\n"                                 \
  "         count(*) FILTER (WHERE state = 6) AS cancelled\n"                               \
  "  FROM " SOURCE                                                                          \
  " GROUP BY queue\n"                                                                       \
  ") AS c\n"                                                                                \
  "FULL JOIN (SELECT name, paused FROM {s}.queues WHERE paused) AS p ON p.name = c.queue\n" \
  "ORDER BY 1"

// Reports job through sink, or throws sdk::Error(CONVEYOR_E_NOT_FOUND) for
// job_id when there is none.
void report_job(const std::optional<OwnedJob>& job, int64_t job_id, const sdk::JobSink& sink);

// Queue-stats rows (name, paused, pending, scheduled, running, completed,
// failed, cancelled) copied out of a result, to report after the read.
std::vector<sdk::OwnedQueueStats> queue_stats_rows(const pqxx::result& r);

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_COMMON_JOB_CALLS_HPP
