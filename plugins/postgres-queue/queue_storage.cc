// The "postgres-queue" storage plugin (queue-storage kind) on libpqxx 6.4.
//
// [storage.options]
//   dsn, pool_size, connect_timeout_s   as for the canonical "postgres" plugin
//                        (plugins/postgres/postgres_storage.cc)
//   schema               ("conveyor_queue") the schema of the plugin's tables;
//                        [a-z_][a-z0-9_]{0,62}, not "pg_*", not one holding the
//                        canonical plugin's tables
//   slots                (8, 3..64) partitions in the ring; fixed when the
//                        schema is created
//   rotation_interval_ms (2000, 50..3600000) the least time between two
//                        rotations of the ring
// Unknown keys are CONVEYOR_E_INVALID.
//
// Layout (queue_schema.cc), every hot table append-only:
//   ready      a job's turn in the queue, LIST-partitioned by slot (ready_0..);
//              enqueue appends into the write slot. Never updated.
//   marks      what happened to an entry, in the entry's slot, one row per
//              stage, primary key (slot, entry_id, stage): 1 taken (claimed
//              with lease token and expiry / cancelled / moved), 2 closed
//              (completed / failed / cancelled / requeued), 3 purged.
//              INSERT .. ON CONFLICT DO NOTHING on that key is the arbiter
//              between any two calls racing for an entry. Never updated.
//   later      jobs not due yet (future run_at at enqueue by this process's
//              clock, or retry_at after the host's now): deleted when a claim
//              of their queue finds them due and appends them to the ring.
//   lease_ext  the only mutable job row: a lease moved by extend_leases.
//   tally      count changes (schema 3): each statement that moves jobs
//              between states appends one row per queue and state it
//              changed, into one of 4 partitions taking turns by the
//              server's clock; the maintenance thread folds a partition past
//              its turn into one row per queue and state (TRUNCATE and
//              re-insert). Never updated.
//   ring       one row: slot count, write slot, last rotation.
//   queues, rate_limits, meta: shared with the canonical plugin
//              (postgres-common/control_store.hpp).
//
// A job keeps its id across turns: a retry, release, rescue, promotion or
// copy-forward appends a new entry with the same job_id (and the attempt
// count, payload, last error carried along). get_job reads the `later` row or
// the newest entry; queue_stats counts entries by what their marks make of
// them (the `entries` view) plus the counts of truncated slots (`retired`,
// appended once per rotation): no counter row is updated per job.
//
// Claim: a CTE walks the queue's entries in (priority, run_at, job id) order
// from a per-process hint (claim_hints.hpp), skipping entries with a stage-1
// mark, FOR UPDATE SKIP LOCKED on the ready rows (a lock, not a new tuple),
// LIMIT the batch; then inserts the claim marks ON CONFLICT DO NOTHING and
// reports only the entries whose mark it inserted. Two claimers can never both
// win an entry: the primary key admits one stage-1 mark. Due `later` rows of
// the queue are promoted first, in the same call.
//
// Every lease-guarded call (complete, fail, extend, release, cancel of a
// running job, rescue) finds the claim mark by (job id, lease token) and
// inserts its stage-2 mark ON CONFLICT DO NOTHING: it applies only if the
// claim is still open under that very token, and only one closing wins.
//
// The ring rotates on a thread of the plugin's own, started by the first
// claim (ring_rotator.hpp): one process at a time, TRUNCATE of the oldest
// slot once nothing live is in it, re-checked under the partition's lock.
// Finished jobs are kept until their slot is truncated (at least
// slots - 1 rotations, so about slots * rotation_interval_ms under load;
// longer when idle) or purged, whichever comes first: purge_finished appends
// purge marks, and TRUNCATE reclaims them with the entries. Their counts
// outlive the truncation: the rotation adds them to `retired` (one row per
// queue and outcome), which queue_stats adds in and purge_finished deletes
// once past retention, so `completed` and `failed` mean what they mean on
// the canonical plugins.
//
// ABI 1.1: job_counts sums `tally` and `retired` (a few rows per queue and
// state per slot) instead of counting entries; only the pending / scheduled
// split reads jobs (`later`, and ring entries not due, found by run_at per
// priority). retry_jobs puts a stage-3 mark (what 1, retried) on the final
// entry, which then reads as gone like a purged one, and appends a new entry
// for the same job id; delete_jobs puts a purge mark. The stage-3 key is the
// arbiter between retry, delete and purge of one entry. list_jobs walks the
// queue's job ids in order (ready_list) and reads each job as get_job does.
// claim_kinds is claim with a kind filter on the same index walk: it starts
// at the claim hint but never moves it (other kinds may wait before what it
// took).
//
// ABI 1.4 (schema 7): every entry and `later` row carries its job's key
// (COLLATE "C": bytewise), and ready_key orders each (queue, key) by claim
// order. claim_keys is claim (the same statement tail, rounds and hints)
// whose candidates are one walk of ready_key per listed key, LIMIT its
// count, from the claim hint, which it never moves (as claim_kinds: a lower
// bound of every key's unclaimed entries); keys not listed are never read.
// list_ready_keys promotes due `later` rows as a claim does, then walks
// ready_key key by key from the hint (a loose index scan) and counts each
// key's ready entries up to count_limit. An entry is never updated, so both
// pass the taken entries of the keys they read that are still in the ring
// (at or above the hint): a key whose jobs were all claimed costs its
// entries until their slot is truncated.
//
// ABI 1.5 (schema 8): key settings and delete_shared_states, as the
// canonical plugin serves them (postgres-common/control_store.cc,
// kKeySettings); schema 9: add_shared_states (kSharedAdds), one CALL for
// every add.
#include "queue_storage.hpp"

