// The SQL statements the plugin prepares, each a named constant.
//
// A call names the statement it runs (conn.get<sql::kClaim>()), and a
// statement's SQL is written next to its name, so no list has to be kept in
// step with another: a statement cannot be paired with the wrong SQL. The
// per-connection cache finds a statement's slot by its place in kCatalogue,
// computed at compile time; a statement missing from kCatalogue does not
// compile, and the catalogue's order does not matter.
#ifndef CONVEYOR_PLUGINS_SQLITE_STATEMENTS_HPP
#define CONVEYOR_PLUGINS_SQLITE_STATEMENTS_HPP

#include <conveyor/storage_plugin.h>

#include <array>
#include <cstddef>
#include <iterator>
#include <string_view>

namespace conveyor::sqlite {

// One statement's SQL text.
struct Sql {
  const char* text;
};

// The statements spell the stored job states out (final states are
// state >= 4, live ones state < 4).
static_assert(CONVEYOR_JOB_AVAILABLE == 1 && CONVEYOR_JOB_RUNNING == 3 &&
                  CONVEYOR_JOB_COMPLETED == 4 && CONVEYOR_JOB_FAILED == 5 &&
                  CONVEYOR_JOB_CANCELLED == 6,
              "the SQL below spells the state numbers out");

// The key-setting statements spell the field bits and targets out.
static_assert(CONVEYOR_KEY_FIELD_RATE == 1u && CONVEYOR_KEY_FIELD_WEIGHT == 2u &&
                  CONVEYOR_KEY_FIELDS_ALL == 3u && CONVEYOR_KEY_TARGET_ONE == 0 &&
                  CONVEYOR_KEY_TARGET_EVERY == 1,
              "the SQL below spells the key-setting field bits and targets out");

namespace sql {

// ---- Transactions and the schema version -----------------------------------

inline constexpr Sql kBegin{"BEGIN IMMEDIATE"};

inline constexpr Sql kCommit{"COMMIT"};

inline constexpr Sql kUserVersion{"PRAGMA user_version"};

// ---- enqueue: ids, places and rows -----------------------------------------

inline constexpr Sql kRegisterQueue{
    "INSERT INTO queues (name, paused) VALUES (?1, 0) ON CONFLICT (name) DO NOTHING"};

// The queue's next free place and the end of its block.
inline constexpr Sql kQueueBlock{"SELECT next_pos, end_pos FROM queues WHERE name = ?1"};

// Takes ?1 new job ids, returning the last.
inline constexpr Sql kTakeIds{
    "UPDATE meta SET value = value + ?1 WHERE key = 'last_job_id' RETURNING value"};

// Takes a fresh block, returning its number.
inline constexpr Sql kTakeBlock{
    "UPDATE meta SET value = value + 1 WHERE key = 'next_block' RETURNING value - 1"};

inline constexpr Sql kInsertJob{
    "INSERT INTO jobs (pos, id, queue, kind, payload, priority, state, attempt, max_attempts,"
    " run_at, created_at, cost, key, timeout_ms)"
    " VALUES (?9, ?10, ?1, ?2, ?3, ?4, 1, 0, ?5, ?6, ?7, ?8, ?11, ?12)"};

inline constexpr Sql kSetQueueBlock{
    "UPDATE queues SET next_pos = ?2, end_pos = ?3 WHERE name = ?1"};

// ---- claim, claim_kinds and claim_keys --------------------------------------

// claim and kAnyReady name jobs_claim: the planner may otherwise take
// jobs_key (also queue = ?1), whose ranges are not in claim order.
inline constexpr Sql kAnyReady{
    "SELECT EXISTS (SELECT 1 FROM jobs INDEXED BY jobs_claim WHERE queue = ?1 AND state = 1"
    " AND run_at <= ?2)"
    " AND NOT EXISTS (SELECT 1 FROM queues WHERE name = ?1 AND paused <> 0)"};

inline constexpr Sql kQueuePaused{"SELECT paused FROM queues WHERE name = ?1"};

inline constexpr Sql kClaim{
    "UPDATE jobs SET state = 3, attempt = attempt + 1, lease_token = ?1,"
    " lease_expires = ?2, started_at = ?4"
    " WHERE pos IN (SELECT pos FROM jobs INDEXED BY jobs_claim WHERE queue = ?3 AND state = 1"
    " AND run_at <= ?4 ORDER BY priority, run_at, id LIMIT ?5)"
    " RETURNING id, kind, payload, priority, attempt, max_attempts, run_at,"
    " created_at, last_error, cost, pos, key, started_at, timeout_ms"};

// jobs_claim, other kinds skipped.
inline constexpr Sql kClaimKindCandidates{
    "SELECT pos, id, priority, run_at FROM jobs INDEXED BY jobs_claim WHERE queue = ?1 AND kind = "
    "?2"
    " AND state = 1"
    " AND run_at <= ?3 ORDER BY priority, run_at, id LIMIT ?4"};

// jobs_key: one key's ready jobs in claim order (?4 < 0: no limit; the
// caller stops reading once it has what it wants).
inline constexpr Sql kClaimKeyCandidates{
    "SELECT pos, kind FROM jobs INDEXED BY jobs_key WHERE queue = ?1 AND key = ?2 AND state = 1"
    " AND run_at <= ?3 ORDER BY priority, run_at, id LIMIT ?4"};

// The keys kClaimKeyFirsts takes at once.
inline constexpr int kKeySlots = 64;

// kClaimKeyFirsts' text, its key slots numbered ?3..?(kKeySlots + 2).
constexpr std::array<char, 1024> claim_key_firsts_text() {
  std::array<char, 1024> out{};
  std::size_t n = 0;
  auto put = [&](std::string_view s) {
    for (const char c : s) out[n++] = c;
  };
  put("WITH k(key) AS (VALUES ");
  for (int slot = 3; slot < kKeySlots + 3; ++slot) {
    put(slot == 3 ? "(?" : ",(?");
    if (slot >= 10) out[n++] = static_cast<char>('0' + slot / 10);
    out[n++] = static_cast<char>('0' + slot % 10);
    put(")");
  }
  put(") SELECT (SELECT pos FROM jobs INDEXED BY jobs_key WHERE queue = ?1 AND key = k.key"
      " AND state = 1 AND run_at <= ?2 ORDER BY priority, run_at, id LIMIT 1) FROM k");
  return out;
}
inline constexpr std::array<char, 1024> kClaimKeyFirstsText = claim_key_firsts_text();

// jobs_key: the first ready job in claim order (its place, or NULL) of each
// of up to kKeySlots keys (?3 on; a slot left NULL matches nothing), a row
// per slot in slot order. One statement for the keys a claim takes one job
// of (the usual turn when many keys are ready), where kClaimKeyCandidates
// would be a statement per key. A subquery's LIMIT cannot name the outer
// row, so keys that take more than one job use kClaimKeyCandidates.
inline constexpr Sql kClaimKeyFirsts{kClaimKeyFirstsText.data()};

// The jobs at the places (pos) of ?3, a JSON array, that are still ready:
// one statement for a whole claim, each place a rowid seek. ?4: the claim's
// now, the attempt's started_at.
inline constexpr Sql kClaimPlaces{
    "UPDATE jobs SET state = 3, attempt = attempt + 1, lease_token = ?1, lease_expires = ?2,"
    " started_at = ?4"
    " WHERE pos IN (SELECT value FROM json_each(?3)) AND state = 1"
    " RETURNING id, kind, payload, priority, attempt, max_attempts, run_at,"
    " created_at, last_error, cost, pos, key, started_at, timeout_ms"};

// ---- list_ready_keys ---------------------------------------------------------

// jobs_key: the queue's keys with available jobs, key >= ?2 (a loose index
// scan: one seek per key, ORDER BY key LIMIT 1 being min(key)), each with its
// ready jobs (run_at <= ?3) counted up to ?4. A row per key, in key order; a
// key whose available jobs are all scheduled comes with 0. The walk is a
// co-routine: it goes no further than the rows the caller steps through.
// ?2 is '' for every key, or after_key followed by a NUL byte for the keys
// after after_key (its successor in bytewise order): an exact lower bound,
// where "key > ?2 OR ..." would read after_key's own entries.
inline constexpr Sql kReadyKeys{
    "WITH RECURSIVE walk(key) AS ("
    " SELECT (SELECT key FROM jobs INDEXED BY jobs_key WHERE queue = ?1 AND state = 1"
    " AND key >= ?2 ORDER BY key LIMIT 1)"
    " UNION ALL"
    " SELECT (SELECT n.key FROM jobs AS n INDEXED BY jobs_key WHERE n.queue = ?1"
    " AND n.state = 1 AND n.key > walk.key ORDER BY n.key LIMIT 1) FROM walk"
    " WHERE walk.key IS NOT NULL)"
    " SELECT key, (SELECT COUNT(*) FROM (SELECT 1 FROM jobs AS r INDEXED BY jobs_key"
    " WHERE r.queue = ?1 AND r.key = walk.key AND r.state = 1 AND r.run_at <= ?3 LIMIT ?4))"
    " FROM walk WHERE key IS NOT NULL"};

// ---- Outcomes of claimed jobs, each guarded by the lease -------------------

inline constexpr Sql kComplete{
    "UPDATE jobs SET state = 4, finalized_at = ?1, lease_token = 0, lease_expires = 0"
    " WHERE id = ?2 AND state = 3 AND lease_token = ?3"};

// kComplete for the rows at the places ?2 (a JSON array) holding lease ?3:
// one statement for a claim's whole batch. A place is never reused, so it
// names one job.
inline constexpr Sql kCompleteAtPlaces{
    "UPDATE jobs SET state = 4, finalized_at = ?1, lease_token = 0, lease_expires = 0"
    " WHERE pos IN (SELECT value FROM json_each(?2)) AND state = 3 AND lease_token = ?3"
    " RETURNING pos"};

inline constexpr Sql kFailRetry{
    "UPDATE jobs SET state = 1, run_at = ?1, last_error = ?2, lease_token = 0,"
    " lease_expires = 0 WHERE id = ?3 AND state = 3 AND lease_token = ?4 RETURNING queue"};

inline constexpr Sql kFailFinal{
    "UPDATE jobs SET state = 5, finalized_at = ?1, last_error = ?2, lease_token = 0,"
    " lease_expires = 0 WHERE id = ?3 AND state = 3 AND lease_token = ?4 RETURNING queue"};

inline constexpr Sql kExtend{
    "UPDATE jobs SET lease_expires = ?1 WHERE id = ?2 AND state = 3 AND lease_token = ?3"};

inline constexpr Sql kRelease{
    "UPDATE jobs SET state = 1, run_at = ?1, attempt = MAX(attempt - 1, 0),"
    " lease_token = 0, lease_expires = 0"
    " WHERE id = ?2 AND state = 3 AND lease_token = ?3"};

inline constexpr Sql kRescue{
    "UPDATE jobs SET"
    " state = CASE WHEN attempt < max_attempts THEN 1 ELSE 5 END,"  // run_at kept: its place
    " finalized_at = CASE WHEN attempt < max_attempts THEN 0 ELSE ?1 END,"
    " lease_token = 0, lease_expires = 0, last_error = ?2"
    " WHERE pos IN (SELECT pos FROM jobs WHERE state = 3 AND lease_expires < ?1"
    " ORDER BY lease_expires, pos LIMIT ?3)"
    " RETURNING id, queue, kind, payload, priority, state, attempt, max_attempts, run_at,"
    " created_at, finalized_at, lease_token, lease_expires, last_error, cost, key,"
    " started_at, timeout_ms"};

// ---- Operator commands on jobs ---------------------------------------------

// Only a job that is not final (available or running).
inline constexpr Sql kCancel{
    "UPDATE jobs SET state = 6, finalized_at = ?1, lease_token = 0, lease_expires = 0"
    " WHERE id = ?2 AND state < 4 RETURNING queue"};

// Only a failed (5) or cancelled (6) job.
inline constexpr Sql kRetryJob{
    "UPDATE jobs SET state = 1, run_at = ?1, attempt = 0, finalized_at = 0, lease_token = 0,"
    " lease_expires = 0 WHERE id = ?2 AND state >= 5"};

// Only a final job.
inline constexpr Sql kDeleteJob{"DELETE FROM jobs WHERE id = ?1 AND state >= 4"};

inline constexpr Sql kJobExists{"SELECT queue, state FROM jobs WHERE id = ?1"};

inline constexpr Sql kPurge{
    "DELETE FROM jobs WHERE pos IN (SELECT pos FROM jobs WHERE state >= 4"
    " AND finalized_at < ?1 ORDER BY finalized_at, pos LIMIT ?2)"};

// ---- get_job and list_jobs -------------------------------------------------

inline constexpr Sql kGetJob{
    "SELECT id, queue, kind, payload, priority, state, attempt, max_attempts, run_at,"
    " created_at, finalized_at, lease_token, lease_expires, last_error, cost, key,"
    " started_at, timeout_ms"
    " FROM jobs WHERE id = ?1"};

// The list statements name their index: the planner would otherwise walk
// the primary key from after_id (every retained job). likely() keeps the
// partial index's "state >= 4" term from becoming the range (it is implied
// by state = ?2, a final state, which the caller binds).

// jobs_list, one kind (index only).
inline constexpr Sql kListFinalIds{
    "SELECT id FROM jobs INDEXED BY jobs_list WHERE queue = ?1 AND state = ?2"
    " AND likely(state >= 4) AND kind = ?3 AND id > ?4 AND id < ?5 ORDER BY id LIMIT ?6"};

// jobs_list: the queue's next kind in that state (one seek).
inline constexpr Sql kNextFinalKind{
    "SELECT kind FROM jobs INDEXED BY jobs_list WHERE queue = ?1 AND state = ?2"
    " AND likely(state >= 4) AND kind > ?3 ORDER BY kind LIMIT 1"};

// jobs_claim: the queue's ready backlog, sorted by id.
inline constexpr Sql kListAvailable{
    "SELECT id, queue, kind, payload, priority, state, attempt, max_attempts, run_at,"
    " created_at, finalized_at, lease_token, lease_expires, last_error, cost, key,"
    " started_at, timeout_ms"
    " FROM jobs INDEXED BY jobs_claim WHERE queue = ?1 AND state = 1 AND id > ?2"
    " AND run_at BETWEEN ?3 AND ?4 AND (?6 = '' OR kind = ?6) ORDER BY id LIMIT ?5"};

// jobs_lease: every running job, sorted by id.
inline constexpr Sql kListRunning{
    "SELECT id, queue, kind, payload, priority, state, attempt, max_attempts, run_at,"
    " created_at, finalized_at, lease_token, lease_expires, last_error, cost, key,"
    " started_at, timeout_ms"
    " FROM jobs INDEXED BY jobs_lease WHERE state = 3 AND queue = ?1 AND id > ?2"
    " AND run_at BETWEEN ?3 AND ?4 AND (?6 = '' OR kind = ?6) ORDER BY id LIMIT ?5"};

// ---- Queues and their counts -----------------------------------------------

inline constexpr Sql kUpsertQueue{
    "INSERT INTO queues (name, paused) VALUES (?1, ?2)"
    " ON CONFLICT (name) DO UPDATE SET paused = excluded.paused"};

inline constexpr Sql kListQueues{"SELECT name, paused FROM queues ORDER BY name"};

inline constexpr Sql kQueueStats{
    "SELECT name, MAX(paused), SUM(pending), SUM(scheduled), SUM(running),"
    " SUM(completed), SUM(failed), SUM(cancelled), COALESCE(MIN(pending_at), 0) FROM ("
    " SELECT queue AS name, 0 AS paused, (state = 1 AND run_at <= ?1) AS pending,"
    " CASE WHEN state = 1 AND run_at <= ?1 THEN run_at END AS pending_at,"
    " (state = 1 AND run_at > ?1) AS scheduled, (state = 3) AS running,"
    " (state = 4) AS completed, (state = 5) AS failed, (state = 6) AS cancelled"
    " FROM jobs"
    " UNION ALL SELECT name, 1, 0, NULL, 0, 0, 0, 0, 0 FROM queues WHERE paused <> 0"
    ") GROUP BY name ORDER BY name"};

// The maintained final counts, the paused marker (state 0) and every known
// queue (state -1: its live jobs are counted next).
inline constexpr Sql kJobCounts{
    "SELECT queue, state, n FROM job_counts WHERE n <> 0"
    " UNION ALL SELECT name, 0, 1 FROM queues WHERE paused <> 0"
    " UNION ALL SELECT name, -1, 0 FROM queues ORDER BY 1"};

// jobs_claim (the queue's available rows only): available, of which scheduled.
inline constexpr Sql kCountAvailable{
    "SELECT COUNT(*), COALESCE(SUM(run_at > ?2), 0),"
    " COALESCE(MIN(CASE WHEN run_at <= ?2 THEN run_at END), 0) FROM jobs INDEXED BY jobs_claim"
    " WHERE queue = ?1 AND state = 1"};

// jobs_lease (running rows only), per queue.
inline constexpr Sql kCountRunning{
    "SELECT queue, COUNT(*) FROM jobs INDEXED BY jobs_lease WHERE state = 3 GROUP BY queue"};

// job_counts, by the statements that finalize or unfinalize.
inline constexpr Sql kAddCount{
    "INSERT INTO job_counts (queue, state, n) VALUES (?1, ?2, ?3)"
    " ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n"};

// job_counts, a batch of completed ids (a JSON array).
inline constexpr Sql kCountCompleted{
    "INSERT INTO job_counts (queue, state, n) SELECT queue, 4, COUNT(*) FROM jobs"
    " WHERE id IN (SELECT value FROM json_each(?1)) GROUP BY queue"
    " ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n"};

// ---- Rate-limit overrides and the change marker ----------------------------

inline constexpr Sql kUpsertRateLimit{
    "INSERT INTO rate_limits (queue, rate, burst, updated_at, scope)"
    " VALUES (?1, ?2, ?3, ?4, ?5)"
    " ON CONFLICT (queue) DO UPDATE SET rate = excluded.rate, burst = excluded.burst,"
    " updated_at = excluded.updated_at, scope = excluded.scope"};

inline constexpr Sql kDeleteRateLimit{"DELETE FROM rate_limits WHERE queue = ?1"};

inline constexpr Sql kListRateLimits{
    "SELECT queue, rate, burst, updated_at, scope FROM rate_limits ORDER BY queue"};

inline constexpr Sql kBumpMarker{
    "INSERT INTO meta (key, value) VALUES ('change_marker', 1)"
    " ON CONFLICT (key) DO UPDATE SET value = value + 1"};

inline constexpr Sql kGetMarker{"SELECT value FROM meta WHERE key = 'change_marker'"};

// ---- Key settings (ABI 1.5) ------------------------------------------------

// Stores the fields ?4 (CONVEYOR_KEY_FIELD_*) of (queue ?1, target ?2, key
// ?3): rate ?5, burst ?6, scope ?7 (field 1), weight ?8 (field 2); the
// fields not in ?4 keep what is stored (0 in a new row).
inline constexpr Sql kUpsertKeySetting{
    "INSERT INTO key_settings (queue, target, key, fields, rate, burst, scope, weight, updated_at)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
    " ON CONFLICT (queue, target, key) DO UPDATE SET fields = fields | excluded.fields,"
    " rate = CASE WHEN (excluded.fields & 1) <> 0 THEN excluded.rate ELSE rate END,"
    " burst = CASE WHEN (excluded.fields & 1) <> 0 THEN excluded.burst ELSE burst END,"
    " scope = CASE WHEN (excluded.fields & 1) <> 0 THEN excluded.scope ELSE scope END,"
    " weight = CASE WHEN (excluded.fields & 2) <> 0 THEN excluded.weight ELSE weight END,"
    " updated_at = excluded.updated_at"};

// Clears the fields ?4 of (?1, ?2, ?3) when any of them is stored, returning
// the fields left (0: the row is to be deleted); no row when none was stored.
inline constexpr Sql kClearKeySetting{
    "UPDATE key_settings SET fields = fields & ~?4,"
    " rate = CASE WHEN (?4 & 1) <> 0 THEN 0 ELSE rate END,"
    " burst = CASE WHEN (?4 & 1) <> 0 THEN 0 ELSE burst END,"
    " scope = CASE WHEN (?4 & 1) <> 0 THEN 0 ELSE scope END,"
    " weight = CASE WHEN (?4 & 2) <> 0 THEN 0 ELSE weight END"
    " WHERE queue = ?1 AND target = ?2 AND key = ?3 AND (fields & ?4) <> 0 RETURNING fields"};

inline constexpr Sql kDeleteEmptyKeySetting{
    "DELETE FROM key_settings WHERE queue = ?1 AND target = ?2 AND key = ?3 AND fields = 0"};

// The primary key's order: queue, target (ONE before EVERY), key bytewise.
inline constexpr Sql kListKeySettings{
    "SELECT queue, target, key, fields, rate, burst, scope, weight, updated_at"
    " FROM key_settings ORDER BY queue, target, key"};

// ---- Shared state ----------------------------------------------------------

inline constexpr Sql kSharedGet{"SELECT version, value FROM shared_state WHERE key = ?1"};

inline constexpr Sql kSharedPut{
    "INSERT INTO shared_state (key, version, value) VALUES (?1, ?2, ?3)"
    " ON CONFLICT (key) DO UPDATE SET version = excluded.version, value = excluded.value"};

// Deletes up to ?4 records with key in [?1, ?2) (a primary-key range: the
// keys that start with the prefix ?1, ?2 being its successor) and value
// below ?3. A range, not LIKE: LIKE takes % and _ in the prefix as
// wildcards and ignores ASCII case.
inline constexpr Sql kDeleteSharedStates{
    "DELETE FROM shared_state WHERE key IN (SELECT key FROM shared_state"
    " WHERE key >= ?1 AND key < ?2 AND value < ?3 ORDER BY key LIMIT ?4)"};

// ---- Notifications: what other connections changed -------------------------

// Changes when another connection committed.
inline constexpr Sql kDataVersion{"PRAGMA data_version"};

// The ids' high-water mark (never goes down).
inline constexpr Sql kLastJobId{"SELECT value FROM meta WHERE key = 'last_job_id'"};

// The queues of jobs ?1 < id <= ?2 (a jobs_id range).
inline constexpr Sql kQueuesOfJobsAfter{
    "SELECT DISTINCT queue FROM jobs WHERE id > ?1 AND id <= ?2"};

inline constexpr Sql kQueueStates{"SELECT name, paused FROM queues"};

}  // namespace sql

// Every statement a connection caches, one slot each.
inline constexpr const Sql* kCatalogue[] = {
    &sql::kBegin,
    &sql::kCommit,
    &sql::kUserVersion,
    &sql::kRegisterQueue,
    &sql::kQueueBlock,
    &sql::kTakeIds,
    &sql::kTakeBlock,
    &sql::kInsertJob,
    &sql::kSetQueueBlock,
    &sql::kAnyReady,
    &sql::kQueuePaused,
    &sql::kClaim,
    &sql::kClaimKindCandidates,
    &sql::kClaimKeyCandidates,
    &sql::kClaimKeyFirsts,
    &sql::kClaimPlaces,
    &sql::kReadyKeys,
    &sql::kComplete,
    &sql::kCompleteAtPlaces,
    &sql::kFailRetry,
    &sql::kFailFinal,
    &sql::kExtend,
    &sql::kRelease,
    &sql::kRescue,
    &sql::kCancel,
    &sql::kRetryJob,
    &sql::kDeleteJob,
    &sql::kJobExists,
    &sql::kPurge,
    &sql::kGetJob,
    &sql::kListFinalIds,
    &sql::kNextFinalKind,
    &sql::kListAvailable,
    &sql::kListRunning,
    &sql::kUpsertQueue,
    &sql::kListQueues,
    &sql::kQueueStats,
    &sql::kJobCounts,
    &sql::kCountAvailable,
    &sql::kCountRunning,
    &sql::kAddCount,
    &sql::kCountCompleted,
    &sql::kUpsertRateLimit,
    &sql::kDeleteRateLimit,
    &sql::kListRateLimits,
    &sql::kBumpMarker,
    &sql::kGetMarker,
    &sql::kUpsertKeySetting,
    &sql::kClearKeySetting,
    &sql::kDeleteEmptyKeySetting,
    &sql::kListKeySettings,
    &sql::kSharedGet,
    &sql::kSharedPut,
    &sql::kDeleteSharedStates,
    &sql::kDataVersion,
    &sql::kLastJobId,
    &sql::kQueuesOfJobsAfter,
    &sql::kQueueStates,
};

// Statements are told apart by their SQL, not their address: GCC does not
// fold a comparison of two objects' addresses in a constant expression under
// -fsanitize=address, and two names for one SQL text would be a mistake anyway.
constexpr bool same_statement(const Sql& a, const Sql& b) {
  // Up to the first difference only: the catalogue's check compares every
  // pair at compile time, and clang bounds the steps of constant evaluation
  // (two strlen calls per pair exceeded it).
  for (std::size_t i = 0;; ++i) {
    if (a.text[i] != b.text[i]) return false;
    if (a.text[i] == '\0') return true;
  }
}

// S's slot in a connection's statement cache.
template <const Sql& S>
consteval std::size_t slot_of() {
  for (std::size_t i = 0; i < std::size(kCatalogue); ++i)
    if (same_statement(*kCatalogue[i], S)) return i;
  throw "statement missing from kCatalogue";  // reached only at compile time: an error
}

inline constexpr std::size_t kStatementCount = std::size(kCatalogue);

consteval bool catalogue_lists_each_once() {
  for (std::size_t i = 0; i < kStatementCount; ++i)
    for (std::size_t j = i + 1; j < kStatementCount; ++j)
      if (same_statement(*kCatalogue[i], *kCatalogue[j])) return false;
  return true;
}
static_assert(catalogue_lists_each_once(),
              "a statement listed twice in kCatalogue, or two statements with the same SQL");

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_STATEMENTS_HPP
