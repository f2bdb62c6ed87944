// The "postgres" storage plugin (canonical kind) on libpqxx 6.4.
//
// [storage.options]
//   dsn                (required) a libpq connection string, URI
//                      ("postgresql://user:pw@host:5432/db?sslmode=...") or
//                      key=value ("host=... dbname=..."). Settings it leaves
//                      out are added: connect_timeout (connect_timeout_s),
//                      client_encoding=UTF8, fallback_application_name=conveyor,
//                      TCP keepalives (idle 30 s, interval 10 s, count 3).
//   schema             ("conveyor") the schema holding the plugin's tables:
//                      [a-z_][a-z0-9_]{0,62}, not "pg_*". Several deployments
//                      can share a database under different schemas.
//   pool_size          (8, 1..100) the most connections one process opens for
//                      storage calls; one more is used for LISTEN by `serve`.
//                      Connections are opened only as concurrent calls need them.
//   connect_timeout_s  (5, 1..3600) how long a connection attempt may take (an
//                      unreachable server fails fast with the reason), and how
//                      long a call waits for a pooled connection.
//   lease_commit       ("async" or "sync") whether claims, completions and
//                      failures wait for their WAL flush (CONVEYOR_PG_LEASE_COMMIT
//                      in pg_sql.hpp says why they need not).
//   statement_timeout_ms (60000, 0..86400000; 0: no limit) the plugin's own
//                      statement_timeout, set on each of its connections with
//                      idle_in_transaction_session_timeout = 60 s and (14+)
//                      idle_session_timeout = 0, whatever the database or
//                      role sets (pg_connect.hpp).
//   idle_close_s       (60, 0..86400; 0: kept) pooled connections idle this
//                      long are closed.
// At open, a warning when pool_size + 1 does not fit in the connections the
// server has left (connection_budget.hpp).
// Unknown keys are CONVEYOR_E_INVALID.
//
// Design:
//   * Tables live in their own schema, created and upgraded by versioned
//     migrations under an advisory lock (pg_schema.cc).
//   * Every statement is prepared and takes its values as bound parameters;
//     only the validated, quoted schema name is part of the SQL text. The
//     server plans each once (generic plans, see configure_session), so
//     statistics made stale by a drain cannot turn a claim or a completion
//     into a table scan. Needs PostgreSQL 12 or newer.
//   * claim is one statement: a CTE selects the queue's ready rows in
//     (priority, run_at, id) order with FOR UPDATE SKIP LOCKED, limited to the
//     batch, and the UPDATE sets the lease. A partial index holds only ready
//     rows. complete, extend_leases and release are one statement per batch.
//   * Times compared for eligibility are the host's now_us, never now() on
//     the server. Times are bigint microseconds since the Unix epoch.
//   * enqueue sends one NOTIFY per queue of the batch in its transaction;
//     overrides and pause/resume notify a control channel. `serve` keeps one
//     LISTEN connection (notification_listener.cc); polling stays the fallback.
//   * A lost connection is CONVEYOR_E_UNAVAILABLE, the connection is dropped
//     and new ones are opened with backoff (connection_pool.cc). Calls whose
//     repetition is harmless are repeated once on a fresh connection; a claim
//     whose reply was lost gives its jobs back (they carry its unique token).
//   * Callbacks run after the statement committed and after the connection
//     went back to the pool, from copies of the rows.
//   * ABI 1.1 (schema 2): claim_kinds reads one (queue, kind) range of ready
//     rows per kind (jobs_ready_kind); list_jobs reads index ranges of at most
//     a page (jobs_list for retained jobs); job_counts sums per-statement
//     count deltas instead of counting retained jobs (pg_schema.cc), folded
//     by purge_finished and by job_counts when they pile up.
//   * ABI 1.4 (schema 6): jobs.key (COLLATE "C": bytewise) and the partial
//     index jobs_ready_key (queue, key, priority, run_at, id) of ready rows.
//     claim_keys is one statement for every key: per key a range of that
//     index, LIMIT its count, FOR UPDATE SKIP LOCKED, then claim's UPDATE;
//     keys not listed are never read. list_ready_keys is a loose index scan
//     of it (WITH RECURSIVE: each next key is one probe) counting each key's
//     ready jobs up to count_limit, so keys without ready rows cost nothing.
//   * ABI 1.5 (schema 7): key settings and delete_shared_states, shared with
//     postgres-queue (control_store.cc, kKeySettings): one upsert per
//     set_key_setting, one function call per delete_key_setting, each
//     moving the change marker and notifying as a rate-limit override does.
//   * ABI 1.5 (schema 8): add_shared_states, shared with postgres-queue
//     (control_store.cc, kSharedAdds): one CALL for every add, the adds in
//     the order of their keys' locks (no deadlock), a transaction per 128.
#include "postgres_storage.hpp"

