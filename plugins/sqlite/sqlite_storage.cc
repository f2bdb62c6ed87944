#include "sqlite_storage.hpp"

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Exception.h>
#include <SQLiteCpp/Statement.h>
#include <fcntl.h>
#include <poll.h>
#include <sqlite3.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <map>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

namespace conveyor::sqlite {
namespace {

using sdk::Error;

// Job states as stored. They equal the CONVEYOR_JOB_* values; SCHEDULED is
// never stored (it is AVAILABLE with run_at in the future).
constexpr int kAvailable = CONVEYOR_JOB_AVAILABLE;
constexpr int kRunning = CONVEYOR_JOB_RUNNING;
static_assert(CONVEYOR_JOB_AVAILABLE == 1 && CONVEYOR_JOB_RUNNING == 3 &&
                  CONVEYOR_JOB_COMPLETED == 4 && CONVEYOR_JOB_FAILED == 5 &&
                  CONVEYOR_JOB_CANCELLED == 6,
              "the SQL below spells the state numbers out (final states are "
              "state >= 4, non-final ones state < 4)");

constexpr const char* kLeaseExpiredError = "lease expired: worker presumed dead";

// A queue's rows are stored in blocks of 2^kBlockBits places (schema step
// 3 -> 4 spells the same shift).
constexpr int kBlockBits = 20;
// A queue's free places: next_pos up to (not including) end_pos; empty
// (next_pos == end_pos) until its first enqueue takes a block.
struct PlaceBlock {
  int64_t next_pos = 0;
  int64_t end_pos = 0;
};

// Upper bound on how many times a transaction is retried after
// SQLITE_BUSY/SQLITE_LOCKED (the other bound is busy_timeout_ms).
constexpr int kMaxBusyAttempts = 12;
// Entries of claimed_ (a map node of about 48 bytes each) before it is cleared.
constexpr size_t kMaxClaimed = 1 << 20;
// Idle reader connections kept for reuse.
constexpr size_t kMaxIdleReaders = 8;

// The schema, one entry per version step: kMigrations[i] upgrades from
// version i to i + 1. Never edit a released step; append a new one.
constexpr const char* kMigrations[] = {
    // 0 -> 1
    R"sql(
CREATE TABLE jobs (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,  -- ids are never reused
  queue         TEXT    NOT NULL,
  kind          TEXT    NOT NULL,
  payload       BLOB    NOT NULL,
  priority      INTEGER NOT NULL,
  state         INTEGER NOT NULL,  -- 1 available, 3 running, 4 completed, 5 failed, 6 cancelled
  attempt       INTEGER NOT NULL DEFAULT 0,
  max_attempts  INTEGER NOT NULL,
  run_at        INTEGER NOT NULL,
  created_at    INTEGER NOT NULL,
  finalized_at  INTEGER NOT NULL DEFAULT 0,
  lease_token   INTEGER NOT NULL DEFAULT 0,
  lease_expires INTEGER NOT NULL DEFAULT 0,
  last_error    TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX jobs_claim ON jobs (queue, priority, run_at, id) WHERE state = 1;
CREATE INDEX jobs_lease ON jobs (lease_expires) WHERE state = 3;
-- Final states are exactly state >= 4. Spelled as a comparison, not as
-- IN (4, 5, 6): an IN list in a partial-index predicate is evaluated through
-- an ephemeral b-tree on every UPDATE of a row, which made each UPDATE 4-5x
-- slower.
CREATE INDEX jobs_final ON jobs (finalized_at) WHERE state >= 4;
-- Every queue ever enqueued into or paused (list_queues reads only this).
CREATE TABLE queues (
  name   TEXT    PRIMARY KEY,
  paused INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE TABLE rate_limits (
  queue      TEXT    PRIMARY KEY,
  rate       REAL    NOT NULL,
  burst      INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE meta (
  key   TEXT    PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO meta (key, value) VALUES ('change_marker', 0);
)sql",
    // 1 -> 2: ABI 1.1 (job operations)
    R"sql(
-- list_jobs of retained (final) jobs: one index range per state and kind, in
-- id order; without a kind, the ranges of the queue's kinds merged. Partial on
-- final states, so enqueues and claims never touch it and a job enters it
-- once, when it finishes (full indexes rewritten on every state change made
-- enqueue and drain 3x slower; a second index by kind cost drain 20%). Live
-- jobs are listed through jobs_claim and jobs_lease (bounded by the backlog
-- and the running jobs).
CREATE INDEX jobs_list ON jobs (queue, state, kind, id) WHERE state >= 4;
-- claim_kinds reads jobs_claim in claim order, skipping other kinds (bounded
-- by the queue's ready backlog): a kind index cost every enqueue and claim.
-- job_counts: retained final jobs per queue and state (4 completed, 5 failed,
-- 6 cancelled), so counting never scans retained jobs. The statements that
-- move a job into or out of a final state add to it in the same transaction
-- (complete, fail, rescue, cancel, retry: one upsert per queue and batch;
-- triggers on UPDATE OF state slowed every claim and completion); deletes
-- (purge, delete_jobs) are counted by the trigger below. Live states are
-- counted at read time from jobs_claim and jobs_lease, which hold only
-- available and running rows.
CREATE TABLE job_counts (
  queue TEXT    NOT NULL,
  state INTEGER NOT NULL,
  n     INTEGER NOT NULL,
  PRIMARY KEY (queue, state)
) WITHOUT ROWID;
INSERT INTO job_counts (queue, state, n)
  SELECT queue, state, COUNT(*) FROM jobs WHERE state >= 4 GROUP BY queue, state;
CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs WHEN old.state >= 4 BEGIN
  UPDATE job_counts SET n = n - 1 WHERE queue = old.queue AND state = old.state;
END;
)sql",
    // 2 -> 3: ABI 1.2 (fleet rate limits, job cost). ADD COLUMN with a
    // constant default rewrites no rows.
    R"sql(
ALTER TABLE jobs ADD COLUMN cost INTEGER NOT NULL DEFAULT 1;
ALTER TABLE rate_limits ADD COLUMN scope INTEGER NOT NULL DEFAULT 0;
-- swap_shared_state: key -> (version, value); a missing key is (0, 0).
CREATE TABLE shared_state (
  key     TEXT    PRIMARY KEY,
  version INTEGER NOT NULL,
  value   INTEGER NOT NULL
) WITHOUT ROWID;
)sql",
    // 3 -> 4: rows stored by queue (many busy queues). A claim or completion
    // of 100 jobs rewrote up to 100 table pages when the queues' jobs were
    // interleaved in id order (the WAL writes bounded 100 busy queues to a
    // third of one queue's drain). The row's place is now pos, taken from its
    // queue's block of 2^kBlockBits places (queues.next_pos .. end_pos; a full
    // block is followed by a fresh one, meta 'next_block'); the job id stays
    // the public, increasing number (meta 'last_job_id', never reused), found
    // through jobs_id. Rows kept from schema 3 keep pos = id, below every block.
    R"sql(
CREATE TABLE jobs_by_queue (
  pos           INTEGER PRIMARY KEY,  -- where the row is stored (by queue)
  id            INTEGER NOT NULL,     -- the job id: increasing, never reused
  queue         TEXT    NOT NULL,
  kind          TEXT    NOT NULL,
  payload       BLOB    NOT NULL,
  priority      INTEGER NOT NULL,
  state         INTEGER NOT NULL,
  attempt       INTEGER NOT NULL DEFAULT 0,
  max_attempts  INTEGER NOT NULL,
  run_at        INTEGER NOT NULL,
  created_at    INTEGER NOT NULL,
  finalized_at  INTEGER NOT NULL DEFAULT 0,
  lease_token   INTEGER NOT NULL DEFAULT 0,
  lease_expires INTEGER NOT NULL DEFAULT 0,
  last_error    TEXT    NOT NULL DEFAULT '',
  cost          INTEGER NOT NULL DEFAULT 1
);
INSERT INTO jobs_by_queue (pos, id, queue, kind, payload, priority, state, attempt,
  max_attempts, run_at, created_at, finalized_at, lease_token, lease_expires, last_error, cost)
  SELECT id, id, queue, kind, payload, priority, state, attempt, max_attempts, run_at,
    created_at, finalized_at, lease_token, lease_expires, last_error, cost FROM jobs;
INSERT INTO meta (key, value)
  SELECT 'last_job_id', MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0),
                            COALESCE((SELECT MAX(id) FROM jobs), 0));
INSERT INTO meta (key, value)
  SELECT 'next_block', (value >> 20) + 1 FROM meta WHERE key = 'last_job_id';
DROP TABLE jobs;
ALTER TABLE jobs_by_queue RENAME TO jobs;
CREATE UNIQUE INDEX jobs_id ON jobs (id);
CREATE INDEX jobs_claim ON jobs (queue, priority, run_at, id) WHERE state = 1;
CREATE INDEX jobs_lease ON jobs (lease_expires) WHERE state = 3;
CREATE INDEX jobs_final ON jobs (finalized_at) WHERE state >= 4;
CREATE INDEX jobs_list ON jobs (queue, state, kind, id) WHERE state >= 4;
CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs WHEN old.state >= 4 BEGIN
  UPDATE job_counts SET n = n - 1 WHERE queue = old.queue AND state = old.state;
END;
ALTER TABLE queues ADD COLUMN next_pos INTEGER NOT NULL DEFAULT 0;
ALTER TABLE queues ADD COLUMN end_pos INTEGER NOT NULL DEFAULT 0;
)sql",
};
static_assert(std::size(kMigrations) == kSchemaVersion, "one migration step per schema version");

}  // namespace

std::span<const char* const> schema_steps() { return kMigrations; }

