#include "queue_schema.hpp"

#include "control_store.hpp"
#include "job_calls.hpp"
#include "pg_options.hpp"
#include "pg_sql.hpp"

#include <conveyor/storage_plugin.h>
#include <conveyor/storage_plugin.hpp>

#include <pqxx/nontransaction>
#include <pqxx/transaction>

#include <array>
#include <stdexcept>
#include <vector>

namespace conveyor::pgqueue {
namespace {

using postgres::Statement;

static_assert(CONVEYOR_JOB_AVAILABLE == 1 && CONVEYOR_JOB_RUNNING == 3 &&
                  CONVEYOR_JOB_COMPLETED == 4 && CONVEYOR_JOB_FAILED == 5 &&
                  CONVEYOR_JOB_CANCELLED == 6 && kMarkClaimed == CONVEYOR_JOB_RUNNING &&
                  kMarkCompleted == CONVEYOR_JOB_COMPLETED && kMarkFailed == CONVEYOR_JOB_FAILED &&
                  kMarkCancelled == CONVEYOR_JOB_CANCELLED,
              "the SQL below spells states and marks out; a final mark is what 4..6");

// Advisory-lock class for creating the ring ("Ring"); object: the schema's hash.
constexpr int kRingSetupLockClass = 0x52696e67;

// Version 1. "{s}" is the quoted schema. Times are microseconds since the
// Unix epoch: job times always the host's clock, ring.rotated_at the wall clock.
constexpr const char* kQueueV1 = R"sql(
CREATE SEQUENCE {s}.job_ids;
CREATE SEQUENCE {s}.entry_ids;
-- The ring: `slots` partitions of ready and marks; new entries go to
-- write_slot; the slot after it is the oldest, emptied by TRUNCATE when the
-- ring rotates (ring_rotator.cc). One row, updated once per rotation.
CREATE TABLE {s}.ring (
  id         boolean PRIMARY KEY DEFAULT true CHECK (id),
  slots      integer NOT NULL,
  write_slot integer NOT NULL,
  rotated_at bigint  NOT NULL,
  rotations  bigint  NOT NULL DEFAULT 0,
  -- Bumped whenever entries were copied forward: claim hints made before
  -- may have skipped the originals (claim_hints.hpp).
  moves      bigint  NOT NULL DEFAULT 0
);
-- A job's turn in the queue, appended and never updated. A job (job_id) gets a
-- new entry when it is requeued, promoted from `later` or copied forward.
-- attempt: attempts started before this entry; last_error: the latest failure
-- before it.
CREATE TABLE {s}.ready (
  slot         integer NOT NULL,
  entry_id     bigint  NOT NULL DEFAULT nextval('{s}.entry_ids'),
  job_id       bigint  NOT NULL,
  queue        text    COLLATE "C" NOT NULL,
  priority     integer NOT NULL,
  run_at       bigint  NOT NULL,
  attempt      integer NOT NULL,
  max_attempts integer NOT NULL,
  created_at   bigint  NOT NULL,
  kind         text    NOT NULL,
  payload      bytea   NOT NULL,
  last_error   text    NOT NULL DEFAULT '',
  PRIMARY KEY (slot, entry_id)
) PARTITION BY LIST (slot);
-- Claim order (the claim starts at a per-queue hint in this order).
CREATE INDEX ready_claim ON {s}.ready (queue, priority, run_at, job_id);
CREATE INDEX ready_job ON {s}.ready (job_id);
-- What happened to an entry, appended and never updated, in the entry's slot.
-- At most one mark per stage, the primary key is the arbiter (INSERT .. ON
-- CONFLICT DO NOTHING): stage 1 taken (claimed 3, cancelled 6, moved 0),
-- stage 2 closed (completed 4, failed 5, cancelled 6, requeued 1, moved 0),
-- stage 3 purged (7). at: claimed_at (stage 1 claim), else when it happened.
CREATE TABLE {s}.marks (
  slot          integer  NOT NULL,
  entry_id      bigint   NOT NULL,
  stage         smallint NOT NULL,
  what          smallint NOT NULL,
  job_id        bigint   NOT NULL,
  at            bigint   NOT NULL,
  lease_token   bigint   NOT NULL DEFAULT 0,
  lease_expires bigint   NOT NULL DEFAULT 0,
  claimed_by    text,
  error         text,
  PRIMARY KEY (slot, entry_id, stage)
) PARTITION BY LIST (slot);
-- Lease-guarded calls find the claim by (job id, token). No partial index
-- here may have a predicate that a hot statement implies: for a partition
-- that was empty when a generic plan was made, the planner would pick a scan
-- of the whole partial index, and keep it once the partition is full.
CREATE INDEX marks_lease ON {s}.marks (job_id, lease_token);
-- Claims by lease expiry (only claim marks have one), for rescue.
CREATE INDEX marks_expiry ON {s}.marks (lease_expires) WHERE lease_expires <> 0;
-- Final marks by time, for purge.
CREATE INDEX marks_final ON {s}.marks (at) WHERE what BETWEEN 4 AND 6;
-- Jobs not due yet (enqueued for later, or retrying later): a small side
-- table, promoted into the ring when due.
CREATE TABLE {s}.later (
  job_id       bigint  PRIMARY KEY,
  queue        text    COLLATE "C" NOT NULL,
  priority     integer NOT NULL,
  run_at       bigint  NOT NULL,
  attempt      integer NOT NULL,
  max_attempts integer NOT NULL,
  created_at   bigint  NOT NULL,
  kind         text    NOT NULL,
  payload      bytea   NOT NULL,
  last_error   text    NOT NULL DEFAULT ''
);
CREATE INDEX later_due ON {s}.later (queue, run_at);
-- The only mutable job rows: leases moved by extend_leases (heartbeats). The
-- row counts only while (job_id, lease_token) names an open claim.
CREATE TABLE {s}.lease_ext (
  job_id        bigint PRIMARY KEY,
  lease_token   bigint NOT NULL,
  lease_expires bigint NOT NULL
);
CREATE INDEX lease_ext_expiry ON {s}.lease_ext (lease_expires);
-- Each entry with what its marks make of it. state: 1 available, 3 running,
-- 4 completed, 5 failed, 6 cancelled, 0 superseded (moved or requeued: a
-- newer entry or a `later` row continues the job).
CREATE VIEW {s}.entries AS
SELECT r.slot, r.entry_id, r.job_id, r.queue, r.kind, r.payload, r.priority, r.max_attempts,
       r.run_at, r.created_at,
       CASE WHEN m1.what IS NULL THEN 1
            WHEN m1.what = 6 THEN 6
            WHEN m1.what = 3 AND m2.what IS NULL THEN 3
            WHEN m1.what = 3 AND m2.what BETWEEN 4 AND 6 THEN m2.what
            ELSE 0 END AS state,
       CASE WHEN m1.what = 3 THEN r.attempt + 1 ELSE r.attempt END AS attempt,
       CASE WHEN m1.what = 6 THEN m1.at
            WHEN m1.what = 3 AND m2.what BETWEEN 4 AND 6 THEN m2.at
            ELSE 0 END AS finalized_at,
       CASE WHEN m1.what = 3 AND m2.what IS NULL THEN m1.lease_token ELSE 0 END AS lease_token,
       CASE WHEN m1.what = 3 AND m2.what IS NULL THEN coalesce(e.lease_expires, m1.lease_expires)
            ELSE 0 END AS lease_expires,
       coalesce(m2.error, r.last_error) AS last_error,
       m3.entry_id IS NOT NULL AS purged
FROM {s}.ready r
LEFT JOIN {s}.marks m1 ON m1.slot = r.slot AND m1.entry_id = r.entry_id AND m1.stage = 1
LEFT JOIN {s}.marks m2 ON m2.slot = r.slot AND m2.entry_id = r.entry_id AND m2.stage = 2
LEFT JOIN {s}.marks m3 ON m3.slot = r.slot AND m3.entry_id = r.entry_id AND m3.stage = 3
LEFT JOIN {s}.lease_ext e ON e.job_id = r.job_id AND e.lease_token = m1.lease_token;
)sql";

// Version 2: the finished jobs of truncated slots, counted. TRUNCATE takes a
// slot's history, but queue_stats keeps counting its completed, failed and
// cancelled jobs until purge_finished drops them past retention, as the
// canonical plugin does. Append-only: one row per queue and outcome per
// rotation that truncated any (written by the rotation, under the slot's
// lock), deleted only by purge.
constexpr const char* kQueueV2 = R"sql(
CREATE TABLE {s}.retired (
  queue      text     COLLATE "C" NOT NULL,
  state      smallint NOT NULL CHECK (state BETWEEN 4 AND 6),
  jobs       bigint   NOT NULL,
  -- The latest finalized_at among them: purged once that is past retention.
  newest     bigint   NOT NULL,
  retired_at bigint   NOT NULL
);
CREATE INDEX retired_newest ON {s}.retired (newest);
)sql";