#include "hint_prober.hpp"
#include "job_calls.hpp"
#include "pg_errors.hpp"
#include "pg_rows.hpp"
#include "pg_sql.hpp"
#include "pg_text.hpp"
#include "queue_schema.hpp"
#include "ring_rotator.hpp"

#include <pqxx/nontransaction>
#include <pqxx/result>
#include <pqxx/transaction>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace conveyor::pgqueue {
namespace {

using postgres::Retry;
using sdk::Error;

constexpr const char* kLeaseExpiredError = "lease expired: worker presumed dead";
// How long an entry another process appended below this process's claim hint
// may wait (claim_hints.hpp).
constexpr std::chrono::milliseconds kHintResetPeriod{1000};
// How late a `later` row another process put there may be promoted
// (promotion_schedule.hpp).
constexpr std::chrono::milliseconds kPromotionCheckPeriod{1000};
// A cancel that lost a race with a claim tries again this many times in all.
constexpr int kCancelAttempts = 5;

}  // namespace

QueueStorage::QueueStorage(QueueOptions options)
    : PgStorageBase(options.pg,
                    [schema = options.pg.schema,
                     async = options.pg.async_lease_commits](pqxx::connection& c) {
                      postgres::configure_session(c, async);
                      configure_queue_session(c);
                      register_statements(c, schema);
                    }),
      options_(std::move(options)),
      hints_(kHintResetPeriod),
      promotions_(kPromotionCheckPeriod) {
  // Another process's delayed job is then promoted by the first claim after
  // its run_at (the wake the listener owes for it), not a check period later.
  on_later_announced(
      [this](std::string_view queue, int64_t run_at) { promotions_.added(queue, run_at); });
}

QueueStorage::~QueueStorage() {
  // Before the pool and the hints go.
  prober_.reset();
  maintainer_.reset();
}

std::unique_ptr<QueueStorage> QueueStorage::open(const sdk::Options& options) {
  std::unique_ptr<QueueStorage> s(new QueueStorage(parse_queue_options(options)));
  s->connect_now();
  return s;
}

void QueueStorage::start_maintenance() {
  std::call_once(maintenance_started_, [this] {
    maintainer_ = std::make_unique<RingMaintainer>(
        pool(), options_.pg.schema, std::chrono::milliseconds(options_.rotation_interval_ms));
    prober_ = std::make_unique<HintProber>(pool(), hints_);
  });
}

void QueueStorage::migrate() {
  run("migrate", Retry::kAfterConnectionLoss,
      [&](pqxx::connection& c) { migrate_schema(c, options_.pg.schema, options_.slots); });
}