namespace {

// Cached statements, by index into kSql.
enum Stmt : int {
  kBegin,
  kCommit,
  kUserVersion,
  kInsertJob,
  kQueuePaused,
  kAnyReady,
  kClaim,
  kComplete,
  kCompleteAtPlaces,
  kFailRetry,
  kFailFinal,
  kExtend,
  kRelease,
  kRescue,
  kCancel,
  kUpsertQueue,
  kBumpMarker,
  kQueueStats,
  kListQueues,
  kRegisterQueue,
  kGetJob,
  kPurge,
  kUpsertRateLimit,
  kDeleteRateLimit,
  kListRateLimits,
  kGetMarker,
  kListFinalIds,
  kNextFinalKind,
  kListAvailable,
  kListRunning,
  kClaimKindCandidates,
  kClaimOne,
  kRetryJob,
  kDeleteJob,
  kJobExists,
  kJobCounts,
  kCountAvailable,
  kCountRunning,
  kAddCount,
  kCountCompleted,
  kSharedGet,
  kSharedPut,
  kDataVersion,
  kLastJobId,
  kQueuesOfJobsAfter,
  kQueueStates,
  kTakeIds,
  kQueueBlock,
  kSetQueueBlock,
  kTakeBlock,
  kStmtCount
};

constexpr std::array<const char*, kStmtCount> kSql = {
    /* kBegin */ "BEGIN IMMEDIATE",
    /* kCommit */ "COMMIT",
    /* kUserVersion */ "PRAGMA user_version",
    /* kInsertJob */
    "INSERT INTO jobs (pos, id, queue, kind, payload, priority, state, attempt, max_attempts,"
    " run_at, created_at, cost) VALUES (?9, ?10, ?1, ?2, ?3, ?4, 1, 0, ?5, ?6, ?7, ?8)",
    /* kQueuePaused */ "SELECT paused FROM queues WHERE name = ?1",
    /* kAnyReady */
    "SELECT EXISTS (SELECT 1 FROM jobs WHERE queue = ?1 AND state = 1 AND run_at <= ?2)"
    " AND NOT EXISTS (SELECT 1 FROM queues WHERE name = ?1 AND paused <> 0)",
    /* kClaim */
    "UPDATE jobs SET state = 3, attempt = attempt + 1, lease_token = ?1,"
    " lease_expires = ?2"
    " WHERE pos IN (SELECT pos FROM jobs WHERE queue = ?3 AND state = 1 AND run_at <= ?4"
    " ORDER BY priority, run_at, id LIMIT ?5)"
    " RETURNING id, kind, payload, priority, attempt, max_attempts, run_at,"
    " created_at, last_error, cost, pos",
    /* kComplete */
    "UPDATE jobs SET state = 4, finalized_at = ?1, lease_token = 0, lease_expires = 0"
    " WHERE id = ?2 AND state = 3 AND lease_token = ?3",
    /* kCompleteAtPlaces: kComplete for the rows at the places ?2 (a JSON
       array) holding lease ?3, in one statement (100 single-row UPDATEs cost
       a third more per job); a place is never reused, so it names one job */
    "UPDATE jobs SET state = 4, finalized_at = ?1, lease_token = 0, lease_expires = 0"
    " WHERE pos IN (SELECT value FROM json_each(?2)) AND state = 3 AND lease_token = ?3"
    " RETURNING pos",
    /* kFailRetry */
    "UPDATE jobs SET state = 1, run_at = ?1, last_error = ?2, lease_token = 0,"
    " lease_expires = 0 WHERE id = ?3 AND state = 3 AND lease_token = ?4 RETURNING queue",
    /* kFailFinal */
    "UPDATE jobs SET state = 5, finalized_at = ?1, last_error = ?2, lease_token = 0,"
    " lease_expires = 0 WHERE id = ?3 AND state = 3 AND lease_token = ?4 RETURNING queue",
    /* kExtend */
    "UPDATE jobs SET lease_expires = ?1 WHERE id = ?2 AND state = 3 AND lease_token = ?3",
    /* kRelease */
    "UPDATE jobs SET state = 1, run_at = ?1, attempt = MAX(attempt - 1, 0),"
    " lease_token = 0, lease_expires = 0"
    " WHERE id = ?2 AND state = 3 AND lease_token = ?3",
    /* kRescue */
    "UPDATE jobs SET"
    " state = CASE WHEN attempt < max_attempts THEN 1 ELSE 5 END,"  // run_at kept: its place
    " finalized_at = CASE WHEN attempt < max_attempts THEN 0 ELSE ?1 END,"
    " lease_token = 0, lease_expires = 0, last_error = ?2"
    " WHERE pos IN (SELECT pos FROM jobs WHERE state = 3 AND lease_expires < ?1"
    " ORDER BY lease_expires, pos LIMIT ?3)"
    " RETURNING id, queue, kind, payload, priority, state, attempt, max_attempts, run_at,"
    " created_at, finalized_at, lease_token, lease_expires, last_error, cost",
    /* kCancel */
    "UPDATE jobs SET state = 6, finalized_at = ?1, lease_token = 0, lease_expires = 0"
    " WHERE id = ?2 AND state < 4 RETURNING queue",  // not final: available or running
    /* kUpsertQueue */
    "INSERT INTO queues (name, paused) VALUES (?1, ?2)"
    " ON CONFLICT (name) DO UPDATE SET paused = excluded.paused",
    /* kBumpMarker */
    "INSERT INTO meta (key, value) VALUES ('change_marker', 1)"
    " ON CONFLICT (key) DO UPDATE SET value = value + 1",
    /* kQueueStats */
    "SELECT name, MAX(paused), SUM(pending), SUM(scheduled), SUM(running),"
    " SUM(completed), SUM(failed), SUM(cancelled), COALESCE(MIN(pending_at), 0) FROM ("
    " SELECT queue AS name, 0 AS paused, (state = 1 AND run_at <= ?1) AS pending,"
    " CASE WHEN state = 1 AND run_at <= ?1 THEN run_at END AS pending_at,"
    " (state = 1 AND run_at > ?1) AS scheduled, (state = 3) AS running,"
    " (state = 4) AS completed, (state = 5) AS failed, (state = 6) AS cancelled"
    " FROM jobs"
    " UNION ALL SELECT name, 1, 0, NULL, 0, 0, 0, 0, 0 FROM queues WHERE paused <> 0"
    ") GROUP BY name ORDER BY name",
    /* kListQueues */ "SELECT name, paused FROM queues ORDER BY name",
    /* kRegisterQueue */
    "INSERT INTO queues (name, paused) VALUES (?1, 0) ON CONFLICT (name) DO NOTHING",
    /* kGetJob */
    "SELECT id, queue, kind, payload, priority, state, attempt, max_attempts, run_at,"
    " created_at, finalized_at, lease_token, lease_expires, last_error, cost"
    " FROM jobs WHERE id = ?1",
    /* kPurge */
    "DELETE FROM jobs WHERE pos IN (SELECT pos FROM jobs WHERE state >= 4"
    " AND finalized_at < ?1 ORDER BY finalized_at, pos LIMIT ?2)",
    /* kUpsertRateLimit */
    "INSERT INTO rate_limits (queue, rate, burst, updated_at, scope)"
    " VALUES (?1, ?2, ?3, ?4, ?5)"
    " ON CONFLICT (queue) DO UPDATE SET rate = excluded.rate, burst = excluded.burst,"
    " updated_at = excluded.updated_at, scope = excluded.scope",
    /* kDeleteRateLimit */ "DELETE FROM rate_limits WHERE queue = ?1",
    /* kListRateLimits */
    "SELECT queue, rate, burst, updated_at, scope FROM rate_limits ORDER BY queue",
    /* kGetMarker */ "SELECT value FROM meta WHERE key = 'change_marker'",
    // The list statements name their index: the planner would otherwise walk
    // the primary key from after_id (every retained job). likely() keeps the
    // partial index's "state >= 4" term from becoming the range (it is implied
    // by state = ?2, a final state, which the caller binds).
    /* kListFinalIds: jobs_list, one kind (index only) */
    "SELECT id FROM jobs INDEXED BY jobs_list WHERE queue = ?1 AND state = ?2"
    " AND likely(state >= 4) AND kind = ?3 AND id > ?4 AND id < ?5 ORDER BY id LIMIT ?6",
    /* kNextFinalKind: jobs_list, the queue's next kind in that state (one seek) */
    "SELECT kind FROM jobs INDEXED BY jobs_list WHERE queue = ?1 AND state = ?2"
    " AND likely(state >= 4) AND kind > ?3 ORDER BY kind LIMIT 1",
    /* kListAvailable: jobs_claim (the queue's ready backlog, sorted by id) */
    "SELECT id, queue, kind, payload, priority, state, attempt, max_attempts, run_at,"
    " created_at, finalized_at, lease_token, lease_expires, last_error, cost"
    " FROM jobs INDEXED BY jobs_claim WHERE queue = ?1 AND state = 1 AND id > ?2"
    " AND run_at BETWEEN ?3 AND ?4 AND (?6 = '' OR kind = ?6) ORDER BY id LIMIT ?5",
    /* kListRunning: jobs_lease (every running job, sorted by id) */
    "SELECT id, queue, kind, payload, priority, state, attempt, max_attempts, run_at,"
    " created_at, finalized_at, lease_token, lease_expires, last_error, cost"
    " FROM jobs INDEXED BY jobs_lease WHERE state = 3 AND queue = ?1 AND id > ?2"
    " AND run_at BETWEEN ?3 AND ?4 AND (?6 = '' OR kind = ?6) ORDER BY id LIMIT ?5",
    /* kClaimKindCandidates: jobs_claim, other kinds skipped */
    "SELECT id, priority, run_at FROM jobs INDEXED BY jobs_claim WHERE queue = ?1 AND kind = ?2"
    " AND state = 1"
    " AND run_at <= ?3 ORDER BY priority, run_at, id LIMIT ?4",
    /* kClaimOne */
    "UPDATE jobs SET state = 3, attempt = attempt + 1, lease_token = ?1, lease_expires = ?2"
    " WHERE id = ?3 AND state = 1"
    " RETURNING id, kind, payload, priority, attempt, max_attempts, run_at,"
    " created_at, last_error, cost, pos",
    /* kRetryJob: failed (5) or cancelled (6) only */
    "UPDATE jobs SET state = 1, run_at = ?1, attempt = 0, finalized_at = 0, lease_token = 0,"
    " lease_expires = 0 WHERE id = ?2 AND state >= 5",
    /* kDeleteJob: final only */
    "DELETE FROM jobs WHERE id = ?1 AND state >= 4",
    /* kJobExists */ "SELECT queue, state FROM jobs WHERE id = ?1",
    /* kJobCounts: the maintained final counts, the paused marker (state 0)
       and every known queue (state -1: its live jobs are counted next) */
    "SELECT queue, state, n FROM job_counts WHERE n <> 0"
    " UNION ALL SELECT name, 0, 1 FROM queues WHERE paused <> 0"
    " UNION ALL SELECT name, -1, 0 FROM queues ORDER BY 1",
    /* kCountAvailable: jobs_claim (the queue's available rows only): available,
       of which scheduled */
    "SELECT COUNT(*), COALESCE(SUM(run_at > ?2), 0),"
    " COALESCE(MIN(CASE WHEN run_at <= ?2 THEN run_at END), 0) FROM jobs INDEXED BY jobs_claim"
    " WHERE queue = ?1 AND state = 1",
    /* kCountRunning: jobs_lease (running rows only), per queue */
    "SELECT queue, COUNT(*) FROM jobs INDEXED BY jobs_lease WHERE state = 3 GROUP BY queue",
    /* kAddCount: job_counts, by the statements that finalize or unfinalize */
    "INSERT INTO job_counts (queue, state, n) VALUES (?1, ?2, ?3)"
    " ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n",
    /* kCountCompleted: job_counts, a batch of completed ids (a JSON array) */
    "INSERT INTO job_counts (queue, state, n) SELECT queue, 4, COUNT(*) FROM jobs"
    " WHERE id IN (SELECT value FROM json_each(?1)) GROUP BY queue"
    " ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n",
    /* kSharedGet */ "SELECT version, value FROM shared_state WHERE key = ?1",
    /* kSharedPut */
    "INSERT INTO shared_state (key, version, value) VALUES (?1, ?2, ?3)"
    " ON CONFLICT (key) DO UPDATE SET version = excluded.version, value = excluded.value",
    /* kDataVersion: changes when another connection committed */ "PRAGMA data_version",
    /* kLastJobId: the ids' high-water mark (never goes down) */
    "SELECT value FROM meta WHERE key = 'last_job_id'",
    /* kQueuesOfJobsAfter: the queues of jobs ?1 < id <= ?2 (a jobs_id range) */
    "SELECT DISTINCT queue FROM jobs WHERE id > ?1 AND id <= ?2",
    /* kQueueStates */ "SELECT name, paused FROM queues",
    /* kTakeIds: ?1 new job ids, the last returned */
    "UPDATE meta SET value = value + ?1 WHERE key = 'last_job_id' RETURNING value",
    /* kQueueBlock: the queue's next free place and the end of its block */
    "SELECT next_pos, end_pos FROM queues WHERE name = ?1",
    /* kSetQueueBlock */ "UPDATE queues SET next_pos = ?2, end_pos = ?3 WHERE name = ?1",
    /* kTakeBlock: a fresh block's number */
    "UPDATE meta SET value = value + 1 WHERE key = 'next_block' RETURNING value - 1",
};

// A missing comma above would silently merge two entries and shift the rest.
static_assert(
    [] {
      for (const char* sql : kSql)
        if (sql == nullptr) return false;
      return true;
    }(),
    "every Stmt needs its SQL in kSql");

std::string os_error(int err) { return std::generic_category().message(err); }

bool is_busy(int code) {
  int primary = code & 0xff;
  return primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
}

// Maps a SQLite failure to a conveyor status.
conveyor_status status_for(int code) {
  if (code < 0) return CONVEYOR_E_INTERNAL;
  switch (code & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CANTOPEN:
    case SQLITE_PROTOCOL:
    case SQLITE_READONLY:
    case SQLITE_NOLFS:
    case SQLITE_NOMEM:
      return CONVEYOR_E_UNAVAILABLE;
    case SQLITE_NOTADB:
      return CONVEYOR_E_INVALID;
    default:
      return CONVEYOR_E_INTERNAL;
  }
}

Error translate(const SQLite::Exception& e, const char* op, const std::string& path,
                sqlite3* db = nullptr) {
  std::string msg = std::string("sqlite ") + op + " on '" + path + "': " + e.what();
  int code = e.getErrorCode();
  if (code >= 0) {
    msg += " (sqlite code " + std::to_string(e.getExtendedErrorCode()) + ")";
    int primary = code & 0xff;
    if (db != nullptr && (primary == SQLITE_CANTOPEN || primary == SQLITE_IOERR)) {
      int sys = sqlite3_system_errno(db);
      if (sys != 0) msg += ": " + os_error(sys);
    }
  }
  return Error(status_for(code), msg);
}

// Binds text with its length; the SQLite copy (SQLITE_TRANSIENT) keeps it
// independent of the caller's buffer.
void bind_text(SQLite::Statement& st, int index, std::string_view s) {
  st.bind(index, std::string(s));
}

// Binds bytes without copying: the caller's buffer outlives the statement's
// execution (the statement is reset before the ABI call returns).
void bind_blob(SQLite::Statement& st, int index, std::string_view s) {
  if (s.size() > static_cast<size_t>(INT_MAX))
    throw Error(CONVEYOR_E_INVALID, "payload too large for sqlite");
  st.bindNoCopy(
      index,
      s.data() != nullptr ? static_cast<const void*>(s.data()) : static_cast<const void*>(""),
      static_cast<int>(s.size()));
}

std::string column_text(const SQLite::Statement& st, int index) {
  SQLite::Column c = st.getColumn(index);
  const char* p = c.getText();
  int n = c.getBytes();
  return std::string(p, static_cast<size_t>(n));
}

std::string column_blob(const SQLite::Statement& st, int index) {
  SQLite::Column c = st.getColumn(index);
  const void* p = c.getBlob();
  int n = c.getBytes();
  if (p == nullptr || n <= 0) return std::string();
  return std::string(static_cast<const char*>(p), static_cast<size_t>(n));
}

// Resets a statement (and drops its bindings) when the scope ends, so no
// statement keeps a transaction or a borrowed buffer alive.
class Use {
 public:
  explicit Use(SQLite::Statement& st) : st_(st) {}
  ~Use() {
    st_.tryReset();
    try {
      st_.clearBindings();
    } catch (...) {
    }
  }
  Use(const Use&) = delete;
  Use& operator=(const Use&) = delete;