// Version 3 (ABI 1.1): list_jobs walks a queue's jobs in id order
// (ready_list), and job_counts sums `tally` instead of counting entries.
// tally is append-only like the ring: every statement that moves jobs between
// states appends one row per queue and state it changed (n: the change). Its
// kTallySlots partitions take turns by the server's clock, one second each
// (CONVEYOR_TALLY_SLOT); the maintenance thread folds a partition no longer
// written into one row per queue and state and TRUNCATEs the rest
// (fold_tally, ring_rotator.cc), so job_counts sums a few seconds of rows
// whatever the history. No counter row is ever updated. The counts of an
// existing schema are taken from its entries here, so nothing is lost.
constexpr const char* kQueueV3 = R"sql(
CREATE INDEX ready_list ON {s}.ready (queue, job_id);
-- A claim mark names its queue, so closing it counts without reading `ready`
-- (a statement that locks marks and then ready partitions would wait in a
-- cycle with a rotation's LOCK of both). Open claims of an existing schema
-- get theirs here (a one-time update of the few running jobs).
ALTER TABLE {s}.marks ADD COLUMN queue text COLLATE "C";
UPDATE {s}.marks m SET queue = r.queue FROM {s}.ready r
WHERE r.slot = m.slot AND r.entry_id = m.entry_id AND m.stage = 1 AND m.what = 3
  AND NOT EXISTS (SELECT 1 FROM {s}.marks c
                  WHERE c.slot = m.slot AND c.entry_id = m.entry_id AND c.stage = 2);
CREATE TABLE {s}.tally (
  slot  integer  NOT NULL,
  queue text     COLLATE "C" NOT NULL,
  state smallint NOT NULL CHECK (state IN (1, 3, 4, 5, 6)),
  n     bigint   NOT NULL
) PARTITION BY LIST (slot);
CREATE TABLE {s}.tally_0 PARTITION OF {s}.tally FOR VALUES IN (0);
CREATE TABLE {s}.tally_1 PARTITION OF {s}.tally FOR VALUES IN (1);
CREATE TABLE {s}.tally_2 PARTITION OF {s}.tally FOR VALUES IN (2);
CREATE TABLE {s}.tally_3 PARTITION OF {s}.tally FOR VALUES IN (3);
INSERT INTO {s}.tally (slot, queue, state, n)
SELECT 0, queue, state, count(*)
FROM (SELECT queue, state FROM {s}.entries WHERE NOT purged AND state <> 0
      UNION ALL SELECT queue, 1 FROM {s}.later) AS live
GROUP BY queue, state;
)sql";

// Version 4 (ABI 1.2): a job's cost travels with each of its entries (an
// entry is never updated: a new one copies it). ADD COLUMN with a constant
// default rewrites no rows; the partitioned tables pass it to every slot. The
// view gains the column at its end (CREATE OR REPLACE VIEW may only append).
constexpr const char* kQueueV4 = R"sql(
ALTER TABLE {s}.ready ADD COLUMN cost integer NOT NULL DEFAULT 1;
ALTER TABLE {s}.later ADD COLUMN cost integer NOT NULL DEFAULT 1;
CREATE OR REPLACE VIEW {s}.entries AS
SELECT r.slot, r.entry_id, r.job_id, r.queue, r.kind, r.payload, r.priority, r.max_attempts,
       r.run_at, r.created_at,
       CASE WHEN m1.what IS NULL THEN 1
            WHEN m1.what = 6 THEN 6
            WHEN m1.what = 3 AND m2.what IS NULL THEN 3
            WHEN m1.what = 3 AND m2.what BETWEEN 4 AND 6 THEN m2.what
            ELSE 0 END AS state,
       CASE WHEN m1.what = 3 THEN r.attempt + 1 ELSE r.attempt END AS attempt,
       CASE WHEN m1.what = 6 THEN m1.at
            WHEN m1.what = 3 AND m2.what BETWEEN 4 AND 6 THEN m2.at
            ELSE 0 END AS finalized_at,
       CASE WHEN m1.what = 3 AND m2.what IS NULL THEN m1.lease_token ELSE 0 END AS lease_token,
       CASE WHEN m1.what = 3 AND m2.what IS NULL THEN coalesce(e.lease_expires, m1.lease_expires)
            ELSE 0 END AS lease_expires,
       coalesce(m2.error, r.last_error) AS last_error,
       m3.entry_id IS NOT NULL AS purged,
       r.cost
FROM {s}.ready r
LEFT JOIN {s}.marks m1 ON m1.slot = r.slot AND m1.entry_id = r.entry_id AND m1.stage = 1
LEFT JOIN {s}.marks m2 ON m2.slot = r.slot AND m2.entry_id = r.entry_id AND m2.stage = 2
LEFT JOIN {s}.marks m3 ON m3.slot = r.slot AND m3.entry_id = r.entry_id AND m3.stage = 3
LEFT JOIN {s}.lease_ext e ON e.job_id = r.job_id AND e.lease_token = m1.lease_token;
)sql";

// Version 7 (ABI 1.4): a job's key travels with each of its entries and
// `later` rows as its cost does (existing ones: the empty key; a constant
// default rewrites no rows). COLLATE "C": keys compare and sort bytewise, as
// list_ready_keys reports them. ready_key orders each (queue, key) by claim
// order: claim_keys walks one range per key listed, list_ready_keys finds
// each next key with an unclaimed entry from the claim hint on (a loose
// index scan) and counts a key's ready entries in its own range. Created on
// the partitioned table, so on every slot's partition (and on those made
// later). The claim of unkeyed work keeps ready_claim and its hints. The
// view gains the column at its end.
constexpr const char* kQueueV7 = R"sql(
ALTER TABLE {s}.ready ADD COLUMN key text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE {s}.later ADD COLUMN key text COLLATE "C" NOT NULL DEFAULT '';
CREATE INDEX ready_key ON {s}.ready (queue, key, priority, run_at, job_id);
CREATE OR REPLACE VIEW {s}.entries AS
SELECT r.slot, r.entry_id, r.job_id, r.queue, r.kind, r.payload, r.priority, r.max_attempts,
       r.run_at, r.created_at,
       CASE WHEN m1.what IS NULL THEN 1
            WHEN m1.what = 6 THEN 6
            WHEN m1.what = 3 AND m2.what IS NULL THEN 3
            WHEN m1.what = 3 AND m2.what BETWEEN 4 AND 6 THEN m2.what
            ELSE 0 END AS state,
       CASE WHEN m1.what = 3 THEN r.attempt + 1 ELSE r.attempt END AS attempt,
       CASE WHEN m1.what = 6 THEN m1.at
            WHEN m1.what = 3 AND m2.what BETWEEN 4 AND 6 THEN m2.at
            ELSE 0 END AS finalized_at,
       CASE WHEN m1.what = 3 AND m2.what IS NULL THEN m1.lease_token ELSE 0 END AS lease_token,
       CASE WHEN m1.what = 3 AND m2.what IS NULL THEN coalesce(e.lease_expires, m1.lease_expires)
            ELSE 0 END AS lease_expires,
       coalesce(m2.error, r.last_error) AS last_error,
       m3.entry_id IS NOT NULL AS purged,
       r.cost,
       r.key
FROM {s}.ready r
LEFT JOIN {s}.marks m1 ON m1.slot = r.slot AND m1.entry_id = r.entry_id AND m1.stage = 1
LEFT JOIN {s}.marks m2 ON m2.slot = r.slot AND m2.entry_id = r.entry_id AND m2.stage = 2
LEFT JOIN {s}.marks m3 ON m3.slot = r.slot AND m3.entry_id = r.entry_id AND m3.stage = 3
LEFT JOIN {s}.lease_ext e ON e.job_id = r.job_id AND e.lease_token = m1.lease_token;
)sql";

// Version 10 (ABI 1.6): a job's own timeout travels with each of its entries
// and `later` rows as its key does, and so does started_at, the claim time of
// its latest attempt: an entry's own claim mark holds it while the entry is
// the job's newest (the view reads m1.at, written by the claim's own INSERT
// of the mark: nothing is added to a claim), and an entry or `later` row
// that continues a claimed one (release, fail, rescue, retry) copies that
// mark's time into started_at. Existing rows get timeout 0 and started_at 0
// (constant defaults rewrite no rows); running entries read theirs from
// their claim marks. The view gains both columns at its end.
constexpr const char* kQueueV10 = R"sql(
ALTER TABLE {s}.ready ADD COLUMN timeout_ms bigint NOT NULL DEFAULT 0;
ALTER TABLE {s}.ready ADD COLUMN started_at bigint NOT NULL DEFAULT 0;
ALTER TABLE {s}.later ADD COLUMN timeout_ms bigint NOT NULL DEFAULT 0;
ALTER TABLE {s}.later ADD COLUMN started_at bigint NOT NULL DEFAULT 0;
CREATE OR REPLACE VIEW {s}.entries AS
SELECT r.slot, r.entry_id, r.job_id, r.queue, r.kind, r.payload, r.priority, r.max_attempts,
       r.run_at, r.created_at,
       CASE WHEN m1.what IS NULL THEN 1
            WHEN m1.what = 6 THEN 6
            WHEN m1.what = 3 AND m2.what IS NULL THEN 3
            WHEN m1.what = 3 AND m2.what BETWEEN 4 AND 6 THEN m2.what
            ELSE 0 END AS state,
       CASE WHEN m1.what = 3 THEN r.attempt + 1 ELSE r.attempt END AS attempt,
       CASE WHEN m1.what = 6 THEN m1.at
            WHEN m1.what = 3 AND m2.what BETWEEN 4 AND 6 THEN m2.at
            ELSE 0 END AS finalized_at,
       CASE WHEN m1.what = 3 AND m2.what IS NULL THEN m1.lease_token ELSE 0 END AS lease_token,
       CASE WHEN m1.what = 3 AND m2.what IS NULL THEN coalesce(e.lease_expires, m1.lease_expires)
            ELSE 0 END AS lease_expires,
       coalesce(m2.error, r.last_error) AS last_error,
       m3.entry_id IS NOT NULL AS purged,
       r.cost,
       r.key,
       r.timeout_ms,
       CASE WHEN m1.what = 3 THEN m1.at ELSE r.started_at END AS started_at