void QueueStorage::enqueue(std::span<const conveyor_new_job> jobs, std::span<int64_t> out_ids) {
  // Due or not is judged by this process's clock (enqueue has no now_us);
  // it is also created_at.
  enqueue_with(jobs, {}, {}, postgres::wall_clock_us(), out_ids);
}

void QueueStorage::enqueue_at(std::span<const conveyor_new_job> jobs, int64_t now_us,
                              std::span<int64_t> out_ids) {
  enqueue_with(jobs, {}, {}, now_us, out_ids);
}

void QueueStorage::enqueue_costed(std::span<const conveyor_new_job_v2> jobs, int64_t now_us,
                                  std::span<int64_t> out_ids) {
  const postgres::CostedJobs c = postgres::split_costed(jobs);
  enqueue_with(c.jobs, c.costs, {}, now_us, out_ids);
}

void QueueStorage::enqueue_keyed(std::span<const conveyor_new_job_v3> jobs, int64_t now_us,
                                 std::span<int64_t> out_ids) {
  const postgres::KeyedJobs k = postgres::split_keyed(jobs);
  enqueue_with(k.jobs, k.costs, k.keys, now_us, out_ids);
}

void QueueStorage::enqueue_timed(std::span<const conveyor_new_job_v4> jobs, int64_t now_us,
                                 std::span<int64_t> out_ids) {
  const postgres::TimedJobs t = postgres::split_timed(jobs);
  enqueue_with(t.jobs, t.costs, t.keys, now_us, out_ids, t.timeouts);
}

void QueueStorage::enqueue_with(std::span<const conveyor_new_job> jobs,
                                std::span<const int32_t> costs,
                                std::span<const std::string_view> keys, int64_t wall,
                                std::span<int64_t> out_ids, std::span<const int64_t> timeouts) {
  const postgres::EnqueueArrays a =
      postgres::encode_enqueue_batch(jobs, wall, costs, keys, timeouts);
  std::vector<std::pair<int64_t, bool>> rows;  // (id, appended to the ring)
  run("enqueue", Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r =
        tx.exec_prepared(stmt::kEnqueue, a.queues, a.kinds, a.payloads_hex, a.priorities,
                         a.max_attempts, a.run_ats, wall, a.distinct_queues, channels().jobs,
                         a.costs, channels().later, a.later_payloads, a.keys, a.timeouts);
    rows.clear();
    for (const auto& row : r)
      rows.emplace_back(postgres::int_at(row, 0), postgres::bool_at(row, 1));
  });
  if (rows.size() != jobs.size())
    throw Error(CONVEYOR_E_INTERNAL, "enqueue: the server returned " + std::to_string(rows.size()) +
                                         " ids for " + std::to_string(jobs.size()) + " jobs");
  for (size_t i = 0; i < rows.size(); ++i) {
    out_ids[i] = rows[i].first;
    if (rows[i].second)
      hints_.lower(sdk::view(jobs[i].queue),
                   ClaimKey{jobs[i].priority, jobs[i].run_at_us, rows[i].first});
    else
      promotions_.added(sdk::view(jobs[i].queue), jobs[i].run_at_us);
  }
}

uint32_t QueueStorage::claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token,
                             int64_t now_us, int64_t lease_expires_us, const sdk::JobSink& sink) {
  return claim_with(queue, {}, max_jobs, lease_token, now_us, lease_expires_us, sink);
}

uint32_t QueueStorage::claim_kinds(std::string_view queue, std::span<const std::string_view> kinds,
                                   uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                                   int64_t lease_expires_us, const sdk::JobSink& sink) {
  return claim_with(queue, kinds, max_jobs, lease_token, now_us, lease_expires_us, sink);
}