 private:
  SQLite::Statement& st_;
};

// A job copied out of a row, so callbacks run after the transaction ends.
using sdk::OwnedJob;

// One queue's counts as queue_stats and job_counts report them, with the 1.1
// field the SDK's copy does not carry.
struct QueueRow : sdk::OwnedQueueStats {
  int64_t oldest_pending_run_at = 0;  // 0: nothing pending
  conveyor_queue_stats view() const noexcept {
    conveyor_queue_stats v = sdk::OwnedQueueStats::view();
    v.oldest_pending_run_at_us = oldest_pending_run_at;
    return v;
  }
};

// A row of kGetJob, kListAvailable, kListRunning or kRescue (same columns),
// reported as get_job reports it at now_us.
OwnedJob job_from_row(const SQLite::Statement& st, int64_t now_us);

void require_queue(std::string_view queue, const char* op) {
  if (queue.empty()) throw Error(CONVEYOR_E_INVALID, std::string(op) + ": queue name is empty");
}

int64_t wall_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}

// Checks the path before SQLite sees it, so errors name the path and what to
// do: the directory must exist (a typo must not silently start an empty
// database elsewhere), and with create = false so must the file.
void prepare_path(const Config& cfg) {
  namespace fs = std::filesystem;
  const std::string& path = cfg.path;
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    if (fs::exists(parent, ec))
      throw Error(CONVEYOR_E_INVALID, "sqlite: '" + parent.string() +
                                          "' in storage option 'path' ('" + path +
                                          "') is not a directory");
    throw Error(CONVEYOR_E_INVALID, "sqlite: directory '" + parent.string() +
                                        "' of storage option 'path' ('" + path +
                                        "') does not exist: create it (mkdir -p " +
                                        parent.string() + ") or fix the path");
  }
  if (!cfg.create && !fs::exists(path, ec))
    throw Error(CONVEYOR_E_NOT_FOUND,
                "sqlite database '" + path +
                    "' does not exist (storage option 'path'); `conveyor serve` or `conveyor "
                    "enqueue` creates it, or fix the path");
  int fd = ::open(path.c_str(), O_RDWR | (cfg.create ? O_CREAT : 0) | O_CLOEXEC, 0644);
  if (fd < 0) {
    int err = errno;
    throw Error(err == EISDIR || err == ENOENT || err == ENOTDIR ? CONVEYOR_E_INVALID
                                                                 : CONVEYOR_E_UNAVAILABLE,
                "sqlite: cannot open database file '" + path +
                    "' for reading and writing: " + os_error(err));
  }
  ::close(fd);
}

// The file a path names now; nullopt when there is none.
std::optional<FileId> file_id(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

}  // namespace

// ---------------------------------------------------------------------------

struct Conn {
  SQLite::Database db;
  std::array<std::unique_ptr<SQLite::Statement>, kStmtCount> stmts;

  Conn(const std::string& path, int flags, int busy_timeout_ms)
      : db(path, flags, busy_timeout_ms) {}

  SQLite::Statement& get(int which) {
    auto& slot = stmts[static_cast<size_t>(which)];
    if (!slot) slot = std::make_unique<SQLite::Statement>(db, kSql[static_cast<size_t>(which)]);
    return *slot;
  }

  void rollback_quietly() noexcept {
    sqlite3* h = db.getHandle();
    if (h != nullptr && sqlite3_get_autocommit(h) == 0)
      sqlite3_exec(h, "ROLLBACK", nullptr, nullptr, nullptr);
  }
};

namespace {

int64_t single_int(Conn& c, int which) {
  SQLite::Statement& st = c.get(which);
  Use u(st);
  return st.executeStep() ? st.getColumn(0).getInt64() : 0;
}

}  // namespace

Config parse_config(const sdk::Options& options) {
  options.require_known({"path", "busy_timeout_ms", "synchronous", "create"});
  Config cfg;
  if (!options.has("path") || options.get("path").empty())
    throw Error(CONVEYOR_E_INVALID, "storage option 'path' is required (the SQLite database file)");
  cfg.path = options.get("path");
  if (cfg.path == ":memory:" || cfg.path.rfind("file:", 0) == 0)
    throw Error(CONVEYOR_E_INVALID,
                "storage option 'path' must name a database file (several processes share "
                "it), not an in-memory database or a 'file:' URI: '" +
                    cfg.path + "'");
  if (cfg.path.find('\0') != std::string::npos)
    throw Error(CONVEYOR_E_INVALID, "storage option 'path' contains a NUL byte");
  if (options.has("busy_timeout_ms")) {
    std::string v = options.get("busy_timeout_ms");
    long long ms = -1;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
    if (ec != std::errc() || end != v.data() + v.size() || ms < 0 || ms > INT_MAX)
      throw Error(CONVEYOR_E_INVALID,
                  "storage option 'busy_timeout_ms' must be an integer in "
                  "[0, 2147483647], got '" +
                      v + "'");
    cfg.busy_timeout_ms = static_cast<int>(ms);
  }
  if (options.has("synchronous")) {
    std::string v = upper(options.get("synchronous"));
    if (v != "NORMAL" && v != "FULL" && v != "OFF")
      throw Error(CONVEYOR_E_INVALID,
                  "storage option 'synchronous' must be NORMAL, FULL or OFF, got '" +
                      options.get("synchronous") + "'");
    cfg.synchronous = v;
  }
  if (options.has("create")) {
    const std::string v = options.get("create");
    if (v != "true" && v != "false")
      throw Error(CONVEYOR_E_INVALID,
                  "storage option 'create' must be true or false, got '" + v + "'");
    cfg.create = v == "true";
  }
  return cfg;
}

SqliteStorage::SqliteStorage(Config config) : config_(std::move(config)) {}
SqliteStorage::~SqliteStorage() = default;

std::unique_ptr<SqliteStorage> SqliteStorage::open(const sdk::Options& options) {
  Config cfg = parse_config(options);
  prepare_path(cfg);
  std::unique_ptr<SqliteStorage> s(new SqliteStorage(std::move(cfg)));
  s->writer_ = s->open_conn(/*writer=*/true);
  // The file the connections use; later calls check the path still names it.
  const std::optional<FileId> id = file_id(s->config_.path);
  if (!id)
    throw Error(CONVEYOR_E_INVALID,
                "sqlite database '" + s->config_.path + "' disappeared while it was opened");
  s->file_ = *id;
  return s;
}