FROM {s}.ready r
LEFT JOIN {s}.marks m1 ON m1.slot = r.slot AND m1.entry_id = r.entry_id AND m1.stage = 1
LEFT JOIN {s}.marks m2 ON m2.slot = r.slot AND m2.entry_id = r.entry_id AND m2.stage = 2
LEFT JOIN {s}.marks m3 ON m3.slot = r.slot AND m3.entry_id = r.entry_id AND m3.stage = 3
LEFT JOIN {s}.lease_ext e ON e.job_id = r.job_id AND e.lease_token = m1.lease_token;
)sql";

const std::vector<std::string>& migration_steps() {
  static const std::vector<std::string> steps = {
      std::string(kQueueV1) + postgres::kControlTables, kQueueV2, kQueueV3,
      std::string(kQueueV4) + postgres::kControlTablesV12,
      // Version 5: swap_shared_state leaves no dead tuples.
      postgres::kSharedStateInPlace,
      // Version 6: ABI 1.3 add_shared_state.
      postgres::kSharedAdd, kQueueV7,
      // Version 8: ABI 1.5 key settings and delete_shared_states.
      postgres::kKeySettings,
      // Version 9: ABI 1.5 add_shared_states.
      postgres::kSharedAdds,
      // Version 10: ABI 1.6 timeout_ms and started_at.
      kQueueV10};
  return steps;
}

// The columns an entry carries from one turn to the next.
#define CONVEYOR_ENTRY_COLUMNS                                                          \
  "job_id, queue, priority, run_at, attempt, max_attempts, created_at, kind, payload, " \
  "last_error, cost, key, timeout_ms, started_at"

// The claim time of entry r (its stage-1 mark's), for an entry or `later`
// row that continues r: the started_at of the job's latest attempt. One
// primary-key probe, only in statements that close a claim.
#define CONVEYOR_CLAIMED_AT_OF_R      \
  "(SELECT cm.at FROM {s}.marks cm\n" \
  "          WHERE cm.slot = r.slot AND cm.entry_id = r.entry_id AND cm.stage = 1)"

// The claim marks (m) of a batch of leases: job ids $2, tokens $3 and slots
// $4 (lease_slots.hpp; -1 where this process does not know the slot). The
// LATERAL .. OFFSET 0 makes the generic plan look each lease up by (job id,
// token), one partition probed where the slot is known (run-time pruning on
// m.slot = l.slot), instead of hashing every claim mark in the ring.
#define CONVEYOR_CLAIM_MARKS_OF_LEASES                                               \
  "  FROM unnest($2::bigint[], $3::bigint[], $4::integer[]) AS l(id, token, slot)\n" \
  "  CROSS JOIN LATERAL (\n"                                                         \
  "    SELECT * FROM {s}.marks m\n"                                                  \
  "    WHERE l.slot >= 0 AND m.slot = l.slot AND m.job_id = l.id\n"                  \
  "      AND m.lease_token = l.token AND m.stage = 1 AND m.what = 3\n"               \
  "    UNION ALL\n"                                                                  \
  "    SELECT * FROM {s}.marks m\n"                                                  \
  "    WHERE l.slot < 0 AND m.job_id = l.id AND m.lease_token = l.token\n"           \
  "      AND m.stage = 1 AND m.what = 3\n"                                           \
  "    OFFSET 0) m\n"

// The tally partition this second writes to (kTallySlots, the server's clock).
#define CONVEYOR_TALLY_SLOT \
  "(floor(extract(epoch FROM statement_timestamp()))::bigint % 4)::integer"
static_assert(kTallySlots == 4, "CONVEYOR_TALLY_SLOT and kQueueV3 spell the count out");

// Appends the count changes of ROWS, a SELECT of (queue, state, n) with one
// row per job and state it left (n -1) or entered (n 1), to `tally` (version
// 3): one row per queue and state, in the write slot.
#define CONVEYOR_TALLY(ROWS)                        \
  "INSERT INTO {s}.tally (slot, queue, state, n)\n" \
  "  SELECT " CONVEYOR_TALLY_SLOT                   \
  ", d.queue, d.state, sum(d.n)\n"                  \
  "  FROM (" ROWS                                   \
  ") AS d(queue, state, n)\n"                       \
  "  GROUP BY d.queue, d.state HAVING sum(d.n) <> 0\n"

// A claim hint's key (parameters P, R, ID), valid only under the ring's
// move generation it was made in (MOVES; a CTE `ring` holds the current
// one), else the least key: a lower bound of every unclaimed entry of the
// queue.
#define CONVEYOR_HINT_OF(P, R, ID, MOVES)                              \
  "(\n"                                                                \
  "          (SELECT CASE WHEN moves = " MOVES "::bigint THEN " P      \
  "::integer ELSE -2147483648 END FROM ring),\n"                       \
  "          (SELECT CASE WHEN moves = " MOVES "::bigint THEN " R      \
  "::bigint\n"                                                         \
  "                       ELSE -9223372036854775808 END FROM ring),\n" \
  "          (SELECT CASE WHEN moves = " MOVES "::bigint THEN " ID     \
  "::bigint\n"                                                         \
  "                       ELSE -9223372036854775808 END FROM ring))"
// The claim statements' hint: $7, $8, $9 under move generation $10.
#define CONVEYOR_CLAIM_HINT CONVEYOR_HINT_OF("$7", "$8", "$9", "$10")

// An entry (r) no one has taken. "OFFSET 0" keeps it a per-row primary-key
// probe: as an anti-join the planner hashes every mark in the ring.
#define CONVEYOR_UNTAKEN                                                                   \
  "NOT EXISTS (SELECT 1 FROM {s}.marks m\n"                                                \
  "                    WHERE m.slot = r.slot AND m.entry_id = r.entry_id AND m.stage = 1 " \
  "OFFSET 0)"

// What a claim reads of a candidate entry (r).
#define CONVEYOR_CAND_COLUMNS                                                 \
  "r.slot, r.entry_id, r.job_id, r.kind, r.payload, r.priority, r.attempt,\n" \
  "         r.max_attempts, r.run_at, r.created_at, r.last_error, r.cost, r.key, r.timeout_ms"

// claim's candidates: the queue's entries from the hint on in claim order;
// FILTER narrows them (claim_kinds).
#define CONVEYOR_CLAIM_CAND(FILTER)                                                  \
  "  SELECT " CONVEYOR_CAND_COLUMNS                                                  \
  "\n"                                                                               \
  "  FROM {s}.ready r\n"                                                             \
  "  WHERE r.queue = $1::text\n"                                                     \
  "    AND (r.priority, r.run_at, r.job_id) >= " CONVEYOR_CLAIM_HINT                 \
  "\n"                                                                               \
  "    AND r.run_at <= $2::bigint" FILTER                                            \
  "\n"                                                                               \
  "    AND " CONVEYOR_UNTAKEN                                                        \
  "\n"                                                                               \
  "    AND NOT EXISTS (SELECT 1 FROM {s}.queues WHERE name = $1::text AND paused)\n" \
  "  ORDER BY r.priority, r.run_at, r.job_id\n"                                      \
  "  LIMIT $3::bigint\n"                                                             \
  "  FOR UPDATE OF r SKIP LOCKED\n"

// claim_keys' candidates (ABI 1.4): per key $11[i], its first $12[i] entries
// from the hint on in claim order, one ready_key range each; FILTER narrows
// them (kinds). Jobs of keys not listed are never read. $3, the sum of the
// counts, bounds the whole. The key is asked for as a range (>= and <=, the
// same rows as =) ordered by the key first, as in the canonical plugin's
// claim_keys (pg_schema.cc): with "key = k.key", a plan made from statistics
// that saw one key walks ready_claim with the key as a filter.
#define CONVEYOR_CLAIM_KEYS_CAND(FILTER)                                             \
  "  SELECT c.* FROM unnest($11::text[], $12::bigint[]) AS k(key, n)\n"              \
  "  CROSS JOIN LATERAL (\n"                                                         \
  "    SELECT " CONVEYOR_CAND_COLUMNS                                                \
  "\n"                                                                               \
  "    FROM {s}.ready r\n"                                                           \
  "    WHERE r.queue = $1::text AND r.key >= k.key AND r.key <= k.key\n"             \
  "      AND (r.priority, r.run_at, r.job_id) >= " CONVEYOR_CLAIM_HINT               \
  "\n"                                                                               \
  "      AND r.run_at <= $2::bigint" FILTER                                          \
  "\n"                                                                               \
  "      AND " CONVEYOR_UNTAKEN                                                      \
  "\n"                                                                               \
  "    ORDER BY r.key, r.priority, r.run_at, r.job_id\n"                             \
  "    LIMIT k.n\n"                                                                  \
  "    FOR UPDATE OF r SKIP LOCKED\n"                                                \
  "  ) AS c\n"                                                                       \
  "  WHERE NOT EXISTS (SELECT 1 FROM {s}.queues WHERE name = $1::text AND paused)\n" \
  "  LIMIT $3::bigint\n"