uint32_t QueueStorage::claim_with(std::string_view queue, std::span<const std::string_view> kinds,
                                  uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                                  int64_t lease_expires_us, const sdk::JobSink& sink) {
  postgres::require_queue(queue, "claim");
  const bool filtered = !kinds.empty();
  const std::string kinds_text = filtered ? postgres::text_array(kinds) : std::string();
  if (max_jobs == 0) return 0;
  start_maintenance();
  const std::string q(queue);
  std::vector<postgres::OwnedJob> all;
  // Claimers of one queue race for its head. A statement that lost rows to
  // another claimer came back short with the queue not drained; the host
  // would take that for drained and wait for its poll, so claim again (a new
  // statement sees the winners' marks and walks past them).
  for (int round = 0; round < kClaimRounds && all.size() < max_jobs; ++round) {
    const uint32_t want = max_jobs - static_cast<uint32_t>(all.size());
    uint32_t lost = 0;
    try {
      // The hint is a lower bound for every kind; what a filtered claim took
      // says nothing of the other kinds' entries before it, so it never
      // moves the hint.
      lost = claim_round(
          "claim", q, lease_token, now_us, lease_expires_us, /*moves_hint=*/!filtered,
          [&](pqxx::nontransaction& tx, const ClaimHints::Start& from) {
            return filtered
                       ? tx.exec_prepared(stmt::kClaimKinds, q, now_us, want, lease_token,
                                          lease_expires_us, claimer(), from.key.priority,
                                          from.key.run_at, from.key.job_id, from.moves, kinds_text)
                       : tx.exec_prepared(stmt::kClaim, q, now_us, want, lease_token,
                                          lease_expires_us, claimer(), from.key.priority,
                                          from.key.run_at, from.key.job_id, from.moves);
          },
          all);
    } catch (...) {
      if (all.empty()) throw;
      break;  // report what the earlier rounds claimed
    }
    if (lost == 0) break;
  }
  postgres::report_claimed(all, sink);
  return static_cast<uint32_t>(all.size());
}

void QueueStorage::promote_due(pqxx::nontransaction& tx, const std::string& q, int64_t now_us) {
  // Promotions commit on their own: a retried run finds them in the ring.
  uint64_t started = 0;
  if (!promotions_.due(q, now_us, &started)) return;
  std::optional<int64_t> next;
  for (const auto& row : tx.exec_prepared(stmt::kPromote, q, now_us)) {
    if (row[0].is_null()) {
      if (!row[3].is_null()) next = postgres::int_at(row, 3);
    } else {
      hints_.lower(q, ClaimKey{postgres::int32_at(row, 0), postgres::int_at(row, 1),
                               postgres::int_at(row, 2)});
    }
  }
  promotions_.promoted(q, started, next);
}

uint32_t QueueStorage::claim_round(const char* op, const std::string& q, int64_t lease_token,
                                   int64_t now_us, int64_t lease_expires_us, bool moves_hint,
                                   const ClaimStatement& statement,
                                   std::vector<postgres::OwnedJob>& all) {
  std::vector<postgres::OwnedJob> claimed;
  std::vector<int32_t> claimed_slots;
  ClaimHints::Start from;
  int64_t moves = -1;  // the ring's move generation the claim ran under
  int64_t candidates = 0;
  std::optional<ClaimKey> walked;  // the last candidate's key: how far the walk got
  try {
    run(op, Retry::kNever, [&](pqxx::connection& c) {
      pqxx::nontransaction tx(c);
      promote_due(tx, q, now_us);
      hints_.abandon(from);  // a claim run again starts afresh
      from = hints_.start(q);
      pqxx::result r = statement(tx, from);
      claimed.clear();
      claimed.reserve(r.size());
      claimed_slots.clear();
      walked.reset();
      // Columns: the job (claimed_job_at, 13), the ring's move generation,
      // the entry's slot, the candidates, the last candidate's key (3).
      for (const auto& row : r) {
        moves = postgres::int_at(row, 13);
        candidates = postgres::int_at(row, 15);
        if (!row[16].is_null())
          walked = ClaimKey{postgres::int32_at(row, 16), postgres::int_at(row, 17),
                            postgres::int_at(row, 18)};
        if (!row[0].is_null()) {
          claimed.push_back(postgres::claimed_job_at(row, q, lease_token, lease_expires_us));
          claimed_slots.push_back(postgres::int32_at(row, 14));
        }
      }
    });
  } catch (const postgres::ConnectionLost&) {
    hints_.abandon(from);
    release_orphans(lease_token, lease_expires_us, now_us);
    throw;
  } catch (...) {
    hints_.abandon(from);
    throw;
  }
  if (moves_hint) {
    // Past every candidate, won or lost: a claimer that lost its
    // candidates to a faster one must not walk them again next time.
    hints_.advance(q, from, walked ? &*walked : nullptr, moves);
  } else {
    hints_.abandon(from);
  }
  for (size_t i = 0; i < claimed.size(); ++i)
    lease_slots_.remember(claimed[i].id, lease_token, claimed_slots[i]);
  // Rows another process claimed after this statement's snapshot (their
  // marks were not visible to it, so they were candidates here and lost ON
  // CONFLICT).
  const auto lost = static_cast<uint32_t>(
      std::max<int64_t>(0, candidates - static_cast<int64_t>(claimed.size())));
  for (auto& j : claimed) all.push_back(std::move(j));
  return lost;
}