std::unique_ptr<Conn> SqliteStorage::open_conn(bool writer) {
  std::unique_ptr<Conn> c;
  try {
    // NOMUTEX: a connection is only ever used by one thread at a time (the
    // writer under writer_mu_, readers leased from the pool).
    c = std::make_unique<Conn>(config_.path, SQLite::OPEN_READWRITE | SQLite::OPEN_NOMUTEX,
                               config_.busy_timeout_ms);
  } catch (const SQLite::Exception& e) {
    throw translate(e, "open", config_.path);
  }
  if (writer) {
    with_busy_retry("open", [&] {
      try {
        SQLite::Statement mode(c->db, "PRAGMA journal_mode = WAL");
        std::string got = mode.executeStep() ? upper(mode.getColumn(0).getString()) : "";
        if (got != "WAL")
          throw Error(CONVEYOR_E_UNAVAILABLE, "sqlite: cannot switch '" + config_.path +
                                                  "' to WAL mode (journal_mode is '" + got +
                                                  "'); is it on a network file system?");
        // The value was checked against a fixed list in parse_config.
        c->db.exec("PRAGMA synchronous = " + config_.synchronous);
      } catch (const SQLite::Exception& e) {
        if (is_busy(e.getErrorCode())) throw;
        throw translate(e, "open", config_.path, c->db.getHandle());
      }
    });
  }
  return c;
}

template <typename Fn>
void SqliteStorage::with_busy_retry(const char* op, Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  auto backoff = std::chrono::microseconds(500);
  for (int attempt = 1;; ++attempt) {
    try {
      fn();
      return;
    } catch (const SQLite::Exception& e) {
      if (!is_busy(e.getErrorCode())) throw translate(e, op, config_.path);
      auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - start);
      if (attempt >= kMaxBusyAttempts || elapsed.count() >= config_.busy_timeout_ms)
        throw Error(CONVEYOR_E_UNAVAILABLE,
                    std::string("sqlite ") + op + " on '" + config_.path +
                        "': database is busy (locked by another connection or process) after " +
                        std::to_string(attempt) + " attempt(s) over " +
                        std::to_string(elapsed.count()) + " ms: " + e.what());
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::microseconds(50'000));
    }
  }
}

void SqliteStorage::check_file(const char* op) const {
  // One stat() per call: the open connections keep a removed or replaced file
  // alive, so writes would be acknowledged into a database nobody will see.
  const std::optional<FileId> now = file_id(config_.path);
  if (now && *now == file_) return;
  throw Error(CONVEYOR_E_INTERNAL,
              std::string("sqlite ") + op + ": database '" + config_.path + "' was " +
                  (now ? "replaced by another file" : "removed") +
                  " while this process had it open; nothing more is written to the old file. "
                  "Restore the file and restart Conveyor");
}

void SqliteStorage::check_header(const char* op, Conn& c) const {
  // Garbage written over the file in place keeps its inode, and the
  // connections' page caches hide it: read the header from the file itself
  // (through SQLite's own handle, one pread; opening and closing another
  // descriptor would drop SQLite's POSIX locks). Every file we keep open has
  // one: the writer switched it to WAL mode, which writes it.
  static constexpr char kMagic[] = "SQLite format 3";  // 16 bytes with its NUL
  sqlite3_file* file = nullptr;
  char header[sizeof kMagic] = {};
  if (sqlite3_file_control(c.db.getHandle(), "main", SQLITE_FCNTL_FILE_POINTER, &file) ==
          SQLITE_OK &&
      file != nullptr && file->pMethods != nullptr) {
    const int rc = file->pMethods->xRead(file, header, sizeof header, 0);
    if (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ) return;  // reported by the call
  }
  if (std::memcmp(header, kMagic, sizeof kMagic) == 0) return;
  throw Error(CONVEYOR_E_INTERNAL,
              std::string("sqlite ") + op + ": database '" + config_.path +
                  "' was overwritten (its header is no longer a SQLite database header) while "
                  "this process had it open; nothing more is written to it. Restore the file "
                  "from a backup and restart Conveyor");
}

template <typename Fn>
void SqliteStorage::write_txn(const char* op, Fn&& fn) {
  std::lock_guard<std::mutex> lock(writer_mu_);
  check_file(op);
  Conn& c = *writer_;
  check_header(op, c);
  with_busy_retry(op, [&] {
    try {
      {
        SQLite::Statement& begin = c.get(kBegin);
        Use u(begin);
        begin.exec();
      }
      fn(c);
      SQLite::Statement& commit = c.get(kCommit);
      Use u(commit);
      commit.exec();
    } catch (...) {
      c.rollback_quietly();
      throw;
    }
  });
}

std::unique_ptr<Conn> SqliteStorage::acquire_reader() {
  {
    std::lock_guard<std::mutex> lock(readers_mu_);
    if (!idle_readers_.empty()) {
      std::unique_ptr<Conn> c = std::move(idle_readers_.back());
      idle_readers_.pop_back();
      return c;
    }
  }
  return open_conn(/*writer=*/false);
}

void SqliteStorage::return_reader(std::unique_ptr<Conn> conn) noexcept {
  std::unique_ptr<Conn> drop;  // destroyed outside the lock
  {
    std::lock_guard<std::mutex> lock(readers_mu_);
    if (idle_readers_.size() < kMaxIdleReaders) {
      try {
        idle_readers_.push_back(std::move(conn));
      } catch (...) {
        drop = std::move(conn);
      }
    } else {
      drop = std::move(conn);
    }
  }
}

// Changes to job_counts made in one write transaction, applied with one
// upsert per (queue, state) at its end.
class FinalCounts {
 public:
  void add(std::string queue, int state, int64_t n) { delta_[{std::move(queue), state}] += n; }
  void apply(Conn& c) {
    SQLite::Statement& st = c.get(kAddCount);
    for (const auto& [key, n] : delta_) {
      if (n == 0) continue;
      Use u(st);
      bind_text(st, 1, key.first);
      st.bind(2, key.second);
      st.bind(3, static_cast<int64_t>(n));
      st.exec();
    }
    delta_.clear();
  }

 private:
  std::map<std::pair<std::string, int>, int64_t> delta_;
};

class ReaderLease {
 public:
  explicit ReaderLease(SqliteStorage& s) : s_(s), c_(s.acquire_reader()) {}
  ~ReaderLease() { s_.return_reader(std::move(c_)); }
  ReaderLease(const ReaderLease&) = delete;
  ReaderLease& operator=(const ReaderLease&) = delete;
  Conn& conn() { return *c_; }

 private:
  SqliteStorage& s_;
  std::unique_ptr<Conn> c_;
};

template <typename Fn>
void SqliteStorage::read(const char* op, Fn&& fn) {
  check_file(op);
  ReaderLease lease(*this);
  check_header(op, lease.conn());
  with_busy_retry(op, [&] { fn(lease.conn()); });
}

// ---------------------------------------------------------------------------