#include "connection_pool.hpp"
#include "job_calls.hpp"
#include "pg_errors.hpp"
#include "pg_rows.hpp"
#include "pg_run.hpp"
#include "pg_schema.hpp"
#include "pg_sql.hpp"
#include "pg_text.hpp"

#include <pqxx/nontransaction>
#include <pqxx/result>
#include <pqxx/transaction>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>

namespace conveyor::postgres {
namespace {

using sdk::Error;

constexpr const char* kLeaseExpiredError = "lease expired: worker presumed dead";

}  // namespace

PostgresStorage::PostgresStorage(PgOptions options)
    : PgStorageBase(options, [schema = options.schema,
                              async = options.async_lease_commits](pqxx::connection& c) {
        configure_session(c, async);
        register_statements(c, schema);
      }) {}

std::unique_ptr<PostgresStorage> PostgresStorage::open(const sdk::Options& options) {
  std::unique_ptr<PostgresStorage> s(new PostgresStorage(parse_options(options)));
  s->connect_now();
  return s;
}

void PostgresStorage::migrate() {
  run("migrate", Retry::kAfterConnectionLoss,
      [&](pqxx::connection& c) { migrate_schema(c, pg_options().schema); });
}

void PostgresStorage::enqueue(std::span<const conveyor_new_job> jobs, std::span<int64_t> out_ids) {
  // created_at is the plugin's clock: enqueue has no now_us (enqueue_v2 has).
  insert_jobs(jobs, {}, {}, wall_clock_us(), out_ids);
}

void PostgresStorage::enqueue_at(std::span<const conveyor_new_job> jobs, int64_t now_us,
                                 std::span<int64_t> out_ids) {
  insert_jobs(jobs, {}, {}, now_us, out_ids);
}

void PostgresStorage::enqueue_costed(std::span<const conveyor_new_job_v2> jobs, int64_t now_us,
                                     std::span<int64_t> out_ids) {
  const CostedJobs c = split_costed(jobs);
  insert_jobs(c.jobs, c.costs, {}, now_us, out_ids);
}

void PostgresStorage::enqueue_keyed(std::span<const conveyor_new_job_v3> jobs, int64_t now_us,
                                    std::span<int64_t> out_ids) {
  const KeyedJobs k = split_keyed(jobs);
  insert_jobs(k.jobs, k.costs, k.keys, now_us, out_ids);
}

void PostgresStorage::enqueue_timed(std::span<const conveyor_new_job_v4> jobs, int64_t now_us,
                                    std::span<int64_t> out_ids) {
  const TimedJobs t = split_timed(jobs);
  insert_jobs(t.jobs, t.costs, t.keys, now_us, out_ids, t.timeouts);
}

void PostgresStorage::insert_jobs(std::span<const conveyor_new_job> jobs,
                                  std::span<const int32_t> costs,
                                  std::span<const std::string_view> keys, int64_t created,
                                  std::span<int64_t> out_ids, std::span<const int64_t> timeouts) {
  const EnqueueArrays a = encode_enqueue_batch(jobs, created, costs, keys, timeouts);
  std::vector<int64_t> ids;
  run("enqueue", Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r =
        tx.exec_prepared(stmt::kEnqueue, a.queues, a.kinds, a.payloads_hex, a.priorities,
                         a.max_attempts, a.run_ats, created, a.distinct_queues, channels().jobs,
                         a.costs, channels().later, a.later_payloads, a.keys, a.timeouts);
    ids.clear();
    ids.reserve(r.size());
    for (const auto& row : r) ids.push_back(int_at(row, 0));
  });
  if (ids.size() != jobs.size())
    throw Error(CONVEYOR_E_INTERNAL, "enqueue: the server returned " + std::to_string(ids.size()) +
                                         " ids for " + std::to_string(jobs.size()) + " jobs");
  // Ids come from one sequence in insertion (= batch) order.
  std::sort(ids.begin(), ids.end());
  std::copy(ids.begin(), ids.end(), out_ids.begin());
}