uint32_t QueueStorage::claim_keys(std::string_view queue, std::span<const std::string_view> kinds,
                                  std::span<const sdk::KeyClaim> keys, int64_t lease_token,
                                  int64_t now_us, int64_t lease_expires_us,
                                  const sdk::JobSink& sink) {
  postgres::require_queue(queue, "claim_keys");
  for (std::string_view k : kinds)
    if (!postgres::is_storable_text(k))
      throw Error(CONVEYOR_E_INVALID, "claim_keys: kinds must be valid UTF-8 without NUL bytes");
  std::vector<sdk::KeyClaim> wanted = postgres::wanted_keys(keys, "claim_keys");
  if (wanted.empty()) return 0;
  const bool filtered = !kinds.empty();
  const std::string kinds_text = filtered ? postgres::text_array(kinds) : std::string();
  start_maintenance();
  const std::string q(queue);
  std::vector<postgres::OwnedJob> all;
  // One statement for every key (CONVEYOR_CLAIM_KEYS_SQL). Each key's walk
  // starts at the queue's claim hint, a lower bound of every key's
  // unclaimed entries, and never moves it (as claim_kinds: what it took
  // says nothing of other keys' entries). As claim, a round that lost
  // candidates to concurrent claimers is followed by one for what the keys
  // still want.
  for (int round = 0; round < kClaimRounds && !wanted.empty(); ++round) {
    const postgres::KeyClaimArrays a = postgres::key_claim_arrays(wanted);
    const size_t before = all.size();
    uint32_t lost = 0;
    try {
      lost = claim_round(
          "claim_keys", q, lease_token, now_us, lease_expires_us, /*moves_hint=*/false,
          [&](pqxx::nontransaction& tx, const ClaimHints::Start& from) {
            return filtered ? tx.exec_prepared(stmt::kClaimKeysKinds, q, now_us, a.total,
                                               lease_token, lease_expires_us, claimer(),
                                               from.key.priority, from.key.run_at, from.key.job_id,
                                               from.moves, a.keys, a.counts, kinds_text)
                            : tx.exec_prepared(stmt::kClaimKeys, q, now_us, a.total, lease_token,
                                               lease_expires_us, claimer(), from.key.priority,
                                               from.key.run_at, from.key.job_id, from.moves, a.keys,
                                               a.counts);
          },
          all);
    } catch (...) {
      if (all.empty()) throw;
      break;  // report what the earlier rounds claimed
    }
    if (lost == 0) break;
    std::map<std::string_view, uint32_t> got;
    for (size_t i = before; i < all.size(); ++i) ++got[all[i].key];
    std::vector<sdk::KeyClaim> still;
    for (const sdk::KeyClaim& k : wanted) {
      const auto it = got.find(k.key);
      const uint32_t taken = it == got.end() ? 0 : it->second;
      if (taken < k.max_jobs) still.push_back(sdk::KeyClaim{k.key, k.max_jobs - taken});
    }
    wanted = std::move(still);
  }
  postgres::report_claimed(all, sink);
  return static_cast<uint32_t>(all.size());
}