// A database Conveyor did not create (another application's file named by
// mistake) is refused, not filled with Conveyor's tables.
void SqliteStorage::check_schema_owner(Conn& c, int version) {
  std::vector<std::string> tables;
  {
    SQLite::Statement st(c.db,
                         "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                         "'sqlite_%' ORDER BY name");
    while (st.executeStep()) tables.push_back(st.getColumn(0).getString());
  }
  if (version == 0 && tables.empty()) return;  // a new database
  static constexpr const char* kOurs[] = {"jobs", "meta", "queues", "rate_limits"};  // since 1
  std::vector<std::string> missing;
  for (const char* t : kOurs)
    if (std::find(tables.begin(), tables.end(), t) == tables.end()) missing.emplace_back(t);
  if (version >= 1 && missing.empty()) return;
  std::string listed;
  for (size_t i = 0; i < tables.size() && i < 5; ++i) listed += (i ? ", " : "") + tables[i];
  if (tables.size() > 5) listed += ", ...";
  throw Error(CONVEYOR_E_INVALID,
              "sqlite database '" + config_.path + "' is not a Conveyor database (it has " +
                  (tables.empty() ? std::string("no tables") : "tables " + listed) +
                  " and schema version " + std::to_string(version) +
                  "): point storage option 'path' at a new file or at a Conveyor database");
}

void SqliteStorage::migrate() {
  write_txn("migrate", [&](Conn& c) {
    int version = 0;
    {
      SQLite::Statement& st = c.get(kUserVersion);
      Use u(st);
      if (st.executeStep()) version = st.getColumn(0).getInt();
    }
    if (version > kSchemaVersion)
      throw Error(CONVEYOR_E_INVALID,
                  "sqlite database '" + config_.path + "' has schema version " +
                      std::to_string(version) + ", newer than version " +
                      std::to_string(kSchemaVersion) +
                      " that this plugin (sqlite 0.1.0) knows; upgrade Conveyor");
    if (version < 0)
      throw Error(CONVEYOR_E_INVALID, "sqlite database '" + config_.path +
                                          "' has an invalid schema version " +
                                          std::to_string(version));
    check_schema_owner(c, version);
    for (int v = version; v < kSchemaVersion; ++v) c.db.exec(kMigrations[v]);
    if (version != kSchemaVersion)
      c.db.exec("PRAGMA user_version = " + std::to_string(kSchemaVersion));
  });
}

void SqliteStorage::enqueue(std::span<const conveyor_new_job> jobs, std::span<int64_t> out_ids) {
  insert_jobs(jobs, {}, wall_clock_us(), out_ids);
}

void SqliteStorage::enqueue_at(std::span<const conveyor_new_job> jobs, int64_t now_us,
                               std::span<int64_t> out_ids) {
  insert_jobs(jobs, {}, now_us, out_ids);
}

void SqliteStorage::enqueue_costed(std::span<const conveyor_new_job_v2> jobs, int64_t now_us,
                                   std::span<int64_t> out_ids) {
  std::vector<conveyor_new_job> plain;
  std::vector<int32_t> costs;
  plain.reserve(jobs.size());
  costs.reserve(jobs.size());
  for (const conveyor_new_job_v2& j : jobs) {
    plain.push_back(j.job);
    costs.push_back(j.cost);
  }
  insert_jobs(plain, costs, now_us, out_ids);
}

namespace {

// key's record, (0, 0) when never written.
sdk::SharedRecord read_shared(Conn& c, std::string_view key) {
  SQLite::Statement& st = c.get(kSharedGet);
  Use u(st);
  bind_text(st, 1, key);
  sdk::SharedRecord r;
  if (st.executeStep()) {
    r.version = st.getColumn(0).getInt64();
    r.value = st.getColumn(1).getInt64();
  }
  return r;
}

void write_shared(Conn& c, std::string_view key, int64_t version, int64_t value) {
  SQLite::Statement& put = c.get(kSharedPut);
  Use u(put);
  bind_text(put, 1, key);
  put.bind(2, static_cast<int64_t>(version));
  put.bind(3, static_cast<int64_t>(value));
  put.exec();
}

}  // namespace

sdk::SharedRecord SqliteStorage::swap_shared_state(std::string_view key, int64_t expected_version,
                                                   int64_t new_value) {
  sdk::SharedRecord r;
  if (expected_version < 0) {
    read("swap_shared_state", [&](Conn& c) { r = read_shared(c, key); });
    return r;
  }
  // BEGIN IMMEDIATE takes the file's write lock first: the read and the write
  // below are one step for every connection in every process.
  write_txn("swap_shared_state", [&](Conn& c) {
    r = read_shared(c, key);
    if (r.version != expected_version) return;
    write_shared(c, key, expected_version + 1, new_value);
    r = sdk::SharedRecord{expected_version + 1, new_value, true};
  });
  return r;
}

sdk::SharedAddResult SqliteStorage::add_shared_state(std::string_view key,
                                                     const sdk::SharedAdd& add) {
  sdk::SharedAddResult r;
  // One write transaction, as a swap: atomic across processes.
  write_txn("add_shared_state", [&](Conn& c) {
    const sdk::SharedRecord cur = read_shared(c, key);
    const sdk::SharedAddOutcome o = sdk::apply_shared_add(cur.value, add);
    r = sdk::SharedAddResult{cur.version, cur.value, 0};
    if (o.count == 0) return;
    write_shared(c, key, cur.version + 1, o.value);
    r = sdk::SharedAddResult{cur.version + 1, o.value, o.count};
  });
  return r;
}

void SqliteStorage::insert_jobs(std::span<const conveyor_new_job> jobs,
                                std::span<const int32_t> costs, int64_t created,
                                std::span<int64_t> out_ids) {
  for (size_t i = 0; i < jobs.size(); ++i) {
    const conveyor_new_job& j = jobs[i];
    const std::string where = "enqueue: job " + std::to_string(i) + ": ";
    if (sdk::view(j.queue).empty()) throw Error(CONVEYOR_E_INVALID, where + "queue is empty");
    if (sdk::view(j.kind).empty()) throw Error(CONVEYOR_E_INVALID, where + "kind is empty");
    if (j.max_attempts < 1)
      throw Error(CONVEYOR_E_INVALID,
                  where + "max_attempts must be >= 1, got " + std::to_string(j.max_attempts));
    if ((j.payload.data == nullptr && j.payload.len != 0) ||
        (j.queue.data == nullptr && j.queue.len != 0) ||
        (j.kind.data == nullptr && j.kind.len != 0))
      throw Error(CONVEYOR_E_INVALID, where + "NULL string with non-zero length");
    if (j.payload.len > static_cast<size_t>(INT_MAX))
      throw Error(CONVEYOR_E_INVALID, where + "payload larger than 2 GiB");
  }
  // The distinct queues of the batch, registered for list_queues.
  std::vector<std::string_view> queues;
  for (const conveyor_new_job& j : jobs) {
    std::string_view q = sdk::view(j.queue);
    if (queues.empty() || queues.back() != q) queues.push_back(q);
  }
  std::sort(queues.begin(), queues.end());
  queues.erase(std::unique(queues.begin(), queues.end()), queues.end());
  std::vector<int64_t> ids(jobs.size());
  write_txn("enqueue", [&](Conn& c) {
    // Each queue's free places, read once per batch and written back after.
    std::vector<PlaceBlock> blocks(queues.size());
    for (size_t q = 0; q < queues.size(); ++q) {
      {
        SQLite::Statement& reg = c.get(kRegisterQueue);
        Use u(reg);
        bind_text(reg, 1, queues[q]);
        reg.exec();
      }
      SQLite::Statement& st = c.get(kQueueBlock);
      Use u(st);
      bind_text(st, 1, queues[q]);
      if (st.executeStep()) blocks[q] = {st.getColumn(0).getInt64(), st.getColumn(1).getInt64()};
    }
    int64_t first_id = 0;
    {
      SQLite::Statement& st = c.get(kTakeIds);
      Use u(st);
      st.bind(1, static_cast<int64_t>(jobs.size()));
      if (!st.executeStep()) throw Error(CONVEYOR_E_INTERNAL, "enqueue: meta.last_job_id missing");
      first_id = st.getColumn(0).getInt64() - static_cast<int64_t>(jobs.size()) + 1;
    }
    SQLite::Statement& st = c.get(kInsertJob);
    for (size_t i = 0; i < jobs.size(); ++i) {
      const conveyor_new_job& j = jobs[i];
      PlaceBlock& block = blocks[static_cast<size_t>(
          std::lower_bound(queues.begin(), queues.end(), sdk::view(j.queue)) - queues.begin())];
      if (block.next_pos == block.end_pos) {
        const int64_t n = single_int(c, kTakeBlock);
        block.next_pos = n << kBlockBits;
        block.end_pos = (n + 1) << kBlockBits;
      }
      ids[i] = first_id + static_cast<int64_t>(i);
      Use u(st);
      st.bind(9, block.next_pos++);
      st.bind(10, ids[i]);
      bind_text(st, 1, sdk::view(j.queue));
      bind_text(st, 2, sdk::view(j.kind));
      bind_blob(st, 3, sdk::view(j.payload));
      st.bind(4, j.priority);
      st.bind(5, j.max_attempts);
      st.bind(6, static_cast<int64_t>(j.run_at_us));
      st.bind(7, static_cast<int64_t>(created));
      st.bind(8, costs.empty() ? 1 : costs[i]);
      st.exec();
    }
    SQLite::Statement& set = c.get(kSetQueueBlock);
    for (size_t q = 0; q < queues.size(); ++q) {
      Use u(set);
      bind_text(set, 1, queues[q]);
      set.bind(2, blocks[q].next_pos);
      set.bind(3, blocks[q].end_pos);
      set.exec();
    }
  });
  std::copy(ids.begin(), ids.end(), out_ids.begin());
}

uint32_t SqliteStorage::claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token,
                              int64_t now_us, int64_t lease_expires_us, const sdk::JobSink& sink) {
  require_queue(queue, "claim");
  if (max_jobs == 0) return 0;
  // Idle polling must not take the write lock (a CLI or another server may
  // want it): look on a reader first. Returning 0 when that snapshot shows
  // nothing ready is what a claim at that instant would have returned; the
  // write transaction below re-checks everything.
  bool any_ready = false;
  read("claim", [&](Conn& c) {
    SQLite::Statement& st = c.get(kAnyReady);
    Use u(st);
    bind_text(st, 1, queue);
    st.bind(2, static_cast<int64_t>(now_us));
    any_ready = st.executeStep() && st.getColumn(0).getInt() != 0;
  });
  if (!any_ready) return 0;
  std::vector<OwnedJob> claimed;
  write_txn("claim", [&](Conn& c) {
    claimed.clear();
    {
      SQLite::Statement& paused = c.get(kQueuePaused);
      Use u(paused);
      bind_text(paused, 1, queue);
      if (paused.executeStep() && paused.getColumn(0).getInt64() != 0) return;
    }
    SQLite::Statement& st = c.get(kClaim);
    Use u(st);
    st.bind(1, static_cast<int64_t>(lease_token));
    st.bind(2, static_cast<int64_t>(lease_expires_us));
    bind_text(st, 3, queue);
    st.bind(4, static_cast<int64_t>(now_us));
    st.bind(5, static_cast<int64_t>(max_jobs));
    claimed.reserve(std::min<uint32_t>(max_jobs, 1024));
    const uint32_t qi = queue_index(queue);
    while (st.executeStep()) {
      OwnedJob& j = claimed.emplace_back();
      j.id = st.getColumn(0).getInt64();
      remember_claimed(j.id, qi, st.getColumn(10).getInt64());
      j.kind = column_text(st, 1);
      j.payload = column_blob(st, 2);
      j.priority = st.getColumn(3).getInt();
      j.attempt = st.getColumn(4).getInt();
      j.max_attempts = st.getColumn(5).getInt();
      j.run_at = st.getColumn(6).getInt64();
      j.created_at = st.getColumn(7).getInt64();
      j.last_error = column_text(st, 8);
      j.cost = st.getColumn(9).getInt();
    }
  });
  // RETURNING does not promise an order: report in claim order.
  std::sort(claimed.begin(), claimed.end(), [](const OwnedJob& a, const OwnedJob& b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.run_at != b.run_at) return a.run_at < b.run_at;
    return a.id < b.id;
  });
  for (OwnedJob& j : claimed) {
    j.state = CONVEYOR_JOB_RUNNING;
    j.queue.assign(queue);
    j.lease_token = lease_token;
    j.lease_expires = lease_expires_us;
    j.finalized_at = 0;
    conveyor_job v = j.view();
    sink(v);
  }
  return static_cast<uint32_t>(claimed.size());
}

template <typename Bind>
void SqliteStorage::per_lease(const char* op, int stmt, std::span<const conveyor_lease> leases,
                              std::span<conveyor_status> results, Bind&& bind) {
  std::vector<conveyor_status> out(leases.size(), CONVEYOR_E_LEASE_LOST);
  write_txn(op, [&](Conn& c) {
    SQLite::Statement& st = c.get(stmt);
    for (size_t i = 0; i < leases.size(); ++i) {
      Use u(st);
      bind(st, leases[i]);
      out[i] = st.exec() > 0 ? CONVEYOR_OK : CONVEYOR_E_LEASE_LOST;
    }
  });
  std::copy(out.begin(), out.end(), results.begin());
}

void SqliteStorage::complete(std::span<const conveyor_lease> leases, int64_t now_us,
                             std::span<conveyor_status> results) {
  std::vector<conveyor_status> out(leases.size(), CONVEYOR_E_LEASE_LOST);
  write_txn("complete", [&](Conn& c) {
    std::fill(out.begin(), out.end(), CONVEYOR_E_LEASE_LOST);
    // Jobs this handle claimed are completed by place, one statement per
    // lease token (a claim's batch shares one); the others one by one, by id.
    // Per token: place -> the lease's index and its claimed_ entry (a job
    // listed twice completes once; an entry is erased once its job is).
    struct Known {
      size_t index;
      decltype(claimed_)::iterator entry;
    };
    std::map<int64_t, std::unordered_map<int64_t, Known>> by_token;
    std::vector<size_t> unknown;
    for (size_t i = 0; i < leases.size(); ++i) {
      const auto known = claimed_.find(leases[i].job_id);
      if (known == claimed_.end())
        unknown.push_back(i);
      else
        by_token[leases[i].lease_token].try_emplace(known->second.pos, Known{i, known});
    }
    // Erased even if this transaction is retried or fails: a retry then
    // completes and counts those jobs as unknown ones.
    std::vector<int64_t> per_queue(queue_names_.size(), 0);
    SQLite::Statement& at = c.get(kCompleteAtPlaces);
    std::string places;
    for (const auto& [token, known_at] : by_token) {
      places = "[";
      for (const auto& entry : known_at) {
        if (places.size() > 1) places += ',';
        places += std::to_string(entry.first);
      }
      places += ']';
      Use u(at);
      at.bind(1, static_cast<int64_t>(now_us));
      bind_text(at, 2, places);
      at.bind(3, static_cast<int64_t>(token));
      while (at.executeStep()) {
        const Known& k = known_at.at(at.getColumn(0).getInt64());
        out[k.index] = CONVEYOR_OK;
        ++per_queue[k.entry->second.queue];
        claimed_.erase(k.entry);
      }
    }
    // The ids whose queue this handle does not know, a JSON array for
    // kCountCompleted.
    std::string completed = "[";
    SQLite::Statement& st = c.get(kComplete);
    for (size_t i : unknown) {
      Use u(st);
      st.bind(1, static_cast<int64_t>(now_us));
      st.bind(2, static_cast<int64_t>(leases[i].job_id));
      st.bind(3, static_cast<int64_t>(leases[i].lease_token));
      if (st.exec() == 0) continue;
      out[i] = CONVEYOR_OK;
      if (completed.size() > 1) completed += ',';
      completed += std::to_string(leases[i].job_id);
    }
    {
      SQLite::Statement& add = c.get(kAddCount);
      for (size_t q = 0; q < per_queue.size(); ++q) {
        if (per_queue[q] == 0) continue;
        Use u(add);
        bind_text(add, 1, queue_names_[q]);
        add.bind(2, CONVEYOR_JOB_COMPLETED);
        add.bind(3, static_cast<int64_t>(per_queue[q]));
        add.exec();
      }
    }
    if (completed.size() > 1) {
      // One statement per batch: RETURNING queue on each UPDATE cost drain 30%.
      completed += ']';
      SQLite::Statement& count = c.get(kCountCompleted);
      Use u(count);
      bind_text(count, 1, completed);
      count.exec();
    }
  });
  std::copy(out.begin(), out.end(), results.begin());
}