uint32_t PostgresStorage::claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token,
                                int64_t now_us, int64_t lease_expires_us,
                                const sdk::JobSink& sink) {
  require_queue(queue, "claim");
  if (max_jobs == 0) return 0;
  return run_claim("claim", stmt::kClaim, std::string(queue), max_jobs, lease_token, now_us,
                   lease_expires_us, sink);
}

template <typename... Extra>
uint32_t PostgresStorage::run_claim(const char* what, const char* statement,
                                    const std::string& queue, uint32_t max_jobs,
                                    int64_t lease_token, int64_t now_us, int64_t lease_expires_us,
                                    const sdk::JobSink& sink, const Extra&... extra) {
  std::vector<OwnedJob> claimed;
  try {
    run(what, Retry::kNever, [&](pqxx::connection& c) {
      pqxx::nontransaction tx(c);
      pqxx::result r = tx.exec_prepared(statement, queue, now_us, max_jobs, lease_token,
                                        lease_expires_us, claimer(), extra...);
      claimed.clear();
      claimed.reserve(r.size());
      for (const auto& row : r)
        claimed.push_back(claimed_job_at(row, queue, lease_token, lease_expires_us));
    });
  } catch (const ConnectionLost&) {
    release_orphans(lease_token, lease_expires_us);
    throw;
  }
  report_claimed(claimed, sink);
  return static_cast<uint32_t>(claimed.size());
}

void PostgresStorage::release_orphans(int64_t lease_token, int64_t lease_expires_us) noexcept {
  try {
    run("claim: giving back a claim whose reply was lost", Retry::kNever, [&](pqxx::connection& c) {
      pqxx::nontransaction tx(c);
      tx.exec_prepared(stmt::kReleaseOrphans, lease_token, lease_expires_us);
    });
  } catch (...) {
    // The server is still away: the lease expires and rescue_expired makes
    // the jobs available again.
  }
}

void PostgresStorage::complete(std::span<const conveyor_lease> leases, int64_t now_us,
                               std::span<conveyor_status> results) {
  run_lease_batch(pool(), "complete", stmt::kComplete, leases, now_us, results);
}

void PostgresStorage::extend_leases(std::span<const conveyor_lease> leases,
                                    int64_t lease_expires_us, std::span<conveyor_status> results) {
  run_lease_batch(pool(), "extend_leases", stmt::kExtend, leases, lease_expires_us, results);
}

void PostgresStorage::release(std::span<const conveyor_lease> leases, int64_t now_us,
                              std::span<conveyor_status> results) {
  run_lease_batch(pool(), "release", stmt::kRelease, leases, now_us, results);
}