uint32_t QueueStorage::list_ready_keys(std::string_view queue,
                                       std::optional<std::string_view> after_key, uint32_t limit,
                                       uint32_t count_limit, int64_t now_us,
                                       const sdk::ReadyKeySink& sink) {
  postgres::check_ready_keys_call(queue, after_key);
  const std::string q(queue);
  std::vector<sdk::OwnedReadyKey> keys;
  ClaimHints::Start from;
  try {
    run("list_ready_keys", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
      pqxx::nontransaction tx(c);
      // Due `later` rows are ready jobs too: into the ring first, as a claim
      // does. The walk starts at the claim hint, which it never moves.
      promote_due(tx, q, now_us);
      hints_.abandon(from);
      from = hints_.start(q);
      keys = postgres::ready_key_rows(
          after_key
              ? tx.exec_prepared(stmt::kListReadyKeysAfter, q, now_us, limit, count_limit,
                                 from.key.priority, from.key.run_at, from.key.job_id, from.moves,
                                 std::string(*after_key))
              : tx.exec_prepared(stmt::kListReadyKeys, q, now_us, limit, count_limit,
                                 from.key.priority, from.key.run_at, from.key.job_id, from.moves));
    });
  } catch (...) {
    hints_.abandon(from);
    throw;
  }
  hints_.abandon(from);
  return postgres::report_ready_keys(keys, limit, sink);
}

void QueueStorage::release_orphans(int64_t lease_token, int64_t lease_expires_us,
                                   int64_t now_us) noexcept {
  try {
    run("claim: giving back a claim whose reply was lost", Retry::kNever, [&](pqxx::connection& c) {
      pqxx::nontransaction tx(c);
      tx.exec_prepared(stmt::kReleaseOrphans, lease_token, lease_expires_us, now_us);
    });
    hints_.forget_all();
  } catch (...) {
    // The server is still away: the lease expires and rescue_expired makes
    // the jobs available again.
  }
}

void QueueStorage::complete(std::span<const conveyor_lease> leases, int64_t now_us,
                            std::span<conveyor_status> results) {
  run_slotted_lease_batch(pool(), lease_slots_, "complete", stmt::kComplete, leases, now_us, true,
                          results);
}

void QueueStorage::extend_leases(std::span<const conveyor_lease> leases, int64_t lease_expires_us,
                                 std::span<conveyor_status> results) {
  run_slotted_lease_batch(pool(), lease_slots_, "extend_leases", stmt::kExtend, leases,
                          lease_expires_us, false, results);
}

void QueueStorage::release(std::span<const conveyor_lease> leases, int64_t now_us,
                           std::span<conveyor_status> results) {
  run_slotted_lease_batch(pool(), lease_slots_, "release", stmt::kRelease, leases, now_us, true,
                          results);
  hints_.forget_all();  // the released jobs' new entries may be below a hint
}

void QueueStorage::fail(conveyor_lease lease, std::string_view error_text, int64_t retry_at_us,
                        int64_t now_us) {
  const bool retry = retry_at_us >= 0;
  const std::string text = postgres::sanitize_text(error_text);
  pqxx::result::size_type changed = 0;
  std::optional<std::string> queue;  // of a retry put into `later`
  run("fail", Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    queue.reset();
    if (retry) {
      pqxx::result r = tx.exec_prepared(stmt::kFailRetry, retry_at_us, text, lease.job_id,
                                        lease.lease_token, now_us);
      changed = r.size();
      if (!r.empty() && !r[0][1].is_null()) queue = r[0][1].as<std::string>();
    } else {
      changed =
          tx.exec_prepared(stmt::kFailFinal, now_us, text, lease.job_id, lease.lease_token).size();
    }
  });
  if (changed > 0 && retry && retry_at_us > now_us) {
    if (queue)
      promotions_.added(*queue, retry_at_us);
    else
      promotions_.added_somewhere(retry_at_us);
  }
  lease_slots_.forget(lease.job_id, lease.lease_token);
  if (changed == 0)
    throw Error(CONVEYOR_E_LEASE_LOST, "fail: job " + std::to_string(lease.job_id) +
                                           " is not running under lease token " +
                                           std::to_string(lease.lease_token));
  if (retry && retry_at_us <= now_us) hints_.forget_all();
}

uint32_t QueueStorage::rescue_expired(int64_t now_us, uint32_t max_jobs) {
  return rescue_with(now_us, max_jobs, nullptr);
}

uint32_t QueueStorage::rescue_expired_v2(int64_t now_us, uint32_t max_jobs,
                                         const sdk::JobSink& sink) {
  return rescue_with(now_us, max_jobs, &sink);
}