// A claim statement over the candidates CAND selects (a CTE's body, FOR
// UPDATE SKIP LOCKED: rows another claimer has locked are skipped); the
// stage-1 mark's primary key decides who wins (a row lock writes no new
// tuple, the mark is one small insert). The ready row itself is never
// updated.
#define CONVEYOR_CLAIM_OF(CAND) \
  "\n"                                                                                         \
  "WITH ring AS (\n"                                                                           \
  "  SELECT moves FROM {s}.ring WHERE id = true\n"                                             \
  "), cand AS (\n" CAND                                                                        \
  "), won AS (\n"                                                                              \
  "  INSERT INTO {s}.marks (slot, entry_id, stage, what, job_id, at, lease_token, "            \
  "lease_expires,\n"                                                                           \
  "                         claimed_by, queue)\n"                                              \
  "  SELECT slot, entry_id, 1, 3, job_id, $2::bigint, $4::bigint, $5::bigint, $6::text, "      \
  "$1::text\n"                                                                                 \
  "  FROM cand WHERE " CONVEYOR_PG_LEASE_COMMIT                                                \
  "\n"                                                                                         \
  "  ON CONFLICT DO NOTHING\n"                                                                 \
  "  RETURNING entry_id\n"                                                                     \
  "), claimed AS (\n"                                                                          \
  "  SELECT c.* FROM cand c JOIN won w ON w.entry_id = c.entry_id\n"                           \
  "), tallied AS (\n" CONVEYOR_TALLY(                                                          \
      "SELECT $1::text, v.st, v.n FROM won CROSS JOIN (VALUES (1, -1), (3, 1)) AS v(st, n)")   \
  "\n"                                                                                         \
  "), walked AS (\n"                                                                           \
  "  SELECT priority, run_at, job_id FROM cand\n"                                              \
  "  ORDER BY priority DESC, run_at DESC, job_id DESC LIMIT 1\n"                               \
  ")\n"                                                                                        \
  "-- One row even when nothing was claimed: the ring's move generation, the\n"                \
  "-- candidates (those not claimed were lost to a concurrent claimer) and the\n"              \
  "-- last candidate's key (how far the walk got: the claim hint moves there).\n"              \
  "SELECT c.job_id, c.kind, c.payload, c.priority, c.attempt + 1, c.max_attempts, c.run_at,\n" \
  "       c.created_at, c.last_error, c.cost, c.key,\n"                                        \
  "       CASE WHEN c.job_id IS NOT NULL THEN $2::bigint END, c.timeout_ms, ring.moves, c.slot,\n" \
  "       (SELECT count(*) FROM cand) AS candidates,\n"                                        \
  "       walked.priority, walked.run_at, walked.job_id\n"                                     \
  "FROM ring LEFT JOIN walked ON true LEFT JOIN claimed c ON true"

// The claim statement; FILTER narrows the candidates (claim_kinds).
#define CONVEYOR_CLAIM_SQL(FILTER) CONVEYOR_CLAIM_OF(CONVEYOR_CLAIM_CAND(FILTER))
// The claim_keys statement (ABI 1.4); FILTER narrows the candidates (kinds).
#define CONVEYOR_CLAIM_KEYS_SQL(FILTER) CONVEYOR_CLAIM_OF(CONVEYOR_CLAIM_KEYS_CAND(FILTER))

// list_ready_keys (ABI 1.4): a loose index scan of ready_key from the claim
// hint on ($5, $6, $7 under move generation $8). Each step finds the least
// key after the previous one (FIRST: the first step's bound, after $9 or
// none) that has an entry no one has taken, and that entry: the walk passes
// the taken entries of the keys in between (in the ring until their slot is
// truncated, from the hint on). Each key's ready entries (run_at <= the
// host's now, $2) are counted from that entry in the key's own range (asked
// for as claim_keys asks), at most $4 of them; keys with none are passed
// over. The recursion runs only as far as the outer LIMIT ($3 keys) pulls
// it.
#define CONVEYOR_LIST_READY_KEYS_STEP(BOUND) \
  "    SELECT r.key, r.priority, r.run_at, r.job_id FROM {s}.ready r\n" \
  "    WHERE r.queue = $1::text" BOUND                                  \
  "\n"                                                                  \
  "      AND (r.priority, r.run_at, r.job_id) >= "                      \
  CONVEYOR_HINT_OF("$5", "$6", "$7", "$8")                              \
  "\n"                                                                  \
  "      AND " CONVEYOR_UNTAKEN                                         \
  "\n"                                                                  \
  "    ORDER BY r.key, r.priority, r.run_at, r.job_id LIMIT 1"
#define CONVEYOR_LIST_READY_KEYS_SQL(FIRST) \
  "WITH RECURSIVE ring AS (\n"                                                              \
  "  SELECT moves FROM {s}.ring WHERE id = true\n"                                          \
  "), keys(key, priority, run_at, job_id) AS (\n"                                           \
  "  (" CONVEYOR_LIST_READY_KEYS_STEP(FIRST) ")\n"                                          \
  "  UNION ALL\n"                                                                           \
  "  SELECT n.* FROM keys AS k\n"                                                           \
  "  CROSS JOIN LATERAL (\n" CONVEYOR_LIST_READY_KEYS_STEP(" AND r.key > k.key") ") AS n\n" \
  ")\n"                                                                                     \
  "SELECT k.key, c.ready FROM keys AS k\n"                                                  \
  "CROSS JOIN LATERAL (\n"                                                                  \
  "  SELECT count(*) AS ready FROM (\n"                                                     \
  "    SELECT 1 FROM {s}.ready r\n"                                                         \
  "    WHERE r.queue = $1::text AND r.key >= k.key AND r.key <= k.key\n"                    \
  "      AND (r.priority, r.run_at, r.job_id) >= (k.priority, k.run_at, k.job_id)\n"        \
  "      AND r.run_at <= $2::bigint\n"                                                      \
  "      AND " CONVEYOR_UNTAKEN                                                             \
  "\n"                                                                                      \
  "    ORDER BY r.key, r.priority, r.run_at, r.job_id\n"                                    \
  "    LIMIT $4::bigint) AS x\n"                                                            \
  ") AS c\n"                                                                                \
  "WHERE c.ready > 0\n"                                                                     \
  "LIMIT $3::bigint"