void PostgresStorage::fail(conveyor_lease lease, std::string_view error_text, int64_t retry_at_us,
                           int64_t now_us) {
  const bool retry = retry_at_us >= 0;
  const std::string text = sanitize_text(error_text);
  pqxx::result::size_type changed = 0;
  run("fail", Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    // Rows updated (retry) or the failed job's id (final).
    changed = tx.exec_prepared(retry ? stmt::kFailRetry : stmt::kFailFinal,
                               retry ? retry_at_us : now_us, text, lease.job_id, lease.lease_token)
                  .affected_rows();
  });
  if (changed == 0)
    throw Error(CONVEYOR_E_LEASE_LOST, "fail: job " + std::to_string(lease.job_id) +
                                           " is not running under lease token " +
                                           std::to_string(lease.lease_token));
}

uint32_t PostgresStorage::rescue_expired(int64_t now_us, uint32_t max_jobs) {
  if (max_jobs == 0) return 0;
  int64_t changed = 0;
  run("rescue_expired", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    changed = int_at(
        tx.exec_prepared(stmt::kRescue, now_us, std::string(kLeaseExpiredError), max_jobs)[0], 0);
  });
  return static_cast<uint32_t>(changed);
}

uint32_t PostgresStorage::rescue_expired_v2(int64_t now_us, uint32_t max_jobs,
                                            const sdk::JobSink& sink) {
  if (max_jobs == 0) return 0;
  std::vector<OwnedJob> rescued;
  // Not repeated after a lost connection: a repetition would not report the
  // jobs the first run rescued.
  run("rescue_expired", Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r =
        tx.exec_prepared(stmt::kRescueReporting, now_us, std::string(kLeaseExpiredError), max_jobs);
    rescued.clear();
    rescued.reserve(r.size());
    for (const auto& row : r) rescued.push_back(stored_job_at(row, 0, now_us));
  });
  std::sort(rescued.begin(), rescued.end(),
            [](const OwnedJob& a, const OwnedJob& b) { return a.id < b.id; });
  for (const OwnedJob& j : rescued) {
    conveyor_job v = j.view();
    sink(v);
  }
  return static_cast<uint32_t>(rescued.size());
}

void PostgresStorage::cancel(int64_t job_id, int64_t now_us) {
  pqxx::result::size_type changed = 0;
  run("cancel", Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    changed = tx.exec_prepared(stmt::kCancel, now_us, job_id).affected_rows();
  });
  if (changed == 0)
    throw Error(CONVEYOR_E_NOT_FOUND,
                "cancel: job " + std::to_string(job_id) + " does not exist or is already final");
}

namespace {

// Queue-stats rows (name, paused, six counts, oldest pending run_at, ...)
// copied out of a result, with what each row's ninth column says.
struct StatsRows {
  std::vector<sdk::OwnedQueueStats> stats;
  std::vector<int64_t> oldest_pending;

  explicit StatsRows(const pqxx::result& r) : stats(queue_stats_rows(r)) {
    oldest_pending.reserve(r.size());
    for (const auto& row : r) oldest_pending.push_back(int_at(row, 8));
  }
  // Reports row i (ABI 1.1: oldest_pending_run_at_us included).
  void report(size_t i, const sdk::QueueStatsSink& sink) const {
    conveyor_queue_stats v = stats[i].view();
    v.oldest_pending_run_at_us = oldest_pending[i];
    sink(v);
  }
};

}  // namespace

void PostgresStorage::queue_stats(int64_t now_us, const sdk::QueueStatsSink& sink) {
  std::optional<StatsRows> rows;
  run("queue_stats", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    rows.emplace(tx.exec_prepared(stmt::kQueueStats, now_us));
  });
  for (size_t i = 0; i < rows->stats.size(); ++i) rows->report(i, sink);
}

void PostgresStorage::get_job(int64_t job_id, int64_t now_us, const sdk::JobSink& sink) {
  bool found = false;
  OwnedJob j;
  run("get_job", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(stmt::kGetJob, job_id);
    found = !r.empty();
    if (!found) return;
    j = stored_job_at(r[0], 0, now_us);
  });
  report_job(found ? std::optional(j) : std::nullopt, job_id, sink);
}