uint32_t SqliteStorage::queue_index(std::string_view queue) {
  if (claimed_.size() >= kMaxClaimed) {  // bounded memory; misses are counted in SQL
    claimed_.clear();
    queue_names_.clear();
    queue_ids_.clear();
  }
  auto [it, added] =
      queue_ids_.try_emplace(std::string(queue), static_cast<uint32_t>(queue_names_.size()));
  if (added) queue_names_.emplace_back(queue);
  return it->second;
}

void SqliteStorage::remember_claimed(int64_t job_id, uint32_t queue, int64_t pos) {
  claimed_[job_id] = ClaimedPlace{queue, pos};
}

void SqliteStorage::extend_leases(std::span<const conveyor_lease> leases, int64_t lease_expires_us,
                                  std::span<conveyor_status> results) {
  per_lease("extend_leases", kExtend, leases, results,
            [&](SQLite::Statement& st, const conveyor_lease& l) {
              st.bind(1, static_cast<int64_t>(lease_expires_us));
              st.bind(2, static_cast<int64_t>(l.job_id));
              st.bind(3, static_cast<int64_t>(l.lease_token));
            });
}

void SqliteStorage::release(std::span<const conveyor_lease> leases, int64_t now_us,
                            std::span<conveyor_status> results) {
  per_lease("release", kRelease, leases, results,
            [&](SQLite::Statement& st, const conveyor_lease& l) {
              st.bind(1, static_cast<int64_t>(now_us));
              st.bind(2, static_cast<int64_t>(l.job_id));
              st.bind(3, static_cast<int64_t>(l.lease_token));
            });
}

void SqliteStorage::fail(conveyor_lease lease, std::string_view error_text, int64_t retry_at_us,
                         int64_t now_us) {
  int changed = 0;
  write_txn("fail", [&](Conn& c) {
    const bool retry = retry_at_us >= 0;
    SQLite::Statement& st = c.get(retry ? kFailRetry : kFailFinal);
    Use u(st);
    st.bind(1, static_cast<int64_t>(retry ? retry_at_us : now_us));
    bind_text(st, 2, error_text);
    st.bind(3, static_cast<int64_t>(lease.job_id));
    st.bind(4, static_cast<int64_t>(lease.lease_token));
    changed = 0;
    if (!st.executeStep()) return;
    changed = 1;
    claimed_.erase(lease.job_id);
    if (!retry) {
      FinalCounts counts;
      counts.add(column_text(st, 0), CONVEYOR_JOB_FAILED, 1);
      counts.apply(c);
    }
  });
  if (changed == 0)
    throw Error(CONVEYOR_E_LEASE_LOST, "fail: job " + std::to_string(lease.job_id) +
                                           " is not running under lease token " +
                                           std::to_string(lease.lease_token));
}

uint32_t SqliteStorage::rescue_expired(int64_t now_us, uint32_t max_jobs) {
  return rescue(now_us, max_jobs, nullptr);
}

uint32_t SqliteStorage::rescue_expired_v2(int64_t now_us, uint32_t max_jobs,
                                          const sdk::JobSink& sink) {
  return rescue(now_us, max_jobs, &sink);
}

uint32_t SqliteStorage::rescue(int64_t now_us, uint32_t max_jobs, const sdk::JobSink* sink) {
  if (max_jobs == 0) return 0;
  std::vector<OwnedJob> rescued;
  write_txn("rescue_expired", [&](Conn& c) {
    SQLite::Statement& st = c.get(kRescue);
    Use u(st);
    st.bind(1, static_cast<int64_t>(now_us));
    bind_text(st, 2, kLeaseExpiredError);
    st.bind(3, static_cast<int64_t>(max_jobs));
    rescued.clear();
    FinalCounts counts;
    while (st.executeStep()) {
      OwnedJob& j = rescued.emplace_back(job_from_row(st, now_us));
      if (j.state >= CONVEYOR_JOB_COMPLETED) counts.add(j.queue, j.state, 1);
    }
    counts.apply(c);
  });
  if (sink != nullptr) {
    // RETURNING does not promise an order: report in rescue order.
    std::sort(rescued.begin(), rescued.end(),
              [](const OwnedJob& a, const OwnedJob& b) { return a.id < b.id; });
    for (const OwnedJob& j : rescued) {
      conveyor_job v = j.view();
      (*sink)(v);
    }
  }
  return static_cast<uint32_t>(rescued.size());
}

void SqliteStorage::cancel(int64_t job_id, int64_t now_us) {
  int changed = 0;
  write_txn("cancel", [&](Conn& c) {
    SQLite::Statement& st = c.get(kCancel);
    Use u(st);
    st.bind(1, static_cast<int64_t>(now_us));
    st.bind(2, static_cast<int64_t>(job_id));
    changed = 0;
    if (!st.executeStep()) return;
    changed = 1;
    FinalCounts counts;
    counts.add(column_text(st, 0), CONVEYOR_JOB_CANCELLED, 1);
    counts.apply(c);
  });
  if (changed == 0)
    throw Error(CONVEYOR_E_NOT_FOUND,
                "cancel: job " + std::to_string(job_id) + " does not exist or is already final");
}

void SqliteStorage::set_queue_paused(std::string_view queue, bool paused, int64_t /*now_us*/) {
  require_queue(queue, "set_queue_paused");
  write_txn("set_queue_paused", [&](Conn& c) {
    {
      SQLite::Statement& st = c.get(kUpsertQueue);
      Use u(st);
      bind_text(st, 1, queue);
      st.bind(2, paused ? 1 : 0);
      st.exec();
    }
    SQLite::Statement& bump = c.get(kBumpMarker);
    Use u(bump);
    bump.exec();
  });
}

void SqliteStorage::queue_stats(int64_t now_us, const sdk::QueueStatsSink& sink) {
  std::vector<QueueRow> rows;
  read("queue_stats", [&](Conn& c) {
    rows.clear();
    SQLite::Statement& st = c.get(kQueueStats);
    Use u(st);
    st.bind(1, static_cast<int64_t>(now_us));
    while (st.executeStep()) {
      QueueRow& r = rows.emplace_back();
      r.queue = column_text(st, 0);
      r.paused = st.getColumn(1).getInt64() != 0;
      for (int i = 0; i < 6; ++i) r.counts[i] = st.getColumn(2 + i).getInt64();
      r.oldest_pending_run_at = st.getColumn(8).getInt64();
    }
  });
  for (const QueueRow& r : rows) sink(r.view());
}

void SqliteStorage::list_queues(const sdk::QueueSink& sink) {
  std::vector<std::pair<std::string, bool>> rows;
  read("list_queues", [&](Conn& c) {
    rows.clear();
    SQLite::Statement& st = c.get(kListQueues);
    Use u(st);
    while (st.executeStep()) rows.emplace_back(column_text(st, 0), st.getColumn(1).getInt64() != 0);
  });
  for (const auto& [name, paused] : rows) sink(name, paused);
}

void SqliteStorage::get_job(int64_t job_id, int64_t now_us, const sdk::JobSink& sink) {
  bool found = false;
  OwnedJob j;
  read("get_job", [&](Conn& c) {
    SQLite::Statement& st = c.get(kGetJob);
    Use u(st);
    st.bind(1, static_cast<int64_t>(job_id));
    found = st.executeStep();
    if (!found) return;
    j.id = st.getColumn(0).getInt64();
    j.queue = column_text(st, 1);
    j.kind = column_text(st, 2);
    j.payload = column_blob(st, 3);
    j.priority = st.getColumn(4).getInt();
    j.state = st.getColumn(5).getInt();
    j.attempt = st.getColumn(6).getInt();
    j.max_attempts = st.getColumn(7).getInt();
    j.run_at = st.getColumn(8).getInt64();
    j.created_at = st.getColumn(9).getInt64();
    j.finalized_at = st.getColumn(10).getInt64();
    j.lease_token = st.getColumn(11).getInt64();
    j.lease_expires = st.getColumn(12).getInt64();
    j.last_error = column_text(st, 13);
    j.cost = st.getColumn(14).getInt();
  });
  if (!found)
    throw Error(CONVEYOR_E_NOT_FOUND, "get_job: job " + std::to_string(job_id) + " not found");
  if (j.state == kAvailable && j.run_at > now_us) j.state = CONVEYOR_JOB_SCHEDULED;
  if (j.state != kRunning) {
    j.lease_token = 0;
    j.lease_expires = 0;
  }
  conveyor_job v = j.view();
  sink(v);
}

uint64_t SqliteStorage::purge_finished(int64_t finalized_before_us, uint32_t max_jobs) {
  if (max_jobs == 0) return 0;
  int changed = 0;
  write_txn("purge_finished", [&](Conn& c) {
    SQLite::Statement& st = c.get(kPurge);
    Use u(st);
    st.bind(1, static_cast<int64_t>(finalized_before_us));
    st.bind(2, static_cast<int64_t>(max_jobs));
    changed = st.exec();
  });
  return static_cast<uint64_t>(changed);
}

void SqliteStorage::set_rate_limit(std::string_view queue, double rate_per_sec, uint32_t burst,
                                   int64_t now_us) {
  set_rate_limit_scoped(queue, rate_per_sec, burst, CONVEYOR_SCOPE_PROCESS, now_us);
}