constexpr std::array kStatements = {
    // Due jobs are appended to the write slot, the others go to `later`
    // (judged by the plugin's clock, $7: enqueue has no host clock; a claim
    // still compares run_at with the host's now). One NOTIFY per queue.
    Statement{stmt::kEnqueue, R"sql(
WITH registered AS (
  INSERT INTO {s}.queues (name) SELECT unnest($8::text[]) ON CONFLICT (name) DO NOTHING
), input AS MATERIALIZED (
  SELECT nextval('{s}.job_ids') AS job_id, t.queue, t.kind, decode(t.payload, 'hex') AS payload,
         t.priority, t.max_attempts, t.run_at, t.cost, t.key, t.timeout_ms, t.ord
  FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::integer[], $6::bigint[],
              $10::integer[], $13::text[], $14::bigint[])
       WITH ORDINALITY AS t(queue, kind, payload, priority, max_attempts, run_at, cost, key,
                            timeout_ms, ord)
  ORDER BY t.ord
), now_ready AS (
  INSERT INTO {s}.ready (slot, job_id, queue, priority, run_at, attempt, max_attempts,
                         created_at, kind, payload, cost, key, timeout_ms)
  SELECT (SELECT write_slot FROM {s}.ring WHERE id = true), job_id, queue, priority, run_at, 0, max_attempts, $7,
         kind, payload, cost, key, timeout_ms
  FROM input WHERE run_at <= $7::bigint ORDER BY ord
), not_yet AS (
  INSERT INTO {s}.later (job_id, queue, priority, run_at, attempt, max_attempts, created_at,
                         kind, payload, cost, key, timeout_ms)
  SELECT job_id, queue, priority, run_at, 0, max_attempts, $7, kind, payload, cost, key,
         timeout_ms
  FROM input WHERE run_at > $7::bigint
), tallied AS (
)sql" CONVEYOR_TALLY("SELECT queue, 1, 1 FROM input") R"sql(
), notified AS (
  SELECT count(pg_notify($9::text, q)) AS n FROM unnest($8::text[]) AS q
), announced AS (
  -- Delayed jobs: "<run_at> <queue>" on the later channel ($11), which
  -- listeners turn into a wake at that time (CONVEYOR_CAP_NOTIFY_DUE).
  SELECT count(pg_notify($11::text, p)) AS n FROM unnest($12::text[]) AS p
)
SELECT input.job_id, input.run_at <= $7::bigint FROM input CROSS JOIN notified CROSS JOIN announced
ORDER BY input.ord)sql"},

    // Moves a queue's due `later` rows into the ring (host's now, $2).
    // Returns their claim keys (the claim hint goes back to them), then one
    // row with the earliest run_at left in `later` for the queue (NULL: none)
    // for the promotion schedule (promotion_schedule.hpp).
    Statement{stmt::kPromote, R"sql(
WITH due AS (
  SELECT job_id FROM {s}.later
  WHERE queue = $1::text AND run_at <= $2::bigint
  ORDER BY run_at
  LIMIT 10000
  FOR UPDATE SKIP LOCKED
), moved AS (
  DELETE FROM {s}.later l WHERE l.job_id = ANY(ARRAY(SELECT job_id FROM due))
  RETURNING )sql" CONVEYOR_ENTRY_COLUMNS R"sql(
), appended AS (
  INSERT INTO {s}.ready (slot, )sql" CONVEYOR_ENTRY_COLUMNS R"sql()
  SELECT (SELECT write_slot FROM {s}.ring WHERE id = true), )sql" CONVEYOR_ENTRY_COLUMNS
                              R"sql( FROM moved
  RETURNING priority, run_at, job_id
)
SELECT priority, run_at, job_id, NULL::bigint AS next_run_at FROM appended
UNION ALL
SELECT NULL, NULL, NULL,
       CASE WHEN (SELECT count(*) FROM due) >= 10000 THEN $2::bigint
            ELSE (SELECT min(run_at) FROM {s}.later
                  WHERE queue = $1::text AND run_at > $2::bigint) END)sql"},

    // Candidates from the hint ($7, $8, $9; ignored unless it was made under
    // move generation $10) on, in claim order, skipping rows
    // another claimer has locked; the stage-1 mark's primary key decides who
    // wins (a row lock writes no new tuple, the mark is one small insert).
    // The ready row itself is never updated. "OFFSET 0" keeps the mark check
    // a per-row primary-key probe: as an anti-join the planner hashes every
    // mark in the ring and sorts every entry of the queue, for each claim.
    Statement{stmt::kClaim, CONVEYOR_CLAIM_SQL("")},
    Statement{stmt::kClaimKinds, CONVEYOR_CLAIM_SQL("\n    AND r.kind = ANY($11::text[])")},
    // ABI 1.4 (schema 7): claim_keys, then with a kind filter.
    Statement{stmt::kClaimKeys, CONVEYOR_CLAIM_KEYS_SQL("")},
    Statement{stmt::kClaimKeysKinds,
              CONVEYOR_CLAIM_KEYS_SQL("\n      AND r.kind = ANY($13::text[])")},

    // The queue's first unclaimed entry in claim order, from the beginning
    // (hint_prober.hpp), with the ring's move generation: always one row.
    // A read: no row lock, no mark.
    Statement{stmt::kProbe, R"sql(
SELECT ring.moves, f.priority, f.run_at, f.job_id
FROM {s}.ring LEFT JOIN LATERAL (
  SELECT r.priority, r.run_at, r.job_id FROM {s}.ready r
  WHERE r.queue = $1::text
    AND NOT EXISTS (SELECT 1 FROM {s}.marks m
                    WHERE m.slot = r.slot AND m.entry_id = r.entry_id AND m.stage = 1 OFFSET 0)
  ORDER BY r.priority, r.run_at, r.job_id
  LIMIT 1) f ON true
WHERE ring.id = true)sql"},

    // Lease-guarded batches: a lease is current while its stage-1 claim mark
    // has no stage-2 mark; the stage-2 insert is the arbiter. RETURNING names
    // the leases that were current. The cost follows the batch, not the
    // history (CONVEYOR_CLAIM_MARKS_OF_LEASES).
    Statement{stmt::kComplete,
              R"sql(
WITH open AS (
  SELECT m.slot, m.entry_id, m.job_id, m.lease_token, m.queue
)sql" CONVEYOR_CLAIM_MARKS_OF_LEASES R"sql(), closed AS (
  INSERT INTO {s}.marks (slot, entry_id, stage, what, job_id, at, lease_token)
  SELECT slot, entry_id, 2, 4, job_id, $1::bigint, lease_token FROM open
  WHERE )sql" CONVEYOR_PG_LEASE_COMMIT R"sql(
  ON CONFLICT DO NOTHING
  RETURNING slot, entry_id, job_id, lease_token
), tallied AS (
)sql" CONVEYOR_TALLY(
                  "SELECT o.queue, v.st, v.n FROM closed c JOIN open o ON o.slot = c.slot AND "
                  "o.entry_id = c.entry_id CROSS JOIN (VALUES (3, -1), (4, 1)) AS v(st, n)") R"sql(
), unextended AS (
  DELETE FROM {s}.lease_ext e USING closed c WHERE e.job_id = c.job_id
)
SELECT job_id, lease_token FROM closed)sql"},

    Statement{stmt::kExtend, R"sql(
WITH open AS (
  SELECT m.job_id, m.lease_token
)sql" CONVEYOR_CLAIM_MARKS_OF_LEASES R"sql(  WHERE NOT EXISTS (SELECT 1 FROM {s}.marks c
                    WHERE c.slot = m.slot AND c.entry_id = m.entry_id AND c.stage = 2 OFFSET 0)
)
INSERT INTO {s}.lease_ext (job_id, lease_token, lease_expires)
SELECT job_id, lease_token, $1::bigint FROM open
ON CONFLICT (job_id) DO UPDATE
  SET lease_token = excluded.lease_token, lease_expires = excluded.lease_expires
RETURNING job_id, lease_token)sql"},

    // The job gets a new entry at the host's now with the attempt unspent.
    Statement{stmt::kRelease,
              R"sql(
WITH open AS (
  SELECT m.slot, m.entry_id, m.job_id, m.lease_token
)sql" CONVEYOR_CLAIM_MARKS_OF_LEASES R"sql(), closed AS (
  INSERT INTO {s}.marks (slot, entry_id, stage, what, job_id, at, lease_token)
  SELECT slot, entry_id, 2, 1, job_id, $1::bigint, lease_token FROM open
  ON CONFLICT DO NOTHING
  RETURNING slot, entry_id, job_id, lease_token
), requeued AS (
  INSERT INTO {s}.ready (slot, )sql" CONVEYOR_ENTRY_COLUMNS R"sql()
  SELECT (SELECT write_slot FROM {s}.ring WHERE id = true), r.job_id, r.queue, r.priority, $1::bigint, r.attempt,
         r.max_attempts, r.created_at, r.kind, r.payload, r.last_error, r.cost, r.key,
         r.timeout_ms, )sql" CONVEYOR_CLAIMED_AT_OF_R R"sql(
  FROM closed c JOIN {s}.ready r ON r.slot = c.slot AND r.entry_id = c.entry_id
), tallied AS (
)sql" CONVEYOR_TALLY(
                  "SELECT r.queue, v.st, v.n FROM closed c JOIN {s}.ready r ON r.slot = c.slot AND "
                  "r.entry_id = c.entry_id CROSS JOIN (VALUES (3, -1), (1, 1)) AS v(st, n)") R"sql(
), unextended AS (
  DELETE FROM {s}.lease_ext e USING closed c WHERE e.job_id = c.job_id
)
SELECT job_id, lease_token FROM closed)sql"},

    // After a claim whose reply was lost with its connection: give back
    // whatever that claim (its unique token, $1) took, unspent.
    Statement{stmt::kReleaseOrphans,
              R"sql(
WITH open AS (
  SELECT m.slot, m.entry_id, m.job_id, m.lease_token FROM {s}.marks m
  WHERE m.stage = 1 AND m.what = 3 AND m.lease_token = $1::bigint
    AND m.lease_expires = $2::bigint
), closed AS (
  INSERT INTO {s}.marks (slot, entry_id, stage, what, job_id, at, lease_token)
  SELECT slot, entry_id, 2, 1, job_id, $3::bigint, lease_token FROM open
  ON CONFLICT DO NOTHING
  RETURNING slot, entry_id
), requeued AS (
  INSERT INTO {s}.ready (slot, )sql" CONVEYOR_ENTRY_COLUMNS R"sql()
  SELECT (SELECT write_slot FROM {s}.ring WHERE id = true), r.job_id, r.queue, r.priority, r.run_at,
         r.attempt, r.max_attempts, r.created_at, r.kind, r.payload, r.last_error, r.cost, r.key,
         r.timeout_ms, )sql" CONVEYOR_CLAIMED_AT_OF_R R"sql(
  FROM closed c JOIN {s}.ready r ON r.slot = c.slot AND r.entry_id = c.entry_id
), tallied AS (
)sql" CONVEYOR_TALLY(
                  "SELECT r.queue, v.st, v.n FROM closed c JOIN {s}.ready r ON r.slot = c.slot AND "
                  "r.entry_id = c.entry_id CROSS JOIN (VALUES (3, -1), (1, 1)) AS v(st, n)") R"sql(
)
SELECT count(*) FROM closed)sql"},

    // A failed attempt to retry at $1: into the ring when due by the host's
    // now ($5), else into `later`.
    Statement{stmt::kFailRetry, R"sql(
WITH open AS (
  SELECT m.slot, m.entry_id, m.job_id FROM {s}.marks m
  WHERE m.job_id = $3::bigint AND m.lease_token = $4::bigint AND m.stage = 1 AND m.what = 3
), closed AS (
  INSERT INTO {s}.marks (slot, entry_id, stage, what, job_id, at, lease_token, error)
  SELECT slot, entry_id, 2, 1, job_id, $5::bigint, $4::bigint, $2::text FROM open
  WHERE )sql" CONVEYOR_PG_LEASE_COMMIT R"sql(
  ON CONFLICT DO NOTHING
  RETURNING slot, entry_id, job_id
), next_turn AS (
  SELECT r.job_id, r.queue, r.priority, $1::bigint AS run_at, r.attempt + 1 AS attempt,
         r.max_attempts, r.created_at, r.kind, r.payload, $2::text AS last_error, r.cost, r.key,
         r.timeout_ms, )sql" CONVEYOR_CLAIMED_AT_OF_R R"sql( AS started_at
  FROM closed c JOIN {s}.ready r ON r.slot = c.slot AND r.entry_id = c.entry_id
), to_ring AS (
  INSERT INTO {s}.ready (slot, )sql" CONVEYOR_ENTRY_COLUMNS R"sql()
  SELECT (SELECT write_slot FROM {s}.ring WHERE id = true), )sql" CONVEYOR_ENTRY_COLUMNS R"sql(
  FROM next_turn WHERE $1::bigint <= $5::bigint
), to_later AS (
  INSERT INTO {s}.later ()sql" CONVEYOR_ENTRY_COLUMNS R"sql()
  SELECT )sql" CONVEYOR_ENTRY_COLUMNS R"sql( FROM next_turn WHERE $1::bigint > $5::bigint
), tallied AS (
)sql" CONVEYOR_TALLY("SELECT queue, v.st, v.n FROM next_turn CROSS JOIN (VALUES (3, -1), (1, 1)) "
                     "AS v(st, n)") R"sql(
), unextended AS (
  DELETE FROM {s}.lease_ext e USING closed c WHERE e.job_id = c.job_id
)
SELECT c.job_id, n.queue FROM closed c LEFT JOIN next_turn n ON true)sql"},

    Statement{stmt::kFailFinal,
              R"sql(
WITH open AS (
  SELECT m.slot, m.entry_id, m.job_id, m.queue FROM {s}.marks m
  WHERE m.job_id = $3::bigint AND m.lease_token = $4::bigint AND m.stage = 1 AND m.what = 3
), closed AS (
  INSERT INTO {s}.marks (slot, entry_id, stage, what, job_id, at, lease_token, error)
  SELECT slot, entry_id, 2, 5, job_id, $1::bigint, $4::bigint, $2::text FROM open
  WHERE )sql" CONVEYOR_PG_LEASE_COMMIT R"sql(
  ON CONFLICT DO NOTHING
  RETURNING slot, entry_id, job_id
), tallied AS (
)sql" CONVEYOR_TALLY(
                  "SELECT o.queue, v.st, v.n FROM closed c JOIN open o ON o.slot = c.slot AND "
                  "o.entry_id = c.entry_id CROSS JOIN (VALUES (3, -1), (5, 1)) AS v(st, n)") R"sql(
), unextended AS (
  DELETE FROM {s}.lease_ext e USING closed c WHERE e.job_id = c.job_id
)
SELECT job_id FROM closed)sql"},

    // Open claims whose lease (extended or not) expired before the host's
    // now; claim marks only from lease expiry $4 (>= 1) on (rescue_window.hpp).
    // Requeued with their run_at, so their place in the queue (rescue forgets
    // this process's claim hints; probes find them for other processes).
    // Returns how many expired claims it found (at most $3: fewer means it
    // saw them all) in every row, and one row per job it rescued, as get_job
    // would read it now (columns 1..14; NULL in the one row when none).
    Statement{stmt::kRescue, R"sql(
WITH expired AS (
  (SELECT m.slot, m.entry_id, m.job_id, m.lease_token FROM {s}.marks m
   WHERE m.lease_expires <> 0 AND m.lease_expires >= $4::bigint AND m.lease_expires < $1::bigint
     AND m.stage = 1 AND m.what = 3
     AND NOT EXISTS (SELECT 1 FROM {s}.marks c
                     WHERE c.slot = m.slot AND c.entry_id = m.entry_id AND c.stage = 2 OFFSET 0)
     AND NOT EXISTS (SELECT 1 FROM {s}.lease_ext e
                     WHERE e.job_id = m.job_id AND e.lease_token = m.lease_token OFFSET 0)
   UNION ALL
   SELECT m.slot, m.entry_id, m.job_id, m.lease_token FROM {s}.lease_ext e
   CROSS JOIN LATERAL (SELECT * FROM {s}.marks m
                       WHERE m.job_id = e.job_id AND m.lease_token = e.lease_token
                         AND m.stage = 1 AND m.what = 3 OFFSET 0) m
   WHERE e.lease_expires < $1::bigint
     AND NOT EXISTS (SELECT 1 FROM {s}.marks c
                     WHERE c.slot = m.slot AND c.entry_id = m.entry_id AND c.stage = 2 OFFSET 0))
  LIMIT $3::bigint
), entry AS (
  SELECT x.lease_token, )sql" CONVEYOR_CLAIMED_AT_OF_R R"sql( AS claimed_at, r.*
  FROM expired x
  CROSS JOIN LATERAL (SELECT * FROM {s}.ready r
                      WHERE r.slot = x.slot AND r.entry_id = x.entry_id OFFSET 0) r
), closed AS (
  INSERT INTO {s}.marks (slot, entry_id, stage, what, job_id, at, lease_token, error)
  SELECT slot, entry_id, 2, CASE WHEN attempt + 1 < max_attempts THEN 1 ELSE 5 END,
         job_id, $1::bigint, lease_token, $2::text
  FROM entry
  ON CONFLICT DO NOTHING
  RETURNING slot, entry_id, job_id, what
), rescued AS (
  SELECT c.what, r.* FROM closed c JOIN entry r ON r.slot = c.slot AND r.entry_id = c.entry_id
), requeued AS (
  INSERT INTO {s}.ready (slot, )sql" CONVEYOR_ENTRY_COLUMNS R"sql()
  SELECT (SELECT write_slot FROM {s}.ring WHERE id = true), r.job_id, r.queue, r.priority, r.run_at,
         r.attempt + 1, r.max_attempts, r.created_at, r.kind, r.payload, $2::text, r.cost, r.key,
         r.timeout_ms, r.claimed_at
  FROM rescued r
  WHERE r.what = 1
), tallied AS (
)sql" CONVEYOR_TALLY("SELECT r.queue, v.st, v.n FROM rescued r CROSS JOIN LATERAL (VALUES (3, -1), "
                     "(CASE WHEN r.what = 1 THEN 1 ELSE 5 END, 1)) AS v(st, n)") R"sql(
), unextended AS (
  DELETE FROM {s}.lease_ext e USING closed c WHERE e.job_id = c.job_id
)
SELECT f.found, r.job_id, r.queue, r.kind, r.payload, r.priority,
       CASE WHEN r.what = 1 THEN 1 ELSE 5 END, r.attempt + 1, r.max_attempts, r.run_at,
       r.created_at, CASE WHEN r.what = 1 THEN 0 ELSE $1::bigint END, 0::bigint, 0::bigint,
       $2::text, r.cost, r.key, r.claimed_at, r.timeout_ms