uint64_t PostgresStorage::purge_finished(int64_t finalized_before_us, uint32_t max_jobs) {
  // Runs periodically in every `serve`: the place to keep job_counts' deltas short.
  compact_counts();
  if (max_jobs == 0) return 0;
  int64_t purged = 0;
  run("purge_finished", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    purged = int_at(tx.exec_prepared(stmt::kPurge, finalized_before_us, max_jobs)[0], 0);
  });
  return static_cast<uint64_t>(purged);
}

void PostgresStorage::compact_counts() {
  // Repeating it is harmless: it only folds rows whose sum it keeps.
  run("compacting job counts", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    tx.exec_prepared(stmt::kCompactCounts);
  });
}

namespace {

// retry_jobs and delete_jobs: statement(..., ids[]) returns (id, applied) for
// every id that existed. Per id in order: OK for the first occurrence of an
// applied id, then_status for a later one (the job has changed), WRONG_STATE
// for an existing id not applied, NOT_FOUND for the rest.
template <typename Exec>
void per_id(std::span<const int64_t> ids, std::span<conveyor_status> results,
            conveyor_status repeat_status, Exec&& exec) {
  std::vector<int64_t> sorted(ids.begin(), ids.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::vector<std::pair<int64_t, bool>> found = exec(bigint_array(sorted));
  std::sort(found.begin(), found.end());
  std::vector<int64_t> seen;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = std::lower_bound(found.begin(), found.end(), std::pair(ids[i], false));
    if (it == found.end() || it->first != ids[i]) {
      results[i] = CONVEYOR_E_NOT_FOUND;
    } else if (!it->second) {
      results[i] = CONVEYOR_E_WRONG_STATE;
    } else if (std::find(seen.begin(), seen.end(), ids[i]) != seen.end()) {
      results[i] = repeat_status;
    } else {
      seen.push_back(ids[i]);
      results[i] = CONVEYOR_OK;
    }
  }
}

std::vector<std::pair<int64_t, bool>> id_flags(const pqxx::result& r) {
  std::vector<std::pair<int64_t, bool>> out;
  out.reserve(r.size());
  for (const auto& row : r) out.emplace_back(int_at(row, 0), row[1].as<bool>());
  return out;
}

}  // namespace

void PostgresStorage::retry_jobs(std::span<const int64_t> ids, int64_t now_us,
                                 std::span<conveyor_status> results) {
  per_id(ids, results, CONVEYOR_E_WRONG_STATE, [&](const std::string& ids_text) {
    std::vector<std::pair<int64_t, bool>> found;
    run("retry_jobs", Retry::kNever, [&](pqxx::connection& c) {
      pqxx::nontransaction tx(c);
      found = id_flags(tx.exec_prepared(stmt::kRetryJobs, now_us, ids_text, channels().jobs));
    });
    return found;
  });
}

void PostgresStorage::delete_jobs(std::span<const int64_t> ids,
                                  std::span<conveyor_status> results) {
  per_id(ids, results, CONVEYOR_E_NOT_FOUND, [&](const std::string& ids_text) {
    std::vector<std::pair<int64_t, bool>> found;
    run("delete_jobs", Retry::kNever, [&](pqxx::connection& c) {
      pqxx::nontransaction tx(c);
      found = id_flags(tx.exec_prepared(stmt::kDeleteJobs, ids_text));
    });
    return found;
  });
}

uint32_t PostgresStorage::claim_kinds(std::string_view queue,
                                      std::span<const std::string_view> kinds, uint32_t max_jobs,
                                      int64_t lease_token, int64_t now_us, int64_t lease_expires_us,
                                      const sdk::JobSink& sink) {
  require_queue(queue, "claim_kinds");
  if (max_jobs == 0) return 0;
  for (std::string_view k : kinds)
    if (!is_storable_text(k))
      throw Error(CONVEYOR_E_INVALID, "claim_kinds: kinds must be valid UTF-8 without NUL bytes");
  std::vector<std::string_view> wanted(kinds.begin(), kinds.end());
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  return run_claim("claim_kinds", stmt::kClaimKinds, std::string(queue), max_jobs, lease_token,
                   now_us, lease_expires_us, sink, text_array(wanted));
}