void SqliteStorage::set_rate_limit_scoped(std::string_view queue, double rate_per_sec,
                                          uint32_t burst, int32_t scope, int64_t now_us) {
  require_queue(queue, "set_rate_limit");
  if (!(rate_per_sec > 0) || !std::isfinite(rate_per_sec))
    throw Error(CONVEYOR_E_INVALID, "set_rate_limit: rate_per_sec must be > 0 and finite");
  if (burst < 1) throw Error(CONVEYOR_E_INVALID, "set_rate_limit: burst must be >= 1");
  write_txn("set_rate_limit", [&](Conn& c) {
    {
      SQLite::Statement& st = c.get(kUpsertRateLimit);
      Use u(st);
      bind_text(st, 1, queue);
      st.bind(2, rate_per_sec);
      st.bind(3, static_cast<int64_t>(burst));
      st.bind(4, static_cast<int64_t>(now_us));
      st.bind(5, scope);
      st.exec();
    }
    SQLite::Statement& bump = c.get(kBumpMarker);
    Use u(bump);
    bump.exec();
  });
}

void SqliteStorage::delete_rate_limit(std::string_view queue) {
  require_queue(queue, "delete_rate_limit");
  int changed = 0;
  write_txn("delete_rate_limit", [&](Conn& c) {
    {
      SQLite::Statement& st = c.get(kDeleteRateLimit);
      Use u(st);
      bind_text(st, 1, queue);
      changed = st.exec();
    }
    if (changed == 0) return;
    SQLite::Statement& bump = c.get(kBumpMarker);
    Use u(bump);
    bump.exec();
  });
  if (changed == 0)
    throw Error(CONVEYOR_E_NOT_FOUND,
                "delete_rate_limit: queue '" + std::string(queue) + "' has no rate-limit override");
}

void SqliteStorage::list_rate_limits(const sdk::RateLimitSink& sink) {
  std::vector<sdk::OwnedRateLimit> rows;
  read("list_rate_limits", [&](Conn& c) {
    rows.clear();
    SQLite::Statement& st = c.get(kListRateLimits);
    Use u(st);
    while (st.executeStep())
      rows.push_back(sdk::OwnedRateLimit{column_text(st, 0), st.getColumn(1).getDouble(),
                                         st.getColumn(2).getInt64(), st.getColumn(3).getInt64(),
                                         st.getColumn(4).getInt()});
  });
  for (const sdk::OwnedRateLimit& r : rows) sink(r.view());
}

int64_t SqliteStorage::change_marker() {
  int64_t marker = 0;
  read("change_marker", [&](Conn& c) {
    SQLite::Statement& st = c.get(kGetMarker);
    Use u(st);
    marker = st.executeStep() ? st.getColumn(0).getInt64() : 0;
  });
  return marker;
}

// ---- notifications ----------------------------------------------------------

void SqliteStorage::look_for_changes(std::vector<std::pair<int32_t, std::string>>& found) {
  if (!watch_.conn) watch_.conn = open_conn(/*writer=*/false);
  Conn& c = *watch_.conn;
  const int64_t version = single_int(c, kDataVersion);
  if (version == watch_.data_version) return;
  // Read after the version: a commit in between is reported now and again
  // looked at (finding nothing new) on the next change.
  const int64_t last_id = single_int(c, kLastJobId);
  const int64_t marker = single_int(c, kGetMarker);
  const bool first = watch_.data_version < 0;  // the first look only learns the state
  if (!first && last_id > watch_.last_id) {
    SQLite::Statement& st = c.get(kQueuesOfJobsAfter);
    Use u(st);
    st.bind(1, static_cast<int64_t>(watch_.last_id));
    st.bind(2, static_cast<int64_t>(last_id));
    while (st.executeStep()) found.emplace_back(CONVEYOR_NOTIFY_JOBS, st.getColumn(0).getString());
  }
  // The paused flags are read again only when the marker moved (rare).
  std::optional<std::unordered_map<std::string, bool>> paused;
  if (first || marker != watch_.marker) {
    paused.emplace();
    SQLite::Statement& st = c.get(kQueueStates);
    Use u(st);
    while (st.executeStep())
      paused->emplace(st.getColumn(0).getString(), st.getColumn(1).getInt() != 0);
  }
  if (!first && paused) {
    found.emplace_back(CONVEYOR_NOTIFY_RATE_LIMITS, "");
    for (const auto& [queue, is_paused] : *paused) {
      // A queue first seen unpaused was enqueued into (JOBS says so).
      auto before = watch_.paused.find(queue);
      if (before == watch_.paused.end() ? is_paused : before->second != is_paused)
        found.emplace_back(CONVEYOR_NOTIFY_QUEUE_STATE, queue);
    }
  }
  // Only now, so that a look run again after SQLITE_BUSY starts from the same state.
  watch_.data_version = version;
  watch_.last_id = std::max(watch_.last_id, last_id);
  watch_.marker = marker;
  if (paused) watch_.paused = std::move(*paused);
}

SqliteStorage::Watch::~Watch() {
  if (inotify_fd >= 0) ::close(inotify_fd);
}

bool SqliteStorage::wait_for_wal_write(std::chrono::steady_clock::time_point until) {
  if (watch_.inotify_fd < 0) {
    watch_.inotify_fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (watch_.inotify_fd < 0) return true;
  }
  if (!watch_.wal_watched) {
    // The -wal file exists while a connection (the watch's own) is open.
    if (::inotify_add_watch(watch_.inotify_fd, (config_.path + "-wal").c_str(),
                            IN_MODIFY | IN_DELETE_SELF | IN_MOVE_SELF) < 0)
      return true;
    watch_.wal_watched = true;
  }
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  pollfd p{watch_.inotify_fd, POLLIN, 0};
  const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
  if (ready == 0) return false;
  if (ready < 0) return true;  // EINTR: look, to be safe
  // Drain the events: one look covers them all.
  alignas(inotify_event) char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(watch_.inotify_fd, buf, sizeof buf)) > 0) {
    for (ssize_t at = 0; at < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
      if ((e->mask & IN_IGNORED) != 0) watch_.wal_watched = false;  // the file went away
      at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
    }
  }
  return true;
}

void SqliteStorage::wait_for_notification(int64_t timeout_us, const sdk::NotifySink& sink) {
  using std::chrono::steady_clock;
  std::vector<std::pair<int32_t, std::string>> found;
  {
    std::lock_guard lock(watch_mu_);
    check_file("wait_for_notification");
    const steady_clock::time_point deadline =
        steady_clock::now() + std::chrono::microseconds(std::max<int64_t>(0, timeout_us));
    bool written = !watch_.conn;  // the first call looks at once
    for (;;) {
      const steady_clock::time_point now = steady_clock::now();
      if (written || now - watch_.looked >= kFullLookEvery) {
        with_busy_retry("wait_for_notification", [&] {
          found.clear();
          look_for_changes(found);
        });
        watch_.looked = now;
      }
      if (!found.empty() || steady_clock::now() >= deadline) break;
      // At least kLookGap after this look, at most until the next full look.
      std::this_thread::sleep_until(std::min(deadline, watch_.looked + kLookGap));
      written = wait_for_wal_write(std::min(deadline, watch_.looked + kFullLookEvery));
    }
  }
  for (const auto& [kind, queue] : found) sink(kind, queue);
}

// ---- ABI 1.1 ----------------------------------------------------------------

namespace {

OwnedJob job_from_row(const SQLite::Statement& st, int64_t now_us) {
  OwnedJob j;
  j.id = st.getColumn(0).getInt64();
  j.queue = column_text(st, 1);
  j.kind = column_text(st, 2);
  j.payload = column_blob(st, 3);
  j.priority = st.getColumn(4).getInt();
  j.state = st.getColumn(5).getInt();
  j.attempt = st.getColumn(6).getInt();
  j.max_attempts = st.getColumn(7).getInt();
  j.run_at = st.getColumn(8).getInt64();
  j.created_at = st.getColumn(9).getInt64();
  j.finalized_at = st.getColumn(10).getInt64();
  j.lease_token = st.getColumn(11).getInt64();
  j.lease_expires = st.getColumn(12).getInt64();
  j.last_error = column_text(st, 13);
  j.cost = st.getColumn(14).getInt();
  if (j.state == kAvailable && j.run_at > now_us) j.state = CONVEYOR_JOB_SCHEDULED;
  if (j.state != kRunning) {
    j.lease_token = 0;
    j.lease_expires = 0;
  }
  return j;
}

// One index range of list_jobs: a stored state and the run_at bounds that
// split AVAILABLE (run_at <= now) from SCHEDULED (run_at > now).
struct ListRange {
  int stored_state;
  int64_t run_at_min;
  int64_t run_at_max;
};

std::vector<ListRange> list_ranges(std::span<const int32_t> states, int64_t now_us) {
  bool want[7] = {};
  if (states.empty())
    for (int s = 1; s <= 6; ++s) want[s] = true;
  for (int32_t s : states) want[s] = true;  // 1..6, checked by the adapter
  std::vector<ListRange> ranges;
  const int64_t lo = INT64_MIN, hi = INT64_MAX;
  if (want[CONVEYOR_JOB_AVAILABLE] && want[CONVEYOR_JOB_SCHEDULED])
    ranges.push_back({kAvailable, lo, hi});
  else if (want[CONVEYOR_JOB_AVAILABLE])
    ranges.push_back({kAvailable, lo, now_us});
  else if (want[CONVEYOR_JOB_SCHEDULED])
    ranges.push_back({kAvailable, now_us == hi ? hi : now_us + 1, hi});
  for (int s :
       {CONVEYOR_JOB_RUNNING, CONVEYOR_JOB_COMPLETED, CONVEYOR_JOB_FAILED, CONVEYOR_JOB_CANCELLED})
    if (want[s]) ranges.push_back({s, lo, hi});
  return ranges;
}

}  // namespace

namespace {

// The first `limit` ids after after_id of a queue's final jobs in one state:
// one jobs_list range per kind (the given one, or each of the queue's kinds
// in turn), each read only below the limit-th id found so far.
void final_ids(Conn& c, std::string_view queue, int state, std::string_view kind, int64_t after_id,
               uint32_t limit, std::vector<int64_t>& ids) {
  SQLite::Statement& range = c.get(kListFinalIds);
  SQLite::Statement& next = c.get(kNextFinalKind);
  std::vector<int64_t> found;  // sorted, at most limit
  auto read_kind = [&](std::string_view k) {
    const int64_t below = found.size() < limit ? INT64_MAX : found.back();
    Use u(range);
    bind_text(range, 1, queue);
    range.bind(2, state);
    bind_text(range, 3, k);
    range.bind(4, static_cast<int64_t>(after_id));
    range.bind(5, static_cast<int64_t>(below));
    range.bind(6, static_cast<int64_t>(limit));
    std::vector<int64_t> merged;
    std::vector<int64_t> mine;
    while (range.executeStep()) mine.push_back(range.getColumn(0).getInt64());
    std::merge(found.begin(), found.end(), mine.begin(), mine.end(), std::back_inserter(merged));
    if (merged.size() > limit) merged.resize(limit);
    found.swap(merged);
  };
  if (!kind.empty()) {
    read_kind(kind);
  } else {
    std::string k;  // kinds are never empty: '' sorts before every kind
    for (;;) {
      {
        Use u(next);
        bind_text(next, 1, queue);
        next.bind(2, state);
        bind_text(next, 3, k);
        if (!next.executeStep()) break;
        k = column_text(next, 0);
      }
      read_kind(k);
    }
  }
  ids.insert(ids.end(), found.begin(), found.end());
}

}  // namespace