FROM (SELECT count(*) AS found FROM expired) AS f
LEFT JOIN rescued r ON true)sql"},

    // A job not final: waiting in `later` (it gets an entry, cancelled at
    // once), unclaimed (stage-1 mark) or running (stage-2 mark). Returns how
    // many it cancelled and how many live entries or `later` rows it saw: 0
    // and > 0 means a claim, rescue or promotion won the race, and the caller
    // tries again.
    Statement{stmt::kCancel, R"sql(
WITH cur AS (
  SELECT r.slot, r.entry_id, r.job_id, r.queue,
         (SELECT m.what FROM {s}.marks m
          WHERE m.slot = r.slot AND m.entry_id = r.entry_id AND m.stage = 1) AS taken
  FROM {s}.ready r
  WHERE r.job_id = $2::bigint
    AND NOT EXISTS (SELECT 1 FROM {s}.marks c
                    WHERE c.slot = r.slot AND c.entry_id = r.entry_id AND c.stage = 2)
), from_later AS (
  DELETE FROM {s}.later WHERE job_id = $2::bigint RETURNING )sql" CONVEYOR_ENTRY_COLUMNS R"sql(
), later_entry AS (
  INSERT INTO {s}.ready (slot, )sql" CONVEYOR_ENTRY_COLUMNS R"sql()
  SELECT (SELECT write_slot FROM {s}.ring WHERE id = true), )sql" CONVEYOR_ENTRY_COLUMNS
                             R"sql( FROM from_later
  RETURNING slot, entry_id, job_id, queue
), marked AS (
  INSERT INTO {s}.marks (slot, entry_id, stage, what, job_id, at)
  SELECT slot, entry_id, 1, 6, job_id, $1::bigint FROM cur WHERE taken IS NULL
  UNION ALL
  SELECT slot, entry_id, 2, 6, job_id, $1::bigint FROM cur WHERE taken = 3
  UNION ALL
  SELECT slot, entry_id, 1, 6, job_id, $1::bigint FROM later_entry
  ON CONFLICT DO NOTHING
  RETURNING slot, entry_id, stage, job_id
), tallied AS (
)sql" CONVEYOR_TALLY("SELECT x.queue, v.st, v.n FROM marked m JOIN (SELECT slot, entry_id, queue "
                     "FROM cur UNION ALL SELECT slot, entry_id, queue FROM later_entry) AS x ON "
                     "x.slot = m.slot AND x.entry_id = m.entry_id CROSS JOIN LATERAL (VALUES (CASE "
                     "WHEN m.stage = 1 THEN 1 ELSE 3 END, -1), (6, 1)) AS v(st, n)") R"sql(
), unextended AS (
  DELETE FROM {s}.lease_ext WHERE job_id = $2::bigint AND EXISTS (SELECT 1 FROM marked)
)
SELECT (SELECT count(*) FROM marked),
       (SELECT count(*) FROM cur WHERE taken IS NULL OR taken = 3) +
       (SELECT count(*) FROM {s}.later WHERE job_id = $2::bigint))sql"},

    // Counts derived from the entries (and `later`), never kept in a row,
    // plus the finished jobs of truncated slots (`retired`), in one
    // statement so that a rotation cannot fall between the two readings.
    Statement{stmt::kQueueStats,
              "WITH counted (name, paused, pending, scheduled, running, completed, failed,"
              " cancelled) AS (" CONVEYOR_QUEUE_STATS_SQL(
                  "(SELECT queue, state, run_at FROM {s}.entries"
                  " WHERE NOT purged AND state <> 0"
                  " UNION ALL SELECT queue, 1, run_at FROM {s}.later) AS live") R"sql(
), gone AS (
  SELECT queue, sum(jobs) FILTER (WHERE state = 4) AS completed,
         sum(jobs) FILTER (WHERE state = 5) AS failed,
         sum(jobs) FILTER (WHERE state = 6) AS cancelled
  FROM {s}.retired GROUP BY queue
), oldest AS (
  SELECT queue, min(run_at) AS run_at
  FROM (SELECT queue, run_at FROM {s}.entries
        WHERE NOT purged AND state = 1 AND run_at <= $1::bigint
        UNION ALL SELECT queue, run_at FROM {s}.later WHERE run_at <= $1::bigint) AS due
  GROUP BY queue
)
SELECT coalesce(l.name, g.queue) COLLATE "C", coalesce(l.paused, false),
       coalesce(l.pending, 0), coalesce(l.scheduled, 0), coalesce(l.running, 0),
       (coalesce(l.completed, 0) + coalesce(g.completed, 0))::bigint,
       (coalesce(l.failed, 0) + coalesce(g.failed, 0))::bigint,
       (coalesce(l.cancelled, 0) + coalesce(g.cancelled, 0))::bigint,
       coalesce(o.run_at, 0)::bigint