uint32_t PostgresStorage::claim_keys(std::string_view queue,
                                     std::span<const std::string_view> kinds,
                                     std::span<const sdk::KeyClaim> keys, int64_t lease_token,
                                     int64_t now_us, int64_t lease_expires_us,
                                     const sdk::JobSink& sink) {
  require_queue(queue, "claim_keys");
  for (std::string_view k : kinds)
    if (!is_storable_text(k))
      throw Error(CONVEYOR_E_INVALID, "claim_keys: kinds must be valid UTF-8 without NUL bytes");
  const std::vector<sdk::KeyClaim> wanted = wanted_keys(keys, "claim_keys");
  if (wanted.empty()) return 0;
  const KeyClaimArrays a = key_claim_arrays(wanted);
  // One statement for every key (claim_keys in pg_schema.cc).
  if (kinds.empty())
    return run_claim("claim_keys", stmt::kClaimKeys, std::string(queue), a.total, lease_token,
                     now_us, lease_expires_us, sink, a.keys, a.counts);
  std::vector<std::string_view> wanted_kinds(kinds.begin(), kinds.end());
  std::sort(wanted_kinds.begin(), wanted_kinds.end());
  wanted_kinds.erase(std::unique(wanted_kinds.begin(), wanted_kinds.end()), wanted_kinds.end());
  return run_claim("claim_keys", stmt::kClaimKeysKinds, std::string(queue), a.total, lease_token,
                   now_us, lease_expires_us, sink, a.keys, a.counts, text_array(wanted_kinds));
}

uint32_t PostgresStorage::list_ready_keys(std::string_view queue,
                                          std::optional<std::string_view> after_key, uint32_t limit,
                                          uint32_t count_limit, int64_t now_us,
                                          const sdk::ReadyKeySink& sink) {
  check_ready_keys_call(queue, after_key);
  const std::string q(queue);
  std::vector<sdk::OwnedReadyKey> keys;
  run("list_ready_keys", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    keys = ready_key_rows(
        after_key ? tx.exec_prepared(stmt::kListReadyKeysAfter, q, now_us, limit, count_limit,
                                     std::string(*after_key))
                  : tx.exec_prepared(stmt::kListReadyKeys, q, now_us, limit, count_limit));
  });
  return report_ready_keys(keys, limit, sink);
}

namespace {

// Set in the transaction of every list_jobs and job_counts statement, the
// only settings they are ever planned under on a connection: they read jobs
// through index ranges and the partial indexes of live jobs, and with
// sequential scans disabled a plan made from stale statistics cannot scan
// the table (every retained job) instead. The disabled scans' penalty makes
// every plan look costly enough for JIT compilation (100+ ms): off.
constexpr const char* kIndexOnlySettings = "SET LOCAL enable_seqscan = off; SET LOCAL jit = off";

// What list_jobs reads for the states asked: AVAILABLE and SCHEDULED are one
// stored state split by run_at.
struct ListPlan {
  bool available = false;
  int64_t run_at_min = INT64_MIN, run_at_max = INT64_MAX;
  bool running = false;
  std::vector<int> final_states;
};

ListPlan list_plan(std::span<const int32_t> states, int64_t now_us) {
  bool want[7] = {};
  if (states.empty())
    for (int st = 1; st <= 6; ++st) want[st] = true;
  for (int32_t st : states) want[st] = true;  // 1..6, checked by the adapter
  ListPlan p;
  const bool ready = want[CONVEYOR_JOB_AVAILABLE], scheduled = want[CONVEYOR_JOB_SCHEDULED];
  p.available = ready || (scheduled && now_us < INT64_MAX);
  if (!scheduled) p.run_at_max = now_us;
  if (!ready && now_us < INT64_MAX) p.run_at_min = now_us + 1;
  p.running = want[CONVEYOR_JOB_RUNNING];
  for (int st : {CONVEYOR_JOB_COMPLETED, CONVEYOR_JOB_FAILED, CONVEYOR_JOB_CANCELLED})
    if (want[st]) p.final_states.push_back(st);
  return p;
}

}  // namespace