uint32_t SqliteStorage::list_jobs(std::string_view queue, std::span<const int32_t> states,
                                  std::string_view kind, int64_t after_id, uint32_t limit,
                                  int64_t now_us, const sdk::JobSink& sink) {
  const std::vector<ListRange> ranges = list_ranges(states, now_us);
  std::vector<OwnedJob> jobs;
  read("list_jobs", [&](Conn& c) {
    jobs.clear();
    std::vector<int64_t> final;  // ids, read below
    // Each range in id order, at most limit each; merged below.
    for (const ListRange& r : ranges) {
      if (r.stored_state >= CONVEYOR_JOB_COMPLETED) {
        final_ids(c, queue, r.stored_state, kind, after_id, limit, final);
        continue;
      }
      SQLite::Statement& st = c.get(r.stored_state == kAvailable ? kListAvailable : kListRunning);
      Use u(st);
      bind_text(st, 1, queue);
      st.bind(2, static_cast<int64_t>(after_id));
      st.bind(3, static_cast<int64_t>(r.run_at_min));
      st.bind(4, static_cast<int64_t>(r.run_at_max));
      st.bind(5, static_cast<int64_t>(limit));
      bind_text(st, 6, kind);
      while (st.executeStep()) jobs.push_back(job_from_row(st, now_us));
    }
    // The final jobs' rows, by primary key (only the ones that can be listed).
    std::sort(final.begin(), final.end());
    if (final.size() > limit) final.resize(limit);
    SQLite::Statement& get = c.get(kGetJob);
    for (int64_t id : final) {
      Use u(get);
      get.bind(1, static_cast<int64_t>(id));
      if (get.executeStep()) jobs.push_back(job_from_row(get, now_us));
    }
  });
  std::sort(jobs.begin(), jobs.end(),
            [](const OwnedJob& a, const OwnedJob& b) { return a.id < b.id; });
  if (jobs.size() > limit) jobs.resize(limit);
  for (const OwnedJob& j : jobs) {
    conveyor_job v = j.view();
    sink(v);
  }
  return static_cast<uint32_t>(jobs.size());
}

uint32_t SqliteStorage::claim_kinds(std::string_view queue, std::span<const std::string_view> kinds,
                                    uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                                    int64_t lease_expires_us, const sdk::JobSink& sink) {
  require_queue(queue, "claim_kinds");
  if (max_jobs == 0) return 0;
  std::vector<std::string_view> wanted(kinds.begin(), kinds.end());
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  struct Candidate {
    int64_t id;
    int64_t priority;
    int64_t run_at;
  };
  // The first max_jobs ready jobs of the wanted kinds in claim order: the
  // first max_jobs of each kind (one jobs_claim_kind range each), merged.
  auto candidates = [&](Conn& c) {
    std::vector<Candidate> out;
    SQLite::Statement& st = c.get(kClaimKindCandidates);
    for (std::string_view k : wanted) {
      Use u(st);
      bind_text(st, 1, queue);
      bind_text(st, 2, k);
      st.bind(3, static_cast<int64_t>(now_us));
      st.bind(4, static_cast<int64_t>(max_jobs));
      while (st.executeStep())
        out.push_back(
            {st.getColumn(0).getInt64(), st.getColumn(1).getInt64(), st.getColumn(2).getInt64()});
    }
    std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
      if (a.priority != b.priority) return a.priority < b.priority;
      if (a.run_at != b.run_at) return a.run_at < b.run_at;
      return a.id < b.id;
    });
    if (out.size() > max_jobs) out.resize(max_jobs);
    return out;
  };
  // As claim: look on a reader first so idle polling never takes the write lock.
  bool any_ready = false;
  read("claim_kinds", [&](Conn& c) {
    {
      SQLite::Statement& paused = c.get(kQueuePaused);
      Use u(paused);
      bind_text(paused, 1, queue);
      if (paused.executeStep() && paused.getColumn(0).getInt64() != 0) return;
    }
    any_ready = !candidates(c).empty();
  });
  if (!any_ready) return 0;
  std::vector<OwnedJob> claimed;
  write_txn("claim_kinds", [&](Conn& c) {
    claimed.clear();
    {
      SQLite::Statement& paused = c.get(kQueuePaused);
      Use u(paused);
      bind_text(paused, 1, queue);
      if (paused.executeStep() && paused.getColumn(0).getInt64() != 0) return;
    }
    const std::vector<Candidate> picked = candidates(c);
    const uint32_t qi = queue_index(queue);
    SQLite::Statement& st = c.get(kClaimOne);
    for (const Candidate& cand : picked) {
      Use u(st);
      st.bind(1, static_cast<int64_t>(lease_token));
      st.bind(2, static_cast<int64_t>(lease_expires_us));
      st.bind(3, static_cast<int64_t>(cand.id));
      while (st.executeStep()) {
        OwnedJob& j = claimed.emplace_back();
        j.id = st.getColumn(0).getInt64();
        remember_claimed(j.id, qi, st.getColumn(10).getInt64());
        j.kind = column_text(st, 1);
        j.payload = column_blob(st, 2);
        j.priority = st.getColumn(3).getInt();
        j.attempt = st.getColumn(4).getInt();
        j.max_attempts = st.getColumn(5).getInt();
        j.run_at = st.getColumn(6).getInt64();
        j.created_at = st.getColumn(7).getInt64();
        j.last_error = column_text(st, 8);
      }
    }
  });
  for (OwnedJob& j : claimed) {  // already in claim order
    j.state = CONVEYOR_JOB_RUNNING;
    j.queue.assign(queue);
    j.lease_token = lease_token;
    j.lease_expires = lease_expires_us;
    j.finalized_at = 0;
    conveyor_job v = j.view();
    sink(v);
  }
  return static_cast<uint32_t>(claimed.size());
}

void SqliteStorage::retry_jobs(std::span<const int64_t> ids, int64_t now_us,
                               std::span<conveyor_status> results) {
  std::vector<conveyor_status> out(ids.size(), CONVEYOR_E_NOT_FOUND);
  write_txn("retry_jobs", [&](Conn& c) {
    FinalCounts counts;
    SQLite::Statement& st = c.get(kRetryJob);
    SQLite::Statement& exists = c.get(kJobExists);
    for (size_t i = 0; i < ids.size(); ++i) {
      // The job's queue and state before the change (job_counts loses it).
      std::string queue;
      int state = 0;
      {
        Use u(exists);
        exists.bind(1, static_cast<int64_t>(ids[i]));
        if (!exists.executeStep()) {
          out[i] = CONVEYOR_E_NOT_FOUND;
          continue;
        }
        queue = column_text(exists, 0);
        state = exists.getColumn(1).getInt();
      }
      Use u(st);
      st.bind(1, static_cast<int64_t>(now_us));
      st.bind(2, static_cast<int64_t>(ids[i]));
      if (st.exec() > 0) {
        out[i] = CONVEYOR_OK;
        counts.add(std::move(queue), state, -1);
      } else {
        out[i] = CONVEYOR_E_WRONG_STATE;
      }
    }
    counts.apply(c);
  });
  std::copy(out.begin(), out.end(), results.begin());
}

void SqliteStorage::delete_jobs(std::span<const int64_t> ids, std::span<conveyor_status> results) {
  std::vector<conveyor_status> out(ids.size(), CONVEYOR_E_NOT_FOUND);
  write_txn("delete_jobs", [&](Conn& c) {
    SQLite::Statement& st = c.get(kDeleteJob);
    SQLite::Statement& exists = c.get(kJobExists);
    for (size_t i = 0; i < ids.size(); ++i) {
      int changed = 0;
      {
        Use u(st);
        st.bind(1, static_cast<int64_t>(ids[i]));
        changed = st.exec();
      }
      if (changed > 0) {
        out[i] = CONVEYOR_OK;
        continue;
      }
      Use u(exists);
      exists.bind(1, static_cast<int64_t>(ids[i]));
      out[i] = exists.executeStep() ? CONVEYOR_E_WRONG_STATE : CONVEYOR_E_NOT_FOUND;
    }
  });
  std::copy(out.begin(), out.end(), results.begin());
}

void SqliteStorage::job_counts(int64_t now_us, const sdk::QueueStatsSink& sink) {
  std::vector<QueueRow> rows;
  read("job_counts", [&](Conn& c) {
    rows.clear();
    {
      // The maintained counts (state 0: a paused queue's marker row), in name order.
      SQLite::Statement& st = c.get(kJobCounts);
      Use u(st);
      while (st.executeStep()) {
        std::string queue = column_text(st, 0);
        if (rows.empty() || rows.back().queue != queue)
          rows.emplace_back().queue = std::move(queue);
        QueueRow& r = rows.back();
        const int state = st.getColumn(1).getInt();
        const int64_t n = st.getColumn(2).getInt64();
        switch (state) {
          case 0:
            r.paused = true;
            break;
          case CONVEYOR_JOB_COMPLETED:
            r.counts[3] = n;
            break;
          case CONVEYOR_JOB_FAILED:
            r.counts[4] = n;
            break;
          case CONVEYOR_JOB_CANCELLED:
            r.counts[5] = n;
            break;
          default:
            break;
        }
      }
    }
    // Live jobs are counted from the partial indexes that hold only available
    // and running rows, never the retained ones.
    std::map<std::string, int64_t, std::less<>> running;
    {
      SQLite::Statement& st = c.get(kCountRunning);
      Use u(st);
      while (st.executeStep()) running[column_text(st, 0)] = st.getColumn(1).getInt64();
    }
    SQLite::Statement& live = c.get(kCountAvailable);
    for (QueueRow& r : rows) {
      Use u(live);
      bind_text(live, 1, r.queue);
      live.bind(2, static_cast<int64_t>(now_us));
      if (live.executeStep()) {
        const int64_t available = live.getColumn(0).getInt64();
        r.counts[1] = live.getColumn(1).getInt64();
        r.counts[0] = available - r.counts[1];
        r.oldest_pending_run_at = live.getColumn(2).getInt64();
      }
      if (auto it = running.find(r.queue); it != running.end()) r.counts[2] = it->second;
    }
  });
  // As queue_stats: queues with retained jobs or paused.
  for (const QueueRow& r : rows) {
    bool any = r.paused;
    for (int64_t n : r.counts) any = any || n != 0;
    if (any) sink(r.view());
  }
}

}  // namespace conveyor::sqlite

CONVEYOR_EXPORT_STORAGE_PLUGIN(conveyor::sqlite::SqliteStorage, "sqlite", "0.1.0",
                               CONVEYOR_KIND_CANONICAL,
                               CONVEYOR_CAP_DURABLE | CONVEYOR_CAP_MULTI_PROCESS)