FROM counted l FULL JOIN gone g ON g.queue = l.name
LEFT JOIN oldest o ON o.queue = coalesce(l.name, g.queue)
ORDER BY 1)sql"},

    // The `later` row if the job waits there, else its newest entry.
    Statement{stmt::kGetJob, R"sql(
(SELECT 0 AS src, job_id, queue, kind, payload, priority, 1 AS state, attempt, max_attempts,
        run_at, created_at, 0::bigint AS finalized_at, 0::bigint AS lease_token,
        0::bigint AS lease_expires, last_error, cost, key, started_at, timeout_ms,
        false AS purged
 FROM {s}.later WHERE job_id = $1::bigint)
UNION ALL
(SELECT 1, job_id, queue, kind, payload, priority, state, attempt, max_attempts, run_at,
        created_at, finalized_at, lease_token, lease_expires, last_error, cost, key,
        started_at, timeout_ms, purged
 FROM {s}.entries WHERE job_id = $1::bigint
 ORDER BY entry_id DESC LIMIT 1)
ORDER BY 1)sql"},

    // Purge marks in the final entries' slots: TRUNCATE reclaims them with
    // the entries; until then the job reads as gone.
    Statement{stmt::kPurge, R"sql(
WITH doomed AS (
  SELECT m.slot, m.entry_id, m.job_id, m.what FROM {s}.marks m
  WHERE m.what BETWEEN 4 AND 6 AND m.at < $1::bigint
    AND NOT EXISTS (SELECT 1 FROM {s}.marks p
                    WHERE p.slot = m.slot AND p.entry_id = m.entry_id AND p.stage = 3)
  ORDER BY m.at, m.job_id
  LIMIT $2::bigint
), purged AS (
  INSERT INTO {s}.marks (slot, entry_id, stage, what, job_id, at)
  SELECT slot, entry_id, 3, 7, job_id, $1::bigint FROM doomed
  ON CONFLICT DO NOTHING
  RETURNING slot, entry_id
), tallied AS (
)sql" CONVEYOR_TALLY("SELECT r.queue, d.what, -1 FROM purged p JOIN doomed d ON d.slot = p.slot "
                     "AND d.entry_id = p.entry_id JOIN {s}.ready r ON r.slot = p.slot AND "
                     "r.entry_id = p.entry_id") R"sql(
)
SELECT count(*) FROM purged)sql"},

    // ABI 1.1 statements (schema version 3).

    // Retries ids $1 (distinct) at the host's now $2: a FAILED or CANCELLED
    // job's newest entry gets a stage-3 mark (what 1: retried, so it reads as
    // gone like a purged one and its counts leave with it) and the job a new
    // entry, attempt 0. The stage-3 key is the arbiter against a racing
    // delete, purge or retry. Per id: 0 retried, 1 not found, 2 wrong state.
    Statement{
        stmt::kRetryJobs,
        R"sql(
WITH ids AS (
  SELECT DISTINCT unnest($1::bigint[]) AS id
), cur AS (
  SELECT i.id, e.slot, e.entry_id, e.queue, e.state, e.purged, e.last_error, e.started_at
  FROM ids i
  CROSS JOIN LATERAL (SELECT * FROM {s}.entries x WHERE x.job_id = i.id
                      ORDER BY x.entry_id DESC LIMIT 1) e
  WHERE NOT EXISTS (SELECT 1 FROM {s}.later l WHERE l.job_id = i.id)
), won AS (
  INSERT INTO {s}.marks (slot, entry_id, stage, what, job_id, at)
  SELECT slot, entry_id, 3, 1, id, $2::bigint FROM cur WHERE state IN (5, 6) AND NOT purged
  ON CONFLICT DO NOTHING
  RETURNING slot, entry_id, job_id
), retried AS (
  INSERT INTO {s}.ready (slot, job_id, queue, priority, run_at, attempt, max_attempts,
                         created_at, kind, payload, last_error, cost, key, timeout_ms,
                         started_at)
  SELECT (SELECT write_slot FROM {s}.ring WHERE id = true), r.job_id, r.queue, r.priority,
         $2::bigint, 0, r.max_attempts, r.created_at, r.kind, r.payload, c.last_error, r.cost,
         r.key, r.timeout_ms, c.started_at
  FROM won w
  JOIN {s}.ready r ON r.slot = w.slot AND r.entry_id = w.entry_id
  JOIN cur c ON c.slot = w.slot AND c.entry_id = w.entry_id
), tallied AS (
)sql" CONVEYOR_TALLY(
            "SELECT c.queue, v.st, v.n FROM won w JOIN cur c ON c.slot = w.slot AND c.entry_id = "
            "w.entry_id CROSS JOIN LATERAL (VALUES (c.state, -1), (1, 1)) AS v(st, n)") R"sql(
), notified AS (
  SELECT count(pg_notify($3::text, q)) AS n
  FROM (SELECT DISTINCT c.queue FROM won w JOIN cur c ON c.id = w.job_id) AS x(q)
)
SELECT i.id, CASE WHEN w.job_id IS NOT NULL THEN 0
                  WHEN EXISTS (SELECT 1 FROM {s}.later l WHERE l.job_id = i.id) THEN 2
                  WHEN c.id IS NULL OR c.purged OR c.state IN (5, 6) THEN 1
                  ELSE 2 END
FROM ids i CROSS JOIN notified
LEFT JOIN cur c ON c.id = i.id
LEFT JOIN won w ON w.job_id = i.id)sql"},

    // Deletes ids $1 (distinct) that are final: a purge mark on the newest
    // entry, as purge_finished makes. Per id: 0 deleted, 1 not found, 2 not
    // final.
    Statement{stmt::kDeleteJobs, R"sql(
WITH ids AS (
  SELECT DISTINCT unnest($1::bigint[]) AS id
), cur AS (
  SELECT i.id, e.slot, e.entry_id, e.queue, e.state, e.purged, e.finalized_at
  FROM ids i
  CROSS JOIN LATERAL (SELECT * FROM {s}.entries x WHERE x.job_id = i.id
                      ORDER BY x.entry_id DESC LIMIT 1) e
  WHERE NOT EXISTS (SELECT 1 FROM {s}.later l WHERE l.job_id = i.id)
), won AS (
  INSERT INTO {s}.marks (slot, entry_id, stage, what, job_id, at)
  SELECT slot, entry_id, 3, 7, id, finalized_at FROM cur
  WHERE state BETWEEN 4 AND 6 AND NOT purged
  ON CONFLICT DO NOTHING
  RETURNING slot, entry_id, job_id
), tallied AS (
)sql" CONVEYOR_TALLY("SELECT c.queue, c.state, -1 FROM won w JOIN cur c ON c.slot = w.slot AND "
                     "c.entry_id = w.entry_id") R"sql(
)
SELECT i.id, CASE WHEN w.job_id IS NOT NULL THEN 0
                  WHEN EXISTS (SELECT 1 FROM {s}.later l WHERE l.job_id = i.id) THEN 2
                  WHEN c.id IS NULL OR c.purged OR c.state BETWEEN 4 AND 6 THEN 1
                  ELSE 2 END