uint32_t PostgresStorage::list_jobs(std::string_view queue, std::span<const int32_t> states,
                                    std::string_view kind, int64_t after_id, uint32_t limit,
                                    int64_t now_us, const sdk::JobSink& sink) {
  require_queue(queue, "list_jobs");
  if (!is_storable_text(kind))
    throw Error(CONVEYOR_E_INVALID, "list_jobs: kind must be valid UTF-8 without NUL bytes");
  const ListPlan plan = list_plan(states, now_us);
  const std::string q(queue), k(kind);
  std::vector<OwnedJob> jobs;
  run("list_jobs", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    // One snapshot for every range: a job changing state meanwhile is listed once.
    pqxx::transaction<pqxx::repeatable_read, pqxx::read_only> tx(c);
    // As for job_counts: the only settings these statements are planned under.
    tx.exec(kIndexOnlySettings);
    jobs.clear();
    auto add = [&](const pqxx::result& r) {
      for (const auto& row : r) jobs.push_back(stored_job_at(row, 0, now_us));
    };
    if (plan.available)
      add(tx.exec_prepared(stmt::kListAvailable, q, after_id, plan.run_at_min, plan.run_at_max,
                           limit, k));
    if (plan.running) add(tx.exec_prepared(stmt::kListRunning, q, after_id, limit, k));
    for (int st : plan.final_states)
      add(k.empty() ? tx.exec_prepared(stmt::kListFinalAnyKind, q, st, after_id, limit)
                    : tx.exec_prepared(stmt::kListFinal, q, st, k, after_id, limit));
    tx.commit();
  });
  // Each range is in id order and at most limit long: the first limit of all.
  std::sort(jobs.begin(), jobs.end(),
            [](const OwnedJob& a, const OwnedJob& b) { return a.id < b.id; });
  if (jobs.size() > limit) jobs.resize(limit);
  for (const OwnedJob& j : jobs) {
    conveyor_job v = j.view();
    sink(v);
  }
  return static_cast<uint32_t>(jobs.size());
}

namespace {
// job_counts folds the deltas when it finds more rows than this: summing them
// must stay cheap between two purges.
constexpr int64_t kCompactAbove = 1000;
}  // namespace

void PostgresStorage::job_counts(int64_t now_us, const sdk::QueueStatsSink& sink) {
  std::optional<StatsRows> rows;
  int64_t delta_rows = 0;
  run("job_counts", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::work tx(c);
    tx.exec(kIndexOnlySettings);
    pqxx::result r = tx.exec_prepared(stmt::kJobCounts, now_us);
    tx.commit();
    rows.emplace(r);
    delta_rows = 0;
    for (const auto& row : r) delta_rows += int_at(row, 9);
  });
  if (delta_rows > kCompactAbove) {
    try {
      compact_counts();
    } catch (const Error&) {
      // The counts were read; folding is for the next reader.
    }
  }
  // As queue_stats: queues with retained or live jobs, or paused.
  for (size_t i = 0; i < rows->stats.size(); ++i) {
    const sdk::OwnedQueueStats& r = rows->stats[i];
    bool any = r.paused;
    for (int64_t n : r.counts) any = any || n != 0;
    if (any) rows->report(i, sink);
  }
}

}  // namespace conveyor::postgres

CONVEYOR_EXPORT_STORAGE_PLUGIN(conveyor::postgres::PostgresStorage, "postgres", "0.1.0",
                               CONVEYOR_KIND_CANONICAL, CONVEYOR_PG_CAPABILITIES)
