#include "schema.hpp"

#include <conveyor/storage_plugin.hpp>

#include <algorithm>
#include <iterator>
#include <vector>

#include "connection.hpp"

namespace conveyor::sqlite {
namespace {

using sdk::Error;

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
    // 3 -> 4: rows stored by queue, so that a claim or completion of a batch
    // rewrites a few table pages even when many queues' jobs arrive
    // interleaved. A row's place is pos, taken from its queue's block of
    // 2^kBlockBits places (queues.next_pos .. end_pos; a full block is
    // followed by a fresh one, meta 'next_block'); the job id stays the
    // public, increasing number (meta 'last_job_id', never reused), found
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
    // 4 -> 5: ABI 1.4 (job keys). ADD COLUMN with a constant default
    // rewrites no rows: every job kept has the empty key.
    R"sql(
ALTER TABLE jobs ADD COLUMN key TEXT NOT NULL DEFAULT '';
-- claim_keys reads one range per listed key, in claim order; list_ready_keys
-- walks the queue's keys one seek each (a key with no available job has no
-- entry, so it is never read) and counts a key's ready jobs in its range.
-- Partial on available, as jobs_claim: a job enters it when enqueued or made
-- available again and leaves it when claimed or cancelled. The key is TEXT
-- (BINARY collation: memcmp, the ABI's bytewise key order). jobs_claim stays:
-- claim and claim_kinds take the queue's jobs in claim order across keys.
CREATE INDEX jobs_key ON jobs (queue, key, priority, run_at, id) WHERE state = 1;
)sql",
    // 5 -> 6: ABI 1.5 (settings of keys made at run time). A new table:
    // nothing kept is rewritten.
    R"sql(
-- set_key_setting, delete_key_setting and list_key_settings: one row per
-- (queue, target, key). target is CONVEYOR_KEY_TARGET_* (0 one key, 1 every
-- key of the queue, with the empty key), so the empty key's own setting and
-- the queue's every-key setting are two rows. fields is the mask of
-- CONVEYOR_KEY_FIELD_* stored (1 rate, burst and scope; 2 weight), never 0:
-- a row whose last field is cleared is deleted. A field not stored holds 0.
-- The primary key is list_key_settings' order (queue, target, key), BINARY
-- collation: memcmp, the ABI's bytewise order.
CREATE TABLE key_settings (
  queue      TEXT    NOT NULL,
  target     INTEGER NOT NULL,
  key        TEXT    NOT NULL,
  fields     INTEGER NOT NULL,
  rate       REAL    NOT NULL DEFAULT 0,
  burst      INTEGER NOT NULL DEFAULT 0,
  scope      INTEGER NOT NULL DEFAULT 0,
  weight     INTEGER NOT NULL DEFAULT 0,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (queue, target, key)
) WITHOUT ROWID;
)sql",
    // 6 -> 7: ABI 1.6 (a job's own timeout, when its latest attempt
    // started). ADD COLUMN with a constant default rewrites no rows: every
    // job kept has timeout 0 (its queue's) and started_at 0 (a job running
    // now started before the plugin stored it). No index: the claim writes
    // started_at in the row it already updates.
    R"sql(
ALTER TABLE jobs ADD COLUMN started_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN timeout_ms INTEGER NOT NULL DEFAULT 0;
)sql",
};
static_assert(std::size(kMigrations) == kSchemaVersion, "one migration step per schema version");

// A database Conveyor did not create (another application's file named by
// mistake) is refused, not filled with Conveyor's tables.
void check_schema_owner(Connection& c, const std::string& path, int version) {
  std::vector<std::string> tables;
  {
    SQLite::Statement st(c.db(),
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
              "sqlite database '" + path + "' is not a Conveyor database (it has " +
                  (tables.empty() ? std::string("no tables") : "tables " + listed) +
                  " and schema version " + std::to_string(version) +
                  "): point storage option 'path' at a new file or at a Conveyor database");
}

}  // namespace

std::span<const char* const> schema_steps() { return kMigrations; }

void migrate_schema(Connection& c, const std::string& path) {
  int version = 0;
  {
    SQLite::Statement& st = c.get<sql::kUserVersion>();
    ResetOnExit reset(st);
    if (st.executeStep()) version = st.getColumn(0).getInt();
  }
  if (version > kSchemaVersion)
    throw Error(CONVEYOR_E_INVALID, "sqlite database '" + path + "' has schema version " +
                                        std::to_string(version) + ", newer than version " +
                                        std::to_string(kSchemaVersion) +
                                        " that this plugin (sqlite 0.1.0) knows; upgrade Conveyor");
  if (version < 0)
    throw Error(
        CONVEYOR_E_INVALID,
        "sqlite database '" + path + "' has an invalid schema version " + std::to_string(version));
  check_schema_owner(c, path, version);
  for (int v = version; v < kSchemaVersion; ++v) c.db().exec(kMigrations[v]);
  if (version != kSchemaVersion)
    c.db().exec("PRAGMA user_version = " + std::to_string(kSchemaVersion));
}

}  // namespace conveyor::sqlite