uint32_t QueueStorage::rescue_with(int64_t now_us, uint32_t max_jobs, const sdk::JobSink* sink) {
  if (max_jobs == 0) return 0;
  int64_t found = 0;
  std::vector<postgres::OwnedJob> rescued;
  const int64_t floor = rescue_window_.floor(now_us);
  run("rescue_expired", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r =
        tx.exec_prepared(stmt::kRescue, now_us, std::string(kLeaseExpiredError), max_jobs, floor);
    found = postgres::int_at(r[0], 0);
    rescued.clear();
    for (const auto& row : r)
      if (!row[1].is_null()) rescued.push_back(postgres::stored_job_at(row, 1, now_us));
  });
  // Complete only if the limit did not cut the expired claims short (some
  // found may have been closed meanwhile: rescued can be fewer than found).
  rescue_window_.scanned(floor, now_us, found < int64_t{max_jobs});
  if (!rescued.empty()) hints_.forget_all();
  if (sink != nullptr) {
    std::sort(rescued.begin(), rescued.end(),
              [](const auto& a, const auto& b) { return a.id < b.id; });
    for (const postgres::OwnedJob& j : rescued) {
      conveyor_job v = j.view();
      (*sink)(v);
    }
  }
  return static_cast<uint32_t>(rescued.size());
}

void QueueStorage::cancel(int64_t job_id, int64_t now_us) {
  for (int attempt = 1; attempt <= kCancelAttempts; ++attempt) {
    int64_t cancelled = 0, live = 0;
    run("cancel", Retry::kNever, [&](pqxx::connection& c) {
      pqxx::nontransaction tx(c);
      pqxx::result r = tx.exec_prepared(stmt::kCancel, now_us, job_id);
      cancelled = postgres::int_at(r[0], 0);
      live = postgres::int_at(r[0], 1);
    });
    if (cancelled > 0) return;
    if (live == 0) break;
    // A claim, completion or rescue took the entry between our read and our
    // mark: look again.
  }
  throw Error(CONVEYOR_E_NOT_FOUND,
              "cancel: job " + std::to_string(job_id) + " does not exist or is already final");
}

namespace {

// Queue-stats rows (name, paused, six counts, oldest pending run_at) copied
// out of a result, to report after the read.
struct StatsRows {
  std::vector<sdk::OwnedQueueStats> rows;
  std::vector<int64_t> oldest_pending;
};

StatsRows stats_rows(const pqxx::result& r) {
  StatsRows out{postgres::queue_stats_rows(r), {}};
  for (const auto& row : r) out.oldest_pending.push_back(postgres::int_at(row, 8));
  return out;
}

void report_stats(const StatsRows& s, const sdk::QueueStatsSink& sink) {
  for (size_t i = 0; i < s.rows.size(); ++i) {
    conveyor_queue_stats v = s.rows[i].view();
    v.oldest_pending_run_at_us = s.oldest_pending[i];  // ABI 1.1
    sink(v);
  }
}

}  // namespace

void QueueStorage::queue_stats(int64_t now_us, const sdk::QueueStatsSink& sink) {
  StatsRows rows;
  run("queue_stats", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    rows = stats_rows(tx.exec_prepared(stmt::kQueueStats, now_us));
  });
  report_stats(rows, sink);
}

void QueueStorage::get_job(int64_t job_id, int64_t now_us, const sdk::JobSink& sink) {
  bool found = false;
  postgres::OwnedJob j;
  run("get_job", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(stmt::kGetJob, job_id);
    // Columns: src, the job (18), purged. The `later` row (src 0) comes first.
    found = !r.empty() && !postgres::bool_at(r[0], 19) && postgres::int_at(r[0], 6) != 0;
    if (found) j = postgres::stored_job_at(r[0], 1, now_us);
  });
  postgres::report_job(found ? std::optional(j) : std::nullopt, job_id, sink);
}

uint64_t QueueStorage::purge_finished(int64_t finalized_before_us, uint32_t max_jobs) {
  if (max_jobs == 0) return 0;
  uint64_t purged = 0;
  run("purge_finished", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    purged = static_cast<uint64_t>(
        postgres::int_at(tx.exec_prepared(stmt::kPurge, finalized_before_us, max_jobs)[0], 0));
  });
  // Truncated jobs past retention leave the counts too; they are rows of
  // counts, not jobs, so they are not part of the number returned.
  rows_changed("purge_finished", Retry::kAfterConnectionLoss, stmt::kPurgeRetired,
               finalized_before_us);
  return purged;
}