FROM ids i
LEFT JOIN cur c ON c.id = i.id
LEFT JOIN won w ON w.job_id = i.id)sql"},

    // Queue $1's jobs with id > $2 in id order, at most $3, in states $4
    // (2: AVAILABLE with run_at > now $6; empty: all), of kind $5 ('' all).
    // A loose index scan over the queue's job ids (ready_list; `later` is the
    // scheduled backlog), each job read as get_job reads it. The recursive
    // CTE yields ids in increasing order and stops with the LIMIT.
    Statement{stmt::kListJobs, R"sql(
WITH RECURSIVE ids(id) AS (
  SELECT least((SELECT min(r.job_id) FROM {s}.ready r
                WHERE r.queue = $1::text AND r.job_id > $2::bigint),
               (SELECT min(l.job_id) FROM {s}.later l
                WHERE l.queue = $1::text AND l.job_id > $2::bigint))
  UNION ALL
  SELECT least((SELECT min(r.job_id) FROM {s}.ready r
                WHERE r.queue = $1::text AND r.job_id > ids.id),
               (SELECT min(l.job_id) FROM {s}.later l
                WHERE l.queue = $1::text AND l.job_id > ids.id))
  FROM ids WHERE ids.id IS NOT NULL
)
SELECT j.* FROM ids CROSS JOIN LATERAL (
  (SELECT 0 AS src, job_id, queue, kind, payload, priority, 1 AS state, attempt, max_attempts,
          run_at, created_at, 0::bigint AS finalized_at, 0::bigint AS lease_token,
          0::bigint AS lease_expires, last_error, cost, key, started_at, timeout_ms,
        false AS purged
   FROM {s}.later WHERE job_id = ids.id)
  UNION ALL
  (SELECT 1, job_id, queue, kind, payload, priority, state, attempt, max_attempts, run_at,
          created_at, finalized_at, lease_token, lease_expires, last_error, cost, key,
        started_at, timeout_ms, purged
   FROM {s}.entries WHERE job_id = ids.id
   ORDER BY entry_id DESC LIMIT 1)
  ORDER BY 1 LIMIT 1) j
WHERE ids.id IS NOT NULL AND NOT j.purged AND j.state <> 0
  AND ($5::text = '' OR j.kind = $5::text)
  AND (cardinality($4::integer[]) = 0
       OR (CASE WHEN j.state = 1 AND j.run_at > $6::bigint THEN 2 ELSE j.state END)
          = ANY($4::integer[]))
LIMIT $3::bigint)sql"},

    // queue_stats without counting entries: `tally` and `retired` summed.
    // Only the split of AVAILABLE reads jobs: `later` rows not due at the
    // host's now $1, and ring entries not due (rare: due when appended by
    // another clock), found per priority of the queue (a loose index scan)
    // by run_at, never by walking the claimed ones.
    Statement{stmt::kJobCounts, R"sql(
WITH t AS (
  SELECT queue, state, sum(n) AS n
  FROM (SELECT queue, state, n FROM {s}.tally
        UNION ALL SELECT queue, state, jobs FROM {s}.retired) AS x
  GROUP BY queue, state
), c AS (
  SELECT queue,
         coalesce(sum(n) FILTER (WHERE state = 1), 0) AS available,
         coalesce(sum(n) FILTER (WHERE state = 3), 0) AS running,
         coalesce(sum(n) FILTER (WHERE state = 4), 0) AS completed,
         coalesce(sum(n) FILTER (WHERE state = 5), 0) AS failed,
         coalesce(sum(n) FILTER (WHERE state = 6), 0) AS cancelled
  FROM t GROUP BY queue
), s AS (
  SELECT c.*,
         (SELECT count(*) FROM {s}.later l WHERE l.queue = c.queue AND l.run_at > $1::bigint)
         + (WITH RECURSIVE pr(p) AS (
              SELECT (SELECT min(r.priority) FROM {s}.ready r WHERE r.queue = c.queue)
              UNION ALL
              SELECT (SELECT min(r.priority) FROM {s}.ready r
                      WHERE r.queue = c.queue AND r.priority > pr.p)
              FROM pr WHERE pr.p IS NOT NULL)
            SELECT count(*) FROM pr
            CROSS JOIN LATERAL (
              SELECT 1 FROM {s}.ready r
              WHERE r.queue = c.queue AND r.priority = pr.p AND r.run_at > $1::bigint
                AND NOT EXISTS (SELECT 1 FROM {s}.marks m
                                WHERE m.slot = r.slot AND m.entry_id = r.entry_id
                                  AND m.stage = 1 OFFSET 0)
              OFFSET 0) AS f
            WHERE pr.p IS NOT NULL) AS scheduled
  FROM c WHERE c.available <> 0 OR c.running <> 0 OR c.completed <> 0 OR c.failed <> 0
            OR c.cancelled <> 0
)
SELECT coalesce(s.queue, p.name) COLLATE "C", coalesce(p.paused, false),
       coalesce(s.available - s.scheduled, 0)::bigint, coalesce(s.scheduled, 0)::bigint,
       coalesce(s.running, 0)::bigint, coalesce(s.completed, 0)::bigint,
       coalesce(s.failed, 0)::bigint, coalesce(s.cancelled, 0)::bigint,
       -- The oldest pending run_at, read only when something is pending: the
       -- due `later` rows, and per priority the first unclaimed due entry by
       -- run_at (this walks the queue's claimed entries of that priority
       -- still in the ring ahead of it).
       CASE WHEN s.available - s.scheduled > 0 THEN coalesce(least(
         (SELECT min(l.run_at) FROM {s}.later l
          WHERE l.queue = s.queue AND l.run_at <= $1::bigint),
         (WITH RECURSIVE pr(p) AS (
            SELECT (SELECT min(r.priority) FROM {s}.ready r WHERE r.queue = s.queue)
            UNION ALL
            SELECT (SELECT min(r.priority) FROM {s}.ready r
                    WHERE r.queue = s.queue AND r.priority > pr.p)
            FROM pr WHERE pr.p IS NOT NULL)
          SELECT min(f.run_at) FROM pr
          CROSS JOIN LATERAL (
            SELECT r.run_at FROM {s}.ready r
            WHERE r.queue = s.queue AND r.priority = pr.p AND r.run_at <= $1::bigint
              AND NOT EXISTS (SELECT 1 FROM {s}.marks m
                              WHERE m.slot = r.slot AND m.entry_id = r.entry_id
                                AND m.stage = 1 OFFSET 0)
            ORDER BY r.run_at, r.job_id
            LIMIT 1) AS f
          WHERE pr.p IS NOT NULL)), 0) ELSE 0 END::bigint
FROM s FULL JOIN (SELECT name, paused FROM {s}.queues WHERE paused) AS p ON p.name = s.queue
ORDER BY 1)sql"},

    // Counts of truncated finished jobs whose newest is past retention.
    Statement{stmt::kPurgeRetired, R"sql(
DELETE FROM {s}.retired WHERE newest < $1::bigint)sql"},

    // ABI 1.4 (schema 7): list_ready_keys from the first key, and after $9.
    Statement{stmt::kListReadyKeys, CONVEYOR_LIST_READY_KEYS_SQL("")},
    Statement{stmt::kListReadyKeysAfter, CONVEYOR_LIST_READY_KEYS_SQL(" AND r.key > $9::text")},
};

#undef CONVEYOR_ENTRY_COLUMNS
#undef CONVEYOR_CLAIMED_AT_OF_R
#undef CONVEYOR_CLAIM_MARKS_OF_LEASES
#undef CONVEYOR_CLAIM_SQL
#undef CONVEYOR_CLAIM_KEYS_SQL
#undef CONVEYOR_CLAIM_OF
#undef CONVEYOR_CLAIM_CAND
#undef CONVEYOR_CLAIM_KEYS_CAND
#undef CONVEYOR_CAND_COLUMNS
#undef CONVEYOR_CLAIM_HINT
#undef CONVEYOR_HINT_OF
#undef CONVEYOR_UNTAKEN
#undef CONVEYOR_LIST_READY_KEYS_STEP
#undef CONVEYOR_LIST_READY_KEYS_SQL
#undef CONVEYOR_TALLY

// Creates the ring's partitions and its row, or checks the slot count of an
// existing ring.
void set_up_ring(pqxx::connection& conn, const std::string& schema, uint32_t slots) {
  const std::string s = postgres::quote_identifier(schema);
  pqxx::work tx(conn);
  tx.exec_params("SELECT pg_advisory_xact_lock($1, hashtext($2))", kRingSetupLockClass, schema);
  pqxx::result ring = tx.exec("SELECT slots FROM " + s + ".ring");
  if (!ring.empty()) {
    const auto existing = ring[0][0].as<uint32_t>();
    if (existing != slots)
      throw sdk::Error(CONVEYOR_E_INVALID,
                       "PostgreSQL schema " + s + " holds a ring of " + std::to_string(existing) +
                           " slots, but storage option 'slots' is " + std::to_string(slots) +
                           "; set slots = " + std::to_string(existing) +
                           " (the slot count is fixed when the schema is created)");
    return;
  }
  for (uint32_t k = 0; k < slots; ++k) {
    const std::string v = std::to_string(k);
    tx.exec("CREATE TABLE " + ready_partition(schema, k) + " PARTITION OF " + s +
            ".ready FOR VALUES IN (" + v + ")");
    tx.exec("CREATE TABLE " + marks_partition(schema, k) + " PARTITION OF " + s +
            ".marks FOR VALUES IN (" + v + ")");
  }
  tx.exec_params("INSERT INTO " + s +
                     ".ring (slots, write_slot, rotated_at) VALUES ($1, 0, "
                     "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint)",
                 slots);
  tx.commit();
}

}  // namespace

std::string ready_partition(const std::string& schema, uint32_t slot) {
  return postgres::quote_identifier(schema) + ".\"ready_" + std::to_string(slot) + "\"";
}

std::string marks_partition(const std::string& schema, uint32_t slot) {
  return postgres::quote_identifier(schema) + ".\"marks_" + std::to_string(slot) + "\"";
}

std::string tally_partition(const std::string& schema, uint32_t tally_slot) {
  return postgres::quote_identifier(schema) + ".\"tally_" + std::to_string(tally_slot) + "\"";
}

std::string tally_slot_sql() { return CONVEYOR_TALLY_SLOT; }
#undef CONVEYOR_TALLY_SLOT

void migrate_schema(pqxx::connection& conn, const std::string& schema, uint32_t slots) {
  {
    pqxx::work tx(conn);
    const std::string s = postgres::quote_identifier(schema);
    if (tx.exec_params("SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NULL",
                       s + ".jobs", s + ".ready")[0][0]
            .as<bool>())
      throw sdk::Error(CONVEYOR_E_INVALID,
                       "PostgreSQL schema " + s +
                           " holds the tables of the canonical \"postgres\" plugin; give "
                           "postgres-queue a schema of its own (storage option 'schema')");
  }
  const std::vector<std::string>& steps = migration_steps();
  if (steps.size() != kSchemaVersion) throw std::logic_error("one migration step per version");
  postgres::apply_migrations(
      conn, schema, postgres::Migrations{"postgres-queue 0.1.0", "queue_schema_migrations", steps});
  set_up_ring(conn, schema, slots);
}

void configure_queue_session(pqxx::connection& conn) {
  pqxx::nontransaction tx(conn);
  tx.exec("SET enable_seqscan = off");
  // A disabled sequential scan still costs 1e10 where it is the only way
  // (the one-row ring table): far above jit_above_cost, and JIT-compiling
  // every claim took 400 ms.
  tx.exec("SET jit = off");
}

void register_statements(pqxx::connection& conn, const std::string& schema) {
  postgres::prepare_statements(conn, schema, kStatements);
  postgres::prepare_statements(conn, schema, postgres::kControlStatements);
}

std::string statement_sql(const std::string& name, const std::string& schema) {
  return postgres::statement_sql(kStatements, name, schema);
}

}  // namespace conveyor::pgqueue