uint32_t QueueStorage::list_jobs(std::string_view queue, std::span<const int32_t> states,
                                 std::string_view kind, int64_t after_id, uint32_t limit,
                                 int64_t now_us, const sdk::JobSink& sink) {
  const std::string q(queue), k(kind), states_text = postgres::int_array(states);
  std::vector<postgres::OwnedJob> jobs;
  run("list_jobs", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(stmt::kListJobs, q, after_id, limit, states_text, k, now_us);
    jobs.clear();
    jobs.reserve(r.size());
    for (const auto& row : r) jobs.push_back(postgres::stored_job_at(row, 1, now_us));
  });
  // The ids come in increasing order already; sorted again so that no plan
  // change can break the keyset.
  std::sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  for (const postgres::OwnedJob& j : jobs) {
    conveyor_job v = j.view();
    sink(v);
  }
  return static_cast<uint32_t>(jobs.size());
}

template <typename... Extra>
void QueueStorage::per_id_batch(const char* op, const char* statement, std::span<const int64_t> ids,
                                conveyor_status repeated, std::span<conveyor_status> results,
                                const Extra&... extra) {
  if (ids.empty()) return;
  const std::string ids_text = postgres::bigint_array(ids);
  std::vector<std::pair<int64_t, int>> outcome;  // (id, 0 applied / 1 not found / 2 wrong state)
  run(op, Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(statement, ids_text, extra...);
    outcome.clear();
    for (const auto& row : r)
      outcome.emplace_back(postgres::int_at(row, 0), postgres::int32_at(row, 1));
  });
  std::sort(outcome.begin(), outcome.end());
  std::unordered_set<int64_t> seen;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = std::lower_bound(outcome.begin(), outcome.end(), std::pair<int64_t, int>{ids[i], 0});
    if (it == outcome.end() || it->first != ids[i])
      throw Error(
          CONVEYOR_E_INTERNAL,
          std::string(op) + ": the server reported no outcome for job " + std::to_string(ids[i]));
    const bool first = seen.insert(ids[i]).second;
    if (it->second == 0)
      results[i] = first ? CONVEYOR_OK : repeated;
    else
      results[i] = it->second == 1 ? CONVEYOR_E_NOT_FOUND : CONVEYOR_E_WRONG_STATE;
  }
}

void QueueStorage::retry_jobs(std::span<const int64_t> ids, int64_t now_us,
                              std::span<conveyor_status> results) {
  // A repeated id sees the job its first occurrence made AVAILABLE.
  per_id_batch("retry_jobs", stmt::kRetryJobs, ids, CONVEYOR_E_WRONG_STATE, results, now_us,
               channels().jobs);
  // The new entries are at now, maybe below a hint.
  hints_.forget_all();
}

void QueueStorage::delete_jobs(std::span<const int64_t> ids, std::span<conveyor_status> results) {
  // A repeated id finds the job gone.
  per_id_batch("delete_jobs", stmt::kDeleteJobs, ids, CONVEYOR_E_NOT_FOUND, results);
}

void QueueStorage::job_counts(int64_t now_us, const sdk::QueueStatsSink& sink) {
  StatsRows rows;
  run("job_counts", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::work tx(c);
    // A fold TRUNCATEs a tally partition: a snapshot taken before it would
    // see the partition empty. The lock waits for a fold in progress, and
    // the SELECT's snapshot is taken after it.
    tx.exec("LOCK TABLE " + postgres::quote_identifier(options_.pg.schema) +
            ".tally IN ACCESS SHARE MODE");
    rows = stats_rows(tx.exec_prepared(stmt::kJobCounts, now_us));
    tx.commit();
  });
  report_stats(rows, sink);
}

}  // namespace conveyor::pgqueue

CONVEYOR_EXPORT_STORAGE_PLUGIN(conveyor::pgqueue::QueueStorage, "postgres-queue", "0.1.0",
                               CONVEYOR_KIND_QUEUE_STORAGE, CONVEYOR_PG_CAPABILITIES)
