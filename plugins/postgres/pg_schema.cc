#include "pg_schema.hpp"

#include "control_store.hpp"
#include "job_calls.hpp"
#include "pg_options.hpp"
#include "pg_sql.hpp"

#include <conveyor/storage_plugin.h>
#include <conveyor/storage_plugin.hpp>

#include <pqxx/nontransaction>
#include <pqxx/transaction>

#include <array>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace conveyor::postgres {
namespace {

static_assert(CONVEYOR_JOB_AVAILABLE == 1 && CONVEYOR_JOB_RUNNING == 3 &&
                  CONVEYOR_JOB_COMPLETED == 4 && CONVEYOR_JOB_FAILED == 5 &&
                  CONVEYOR_JOB_CANCELLED == 6,
              "the SQL below spells the state numbers out (final states are state >= 4)");

// Version 1: the jobs table and its indexes, then the control tables
// (control_store.hpp). "{s}" stands for the quoted schema.
constexpr const char* kJobsV1 = R"sql(
CREATE TABLE {s}.jobs (
  id            bigint   GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue         text     COLLATE "C" NOT NULL,
  kind          text     NOT NULL,
  payload       bytea    NOT NULL,
  priority      integer  NOT NULL,
  state         smallint NOT NULL,  -- 1 available, 3 running, 4 completed, 5 failed, 6 cancelled
  attempt       integer  NOT NULL DEFAULT 0,
  max_attempts  integer  NOT NULL,
  -- Times are microseconds since the Unix epoch, always the host's clock.
  run_at        bigint   NOT NULL,
  created_at    bigint   NOT NULL,
  finalized_at  bigint   NOT NULL DEFAULT 0,
  lease_token   bigint   NOT NULL DEFAULT 0,
  lease_expires bigint   NOT NULL DEFAULT 0,
  -- Diagnostics, not part of the ABI: when and by which process ("host:pid")
  -- the job was last claimed (pickup latency, how work spread).
  claimed_at    bigint   NOT NULL DEFAULT 0,
  claimed_by    text     NOT NULL DEFAULT '',
  last_error    text     NOT NULL DEFAULT ''
) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
-- The claim reads only ready rows, in claim order.
CREATE INDEX jobs_ready ON {s}.jobs (queue, priority, run_at, id) WHERE state = 1;
-- Running jobs by lease expiry, for rescue. lease_token <> 0 exactly while a
-- job runs; the predicate names the token, not the state, so the planner can
-- never pick this index for the lease-guarded updates by id (after an ANALYZE
-- that saw no running jobs it would think it tiny and scan every running job
-- and dead entry for each batch).
CREATE INDEX jobs_lease ON {s}.jobs (lease_expires) WHERE lease_token <> 0;
CREATE INDEX jobs_final ON {s}.jobs (finalized_at) WHERE state >= 4;
)sql";

// Version 2: ABI 1.1 (job operations). Building the indexes locks the jobs
// table against writes for as long as they take (seconds per million rows).
constexpr const char* kJobsV2 = R"sql(
-- claim_kinds: one queue's ready rows of one kind in claim order, so a kind
-- filter never reads other kinds' backlog. Partial like jobs_ready: a claim
-- takes the row out of both and completions never touch them.
CREATE INDEX jobs_ready_kind ON {s}.jobs (queue, kind, priority, run_at, id) WHERE state = 1;
-- list_jobs of retained jobs: an index range of at most a page per
-- (queue, state, kind), in id order; without a kind, one range per kind.
CREATE INDEX jobs_list ON {s}.jobs (queue, state, kind, id) WHERE state >= 4;
-- job_counts: retained (final) jobs per queue and state as sums of deltas.
-- Every statement that moves jobs into or out of a final state appends one
-- row per queue and state it changed, in its own transaction: appends never
-- wait on one another (one counter row per queue would serialize every
-- completing process on it). compact_counts folds the rows into one per
-- (queue, state). Processes of an older plugin version still running after
-- this migration do not append: stop them before migrating.
CREATE TABLE {s}.job_count_deltas (
  queue text     COLLATE "C" NOT NULL,
  state smallint NOT NULL,  -- 4 completed, 5 failed, 6 cancelled
  delta bigint   NOT NULL
);
INSERT INTO {s}.job_count_deltas (queue, state, delta)
  SELECT queue, state, count(*) FROM {s}.jobs WHERE state >= 4 GROUP BY queue, state;
)sql";

// Version 3: ABI 1.2 (job cost, fleet rate limits, shared state). ADD COLUMN
// with a constant default rewrites no rows (PostgreSQL 11+).
constexpr const char* kJobsV3 = R"sql(
ALTER TABLE {s}.jobs ADD COLUMN cost integer NOT NULL DEFAULT 1;
)sql";

// Version 4: kSharedStateInPlace (swap_shared_state leaves no dead tuples).
// Version 5: kSharedAdd (ABI 1.3 add_shared_state).

// Version 6: ABI 1.4 (job keys). Existing jobs get the empty key (a constant
// default: no row is rewritten). COLLATE "C": keys compare and sort bytewise,
// as list_ready_keys reports them. jobs_ready_key serves claim_keys (one
// (queue, key) range of ready rows per key, in claim order) and
// list_ready_keys (the next key with a ready row is one probe, and a key's
// ready rows are counted in its own range); partial like jobs_ready, so keys
// without AVAILABLE jobs are not in it. Building it locks the jobs table
// against writes for as long as it takes (seconds per million ready rows).
constexpr const char* kJobsV6 = R"sql(
ALTER TABLE {s}.jobs ADD COLUMN key text COLLATE "C" NOT NULL DEFAULT '';
CREATE INDEX jobs_ready_key ON {s}.jobs (queue, key, priority, run_at, id) WHERE state = 1;
)sql";

// Version 7: kKeySettings (ABI 1.5: key settings, delete_shared_states).
// Version 8: kSharedAdds (ABI 1.5 add_shared_states).

// Version 9: ABI 1.6 (a job's own timeout). Existing jobs get timeout 0, the
// queue's (a constant default: no row is rewritten). A job's started_at is
// claimed_at, which every claim has written since version 1 (the claim's
// now, in the claim's own UPDATE) and nothing else changes: so jobs kept,
// running ones included, report when their latest attempt started.
constexpr const char* kJobsV9 = R"sql(
ALTER TABLE {s}.jobs ADD COLUMN timeout_ms bigint NOT NULL DEFAULT 0;
)sql";

// One entry per version step: steps[i] upgrades version i to i + 1. Never
// edit a released step; append.
const std::vector<std::string>& migration_steps() {
  static const std::vector<std::string> steps = {std::string(kJobsV1) + kControlTables,
                                                 kJobsV2,
                                                 std::string(kJobsV3) + kControlTablesV12,
                                                 kSharedStateInPlace,
                                                 kSharedAdd,
                                                 kJobsV6,
                                                 kKeySettings,
                                                 kSharedAdds,
                                                 kJobsV9};
  return steps;
}

// The columns get_job reads (stored_job_at), for a table aliased j.
#define CONVEYOR_PG_JOB_COLUMNS                                                            \
  "j.id, j.queue, j.kind, j.payload, j.priority, j.state, j.attempt, j.max_attempts, "     \
  "j.run_at, j.created_at, j.finalized_at, j.lease_token, j.lease_expires, j.last_error, " \
  "j.cost, j.key, j.claimed_at, j.timeout_ms"

// What a claim statement returns (claimed_job_at), for the jobs aliased j.
#define CONVEYOR_PG_CLAIMED_COLUMNS                                                       \
  "RETURNING j.id, j.kind, j.payload, j.priority, j.attempt, j.max_attempts, j.run_at,\n" \
  "          j.created_at, j.last_error, j.cost, j.key, j.claimed_at, j.timeout_ms"

// The claim's UPDATE of the rows picked (a CTE of ids): the lease, in the
// statement's own commit mode (CONVEYOR_PG_LEASE_COMMIT). "id =
// ANY(ARRAY(...))" keeps it on primary-key lookups in the generic plan.
#define CONVEYOR_PG_CLAIM_PICKED                                                     \
  "UPDATE {s}.jobs AS j\n"                                                           \
  "SET state = 3, attempt = j.attempt + 1, lease_token = $4::bigint,\n"              \
  "    lease_expires = $5::bigint, claimed_at = $2::bigint, claimed_by = $6::text\n" \
  "WHERE j.id = ANY(ARRAY(SELECT id FROM picked)) AND " CONVEYOR_PG_LEASE_COMMIT     \
  "\n" CONVEYOR_PG_CLAIMED_COLUMNS

// claim_keys (ABI 1.4): per key $7[i], its first $8[i] ready jobs in claim
// order, one jobs_ready_key range each, locked, SKIP LOCKED; FILTER narrows
// them (the kinds, $9). Pause and the lease as claim; $3 (the sum of the
// counts) bounds the whole. The key is asked for as a range (>= and <=, the
// same rows as =) ordered by the key first: with "key = k.key" the key is a
// constant of the lateral subquery, and a plan made from statistics that saw
// one key (every job of an older schema has the empty key) walked jobs_ready
// with the key as a filter, past other keys' jobs; ordered by a range of
// keys, only jobs_ready_key gives the order, and its scan starts at the
// key's first job and stops after its last.
#define CONVEYOR_PG_CLAIM_KEYS_SQL(FILTER)                                               \
  "WITH picked AS (\n"                                                                   \
  "  SELECT c.id FROM unnest($7::text[], $8::bigint[]) AS k(key, n)\n"                   \
  "  CROSS JOIN LATERAL (\n"                                                             \
  "    SELECT j.id FROM {s}.jobs AS j\n"                                                 \
  "    WHERE j.queue = $1::text AND j.key >= k.key AND j.key <= k.key AND j.state = 1\n" \
  "      AND j.run_at <= $2::bigint" FILTER                                              \
  "\n"                                                                                   \
  "    ORDER BY j.key, j.priority, j.run_at, j.id\n"                                     \
  "    LIMIT k.n\n"                                                                      \
  "    FOR UPDATE SKIP LOCKED\n"                                                         \
  "  ) AS c\n"                                                                           \
  "  WHERE NOT EXISTS (SELECT 1 FROM {s}.queues WHERE name = $1::text AND paused)\n"     \
  "  LIMIT $3::bigint\n"                                                                 \
  ")\n" CONVEYOR_PG_CLAIM_PICKED

// list_ready_keys (ABI 1.4): a loose index scan of jobs_ready_key, so only
// keys with AVAILABLE jobs are read: the first key (FIRST: after $5), then
// each next key is the least one above the previous (one index probe). Each
// key's ready jobs (run_at <= the host's now, $2) are counted in its own
// range (asked for as claim_keys asks), at most $4 of them; keys with none
// (all scheduled) are passed over. The recursion runs only as far as the
// outer LIMIT ($3 keys) pulls it.
#define CONVEYOR_PG_LIST_READY_KEYS_SQL(FIRST)                           \
  "WITH RECURSIVE keys(key) AS (\n"                                      \
  "  (SELECT j.key FROM {s}.jobs AS j\n"                                 \
  "   WHERE j.queue = $1::text AND j.state = 1" FIRST                    \
  "\n"                                                                   \
  "   ORDER BY j.key LIMIT 1)\n"                                         \
  "  UNION ALL\n"                                                        \
  "  SELECT n.key FROM keys AS k\n"                                      \
  "  CROSS JOIN LATERAL (\n"                                             \
  "    SELECT j.key FROM {s}.jobs AS j\n"                                \
  "    WHERE j.queue = $1::text AND j.state = 1 AND j.key > k.key\n"     \
  "    ORDER BY j.key LIMIT 1) AS n\n"                                   \
  ")\n"                                                                  \
  "SELECT k.key, c.ready FROM keys AS k\n"                               \
  "CROSS JOIN LATERAL (\n"                                               \
  "  SELECT count(*) AS ready FROM (\n"                                  \
  "    SELECT 1 FROM {s}.jobs AS j\n"                                    \
  "    WHERE j.queue = $1::text AND j.key >= k.key AND j.key <= k.key\n" \
  "      AND j.state = 1\n"                                              \
  "      AND j.run_at <= $2::bigint\n"                                   \
  "    ORDER BY j.key, j.priority, j.run_at, j.id\n"                     \
  "    LIMIT $4::bigint) AS x\n"                                         \
  ") AS c\n"                                                             \
  "WHERE c.ready > 0\n"                                                  \
  "LIMIT $3::bigint"

// rescue_expired: the expired leases, oldest first, made available again or
// failed when out of attempts (those are counted). run_at is kept: a rescued
// job keeps its place in its queue.
#define CONVEYOR_PG_RESCUE_CTES                                                             \
  "WITH expired AS (\n"                                                                     \
  "  SELECT id FROM {s}.jobs\n"                                                             \
  "  WHERE lease_token <> 0 AND state = 3 AND lease_expires < $1::bigint\n"                 \
  "  ORDER BY lease_expires, id\n"                                                          \
  "  LIMIT $3::bigint\n"                                                                    \
  "  FOR UPDATE SKIP LOCKED\n"                                                              \
  "), rescued AS (\n"                                                                       \
  "  UPDATE {s}.jobs AS j\n"                                                                \
  "  SET state = CASE WHEN j.attempt < j.max_attempts THEN 1 ELSE 5 END,\n"                 \
  "      finalized_at = CASE WHEN j.attempt < j.max_attempts THEN 0 ELSE $1::bigint END,\n" \
  "      lease_token = 0, lease_expires = 0, last_error = $2::text\n"                       \
  "  WHERE j.id = ANY(ARRAY(SELECT id FROM expired))\n"                                     \
  "  RETURNING " CONVEYOR_PG_JOB_COLUMNS                                                    \
  "\n"                                                                                      \
  "), counted AS (\n"                                                                       \
  "  INSERT INTO {s}.job_count_deltas (queue, state, delta)\n"                              \
  "  SELECT queue, 5, count(*) FROM rescued WHERE state = 5 GROUP BY queue\n"               \
  ")\n"

// Every statement the plugin runs. Values are always bound parameters; "{s}"
// is the validated, quoted schema name.
constexpr std::array kStatements = {
    Statement{stmt::kEnqueue, R"sql(
WITH registered AS (
  INSERT INTO {s}.queues (name) SELECT unnest($8::text[]) ON CONFLICT (name) DO NOTHING
), inserted AS (
  INSERT INTO {s}.jobs (queue, kind, payload, priority, state, max_attempts, run_at, created_at,
                       cost, key, timeout_ms)
  SELECT t.queue, t.kind, decode(t.payload, 'hex'), t.priority, 1, t.max_attempts, t.run_at, $7,
         t.cost, t.key, t.timeout_ms
  FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::integer[], $6::bigint[],
              $10::integer[], $13::text[], $14::bigint[])
       WITH ORDINALITY AS t(queue, kind, payload, priority, max_attempts, run_at, cost, key,
                            timeout_ms, ord)
  ORDER BY t.ord
  RETURNING id
), notified AS (
  -- One notification per queue of the batch, sent when this commits. (Not
  -- only for queues with jobs due now: enqueue has no host clock to tell.)
  SELECT count(pg_notify($9::text, q)) AS n FROM unnest($8::text[]) AS q
), announced AS (
  -- Delayed jobs: "<run_at> <queue>" on the later channel ($11), which
  -- listeners turn into a wake at that time (CONVEYOR_CAP_NOTIFY_DUE).
  SELECT count(pg_notify($11::text, p)) AS n FROM unnest($12::text[]) AS p
)
SELECT inserted.id FROM inserted CROSS JOIN notified CROSS JOIN announced)sql"},

    // The selection is a CTE so the planner keeps the LIMIT; SKIP LOCKED lets
    // concurrent claimers pass each other; the lease is set in the same
    // statement. Eligibility uses the host's now ($2), never the server's.
    // "id = ANY(ARRAY(...))" keeps the UPDATE on primary-key lookups even in
    // the generic plan of the prepared statement, which cannot know the
    // LIMIT and would otherwise hash-join against a scan of the whole table.
    Statement{stmt::kClaim, R"sql(
WITH picked AS (
  SELECT id FROM {s}.jobs
  WHERE queue = $1::text AND state = 1 AND run_at <= $2::bigint
    AND NOT EXISTS (SELECT 1 FROM {s}.queues WHERE name = $1::text AND paused)
  ORDER BY priority, run_at, id
  LIMIT $3::bigint
  FOR UPDATE SKIP LOCKED
)
)sql" CONVEYOR_PG_CLAIM_PICKED},

    // Lease-guarded batch updates: one statement for the whole batch, a
    // lease applies only while the job runs under its token. RETURNING names
    // the leases that were current. The plugin sends the leases sorted by id
    // so concurrent batches over the same jobs (a heartbeat and a
    // completion) lock them in one order; should a plan ever lock them
    // otherwise, the deadlock is retried. The plan (generic: it cannot know
    // the batch's size) walks the leases and looks each job up by primary
    // key, so its cost grows linearly with the batch.
    // The counts of completed jobs grow by one row per queue of the batch.
    Statement{stmt::kComplete, R"sql(
WITH done AS (
  UPDATE {s}.jobs AS j SET state = 4, finalized_at = $1::bigint, lease_token = 0, lease_expires = 0
  FROM unnest($2::bigint[], $3::bigint[]) AS l(id, token)
  WHERE j.id = l.id AND j.lease_token = l.token AND j.state = 3
    AND )sql" CONVEYOR_PG_LEASE_COMMIT R"sql(
  RETURNING j.id, l.token, j.queue
), counted AS (
  INSERT INTO {s}.job_count_deltas (queue, state, delta)
  SELECT queue, 4, count(*) FROM done GROUP BY queue
)
SELECT id, token FROM done)sql"},

    Statement{stmt::kExtend, R"sql(
UPDATE {s}.jobs AS j SET lease_expires = $1::bigint
FROM unnest($2::bigint[], $3::bigint[]) AS l(id, token)
WHERE j.id = l.id AND j.lease_token = l.token AND j.state = 3
RETURNING j.id, l.token)sql"},

    Statement{stmt::kRelease, R"sql(
UPDATE {s}.jobs AS j
SET state = 1, run_at = $1::bigint, attempt = greatest(j.attempt - 1, 0), lease_token = 0,
    lease_expires = 0
FROM unnest($2::bigint[], $3::bigint[]) AS l(id, token)
WHERE j.id = l.id AND j.lease_token = l.token AND j.state = 3
RETURNING j.id, l.token)sql"},

    // After a claim whose reply was lost with its connection: give back
    // whatever that claim (its unique token) took, unspent.
    Statement{stmt::kReleaseOrphans, R"sql(
UPDATE {s}.jobs
SET state = 1, attempt = greatest(attempt - 1, 0), lease_token = 0, lease_expires = 0
WHERE lease_token <> 0 AND state = 3 AND lease_expires = $2::bigint
  AND lease_token = $1::bigint)sql"},

    Statement{stmt::kFailRetry, R"sql(
UPDATE {s}.jobs
SET state = 1, run_at = $1::bigint, last_error = $2::text, lease_token = 0, lease_expires = 0
WHERE id = $3::bigint AND state = 3 AND lease_token = $4::bigint
  AND )sql" CONVEYOR_PG_LEASE_COMMIT R"sql()sql"},

    Statement{stmt::kFailFinal, R"sql(
WITH failed AS (
  UPDATE {s}.jobs
  SET state = 5, finalized_at = $1::bigint, last_error = $2::text, lease_token = 0,
      lease_expires = 0
  WHERE id = $3::bigint AND state = 3 AND lease_token = $4::bigint
    AND )sql" CONVEYOR_PG_LEASE_COMMIT R"sql(
  RETURNING id, queue
), counted AS (
  INSERT INTO {s}.job_count_deltas (queue, state, delta) SELECT queue, 5, 1 FROM failed
)
SELECT id FROM failed)sql"},

    Statement{stmt::kRescue, CONVEYOR_PG_RESCUE_CTES "SELECT count(*) FROM rescued"},
    Statement{
        stmt::kRescueReporting, CONVEYOR_PG_RESCUE_CTES
        "SELECT id, queue, kind, payload, priority, state, attempt, max_attempts, run_at,\n"
        "       created_at, finalized_at, lease_token, lease_expires, last_error, cost, key,\n"
        "       claimed_at, timeout_ms\n"
        "FROM rescued"},

    Statement{stmt::kCancel, R"sql(
WITH cancelled AS (
  UPDATE {s}.jobs SET state = 6, finalized_at = $1::bigint, lease_token = 0, lease_expires = 0
  WHERE id = $2::bigint AND state < 4
  RETURNING id, queue
), counted AS (
  INSERT INTO {s}.job_count_deltas (queue, state, delta) SELECT queue, 6, 1 FROM cancelled
)
SELECT id FROM cancelled)sql"},

    // Scans every retained job (ABI 1.0); job_counts does not.
    Statement{stmt::kQueueStats, R"sql(
SELECT coalesce(c.queue, p.name) COLLATE "C" AS name, coalesce(p.paused, false),
       coalesce(c.pending, 0), coalesce(c.scheduled, 0), coalesce(c.running, 0),
       coalesce(c.completed, 0), coalesce(c.failed, 0), coalesce(c.cancelled, 0),
       coalesce(c.oldest_pending, 0)
FROM (
  SELECT queue,
         count(*) FILTER (WHERE state = 1 AND run_at <= $1::bigint) AS pending,
         count(*) FILTER (WHERE state = 1 AND run_at > $1::bigint) AS scheduled,
         count(*) FILTER (WHERE state = 3) AS running,
         count(*) FILTER (WHERE state = 4) AS completed,
         count(*) FILTER (WHERE state = 5) AS failed,
         count(*) FILTER (WHERE state = 6) AS cancelled,
         min(run_at) FILTER (WHERE state = 1 AND run_at <= $1::bigint) AS oldest_pending
  FROM {s}.jobs GROUP BY queue
) AS c
FULL JOIN (SELECT name, paused FROM {s}.queues WHERE paused) AS p ON p.name = c.queue
ORDER BY 1)sql"},

    Statement{stmt::kGetJob, R"sql(
SELECT id, queue, kind, payload, priority, state, attempt, max_attempts, run_at, created_at,
       finalized_at, lease_token, lease_expires, last_error, cost, key, claimed_at, timeout_ms
FROM {s}.jobs WHERE id = $1::bigint)sql"},

    Statement{stmt::kPurge, R"sql(
WITH doomed AS (
  SELECT id FROM {s}.jobs
  WHERE state >= 4 AND finalized_at < $1::bigint
  ORDER BY finalized_at, id
  LIMIT $2::bigint
  FOR UPDATE SKIP LOCKED
), purged AS (
  DELETE FROM {s}.jobs WHERE id = ANY(ARRAY(SELECT id FROM doomed)) RETURNING queue, state
), counted AS (
  INSERT INTO {s}.job_count_deltas (queue, state, delta)
  SELECT queue, state, -count(*) FROM purged GROUP BY queue, state
)
SELECT count(*) FROM purged)sql"},

    // ABI 1.1. One statement each (all or none), primary-key lookups only:
    // the rows applied to, and (the outer SELECT sees the snapshot before the
    // change) which of the ids exist at all; the counts follow the
    // change. The rows leaving a final state are locked first so that their
    // state before the change is known to the counts.
    Statement{stmt::kRetryJobs, R"sql(
WITH final AS (
  SELECT id, queue, state FROM {s}.jobs WHERE id = ANY($2::bigint[]) AND state >= 5 FOR UPDATE
), retried AS (
  UPDATE {s}.jobs AS j
  SET state = 1, run_at = $1::bigint, attempt = 0, finalized_at = 0, lease_token = 0,
      lease_expires = 0
  FROM final AS f
  WHERE j.id = f.id AND j.state >= 5
  RETURNING j.id, f.queue, f.state
), counted AS (
  INSERT INTO {s}.job_count_deltas (queue, state, delta)
  SELECT queue, state, -count(*) FROM retried GROUP BY queue, state
), notified AS (
  -- Ready again now: one notification per queue, as an enqueue sends.
  SELECT count(pg_notify($3::text, q)) AS n FROM (SELECT DISTINCT queue FROM retried) AS x(q)
)
SELECT j.id, r.id IS NOT NULL FROM {s}.jobs AS j LEFT JOIN retried AS r ON r.id = j.id
CROSS JOIN notified
WHERE j.id = ANY($2::bigint[]))sql"},

    Statement{stmt::kDeleteJobs, R"sql(
WITH deleted AS (
  DELETE FROM {s}.jobs WHERE id = ANY($1::bigint[]) AND state >= 4 RETURNING id, queue, state
), counted AS (
  INSERT INTO {s}.job_count_deltas (queue, state, delta)
  SELECT queue, state, -count(*) FROM deleted GROUP BY queue, state
)
SELECT j.id, d.id IS NOT NULL FROM {s}.jobs AS j LEFT JOIN deleted AS d ON d.id = j.id
WHERE j.id = ANY($1::bigint[]))sql"},

    // The first max_jobs ready jobs of the kinds $7 in claim order: the first
    // max_jobs of each kind (one jobs_ready_kind range each, locked), merged.
    // Otherwise as claim.
    Statement{stmt::kClaimKinds, R"sql(
WITH picked AS (
  SELECT c.id FROM unnest($7::text[]) AS k(kind)
  CROSS JOIN LATERAL (
    SELECT j.id, j.priority, j.run_at FROM {s}.jobs AS j
    WHERE j.queue = $1::text AND j.kind = k.kind AND j.state = 1 AND j.run_at <= $2::bigint
    ORDER BY j.priority, j.run_at, j.id
    LIMIT $3::bigint
    FOR UPDATE SKIP LOCKED
  ) AS c
  WHERE NOT EXISTS (SELECT 1 FROM {s}.queues WHERE name = $1::text AND paused)
  ORDER BY c.priority, c.run_at, c.id
  LIMIT $3::bigint
)
)sql" CONVEYOR_PG_CLAIM_PICKED},

    // list_jobs, one statement per kind of range; each returns at most $limit
    // jobs of the queue with id > $after in id order, and none reads the
    // queue's history. The caller disables sequential scans, and no
    // statement gives the planner a reason to walk the primary key (which
    // would read every retained job after $after): live ids are picked from
    // the partial indexes of ready and running jobs (bounded by the backlog)
    // in a fenced CTE before the keyset applies; retained ones are read
    // ordered by (kind, id) under "kind <= k AND (kind, id) > (k, $after)",
    // the same rows as "kind = k AND id > $after", which only jobs_list gives
    // in that order and which seeks straight to the page.
    Statement{stmt::kListAvailable, R"sql(
WITH live AS MATERIALIZED (
  SELECT id FROM {s}.jobs
  WHERE queue = $1::text AND state = 1 AND run_at >= $3::bigint AND run_at <= $4::bigint
    AND ($6::text = '' OR kind = $6::text)
)
SELECT )sql" CONVEYOR_PG_JOB_COLUMNS R"sql( FROM {s}.jobs AS j
WHERE j.id = ANY(ARRAY(SELECT id FROM live WHERE id > $2::bigint ORDER BY id LIMIT $5::bigint))
ORDER BY j.id)sql"},

    Statement{stmt::kListRunning, R"sql(
WITH live AS MATERIALIZED (
  SELECT id FROM {s}.jobs
  WHERE lease_token <> 0 AND state = 3 AND queue = $1::text AND ($4::text = '' OR kind = $4::text)
)
SELECT )sql" CONVEYOR_PG_JOB_COLUMNS R"sql( FROM {s}.jobs AS j
WHERE j.id = ANY(ARRAY(SELECT id FROM live WHERE id > $2::bigint ORDER BY id LIMIT $3::bigint))
ORDER BY j.id)sql"},

    // Retained jobs of one final state $2 and kind $3: one jobs_list range.
    Statement{stmt::kListFinal, R"sql(
SELECT )sql" CONVEYOR_PG_JOB_COLUMNS R"sql( FROM {s}.jobs AS j
WHERE j.queue = $1::text AND j.state = $2::smallint AND j.state >= 4
  AND j.kind <= $3::text AND (j.kind, j.id) > ($3::text, $4::bigint)
ORDER BY j.kind, j.id
LIMIT $5::bigint)sql"},

    // Retained jobs of one final state $2, any kind: the state's kinds found
    // one index probe each (kinds are a short list per queue), a jobs_list
    // range of at most $4 per kind, merged.
    Statement{stmt::kListFinalAnyKind, R"sql(
WITH RECURSIVE kinds(kind) AS (
  (SELECT kind FROM {s}.jobs
   WHERE queue = $1::text AND state = $2::smallint AND state >= 4
   ORDER BY kind LIMIT 1)
  UNION ALL
  SELECT (SELECT j.kind FROM {s}.jobs AS j
          WHERE j.queue = $1::text AND j.state = $2::smallint AND j.state >= 4 AND j.kind > k.kind
          ORDER BY j.kind LIMIT 1)
  FROM kinds AS k WHERE k.kind IS NOT NULL
), ids AS (
  SELECT r.id FROM kinds AS k
  CROSS JOIN LATERAL (
    SELECT j.id FROM {s}.jobs AS j
    WHERE j.queue = $1::text AND j.state = $2::smallint AND j.state >= 4
      AND j.kind <= k.kind AND (j.kind, j.id) > (k.kind, $3::bigint)
    ORDER BY j.kind, j.id
    LIMIT $4::bigint
  ) AS r
  WHERE k.kind IS NOT NULL
  ORDER BY r.id
  LIMIT $4::bigint
)
SELECT )sql" CONVEYOR_PG_JOB_COLUMNS R"sql( FROM {s}.jobs AS j
WHERE j.id = ANY(ARRAY(SELECT id FROM ids))
ORDER BY j.id)sql"},

    // job_counts: retained jobs from the deltas, live ones from the partial
    // indexes of ready and running jobs (the caller disables sequential scans
    // so that stale statistics cannot make this read every retained job).
    // Rows (name, paused, pending, scheduled, running, completed, failed,
    // cancelled, oldest pending run_at, delta rows of the queue), name order.
    Statement{stmt::kJobCounts, R"sql(
WITH finals AS (
  SELECT queue, coalesce(sum(delta) FILTER (WHERE state = 4), 0) AS completed,
         coalesce(sum(delta) FILTER (WHERE state = 5), 0) AS failed,
         coalesce(sum(delta) FILTER (WHERE state = 6), 0) AS cancelled, count(*) AS delta_rows
  FROM {s}.job_count_deltas GROUP BY queue
), ready AS (
  SELECT queue, count(*) FILTER (WHERE run_at <= $1::bigint) AS pending,
         count(*) FILTER (WHERE run_at > $1::bigint) AS scheduled,
         min(run_at) FILTER (WHERE run_at <= $1::bigint) AS oldest_pending
  FROM {s}.jobs WHERE state = 1 GROUP BY queue
), running AS (
  SELECT queue, count(*) AS running FROM {s}.jobs WHERE lease_token <> 0 AND state = 3
  GROUP BY queue
), paused AS (
  SELECT name AS queue FROM {s}.queues WHERE paused
), names AS (
  SELECT queue FROM finals UNION SELECT queue FROM ready UNION SELECT queue FROM running
  UNION SELECT queue FROM paused
)
SELECT n.queue, p.queue IS NOT NULL, coalesce(r.pending, 0), coalesce(r.scheduled, 0),
       coalesce(u.running, 0), coalesce(f.completed, 0), coalesce(f.failed, 0),
       coalesce(f.cancelled, 0), coalesce(r.oldest_pending, 0), coalesce(f.delta_rows, 0)
FROM names AS n
LEFT JOIN finals AS f ON f.queue = n.queue
LEFT JOIN ready AS r ON r.queue = n.queue
LEFT JOIN running AS u ON u.queue = n.queue
LEFT JOIN paused AS p ON p.queue = n.queue
ORDER BY n.queue COLLATE "C")sql"},

    // Folds the count deltas into one row per (queue, state), all in one
    // statement: rows appended meanwhile are not in its snapshot and stay.
    // One process at a time (the others skip: nothing to wait for).
    Statement{stmt::kCompactCounts, R"sql(
WITH turn AS (
  SELECT pg_try_advisory_xact_lock(1131376247, '{s}.job_count_deltas'::regclass::oid::integer)
         AS mine
), folded AS (
  DELETE FROM {s}.job_count_deltas WHERE (SELECT mine FROM turn) RETURNING queue, state, delta
)
INSERT INTO {s}.job_count_deltas (queue, state, delta)
SELECT queue, state, sum(delta) FROM folded GROUP BY queue, state HAVING sum(delta) <> 0)sql"},

    // ABI 1.4 (schema 6).
    Statement{stmt::kClaimKeys, CONVEYOR_PG_CLAIM_KEYS_SQL("")},
    Statement{stmt::kClaimKeysKinds,
              CONVEYOR_PG_CLAIM_KEYS_SQL("\n      AND j.kind = ANY($9::text[])")},
    Statement{stmt::kListReadyKeys, CONVEYOR_PG_LIST_READY_KEYS_SQL("")},
    Statement{stmt::kListReadyKeysAfter, CONVEYOR_PG_LIST_READY_KEYS_SQL(" AND j.key > $5::text")},
};

}  // namespace

void migrate_schema(pqxx::connection& conn, const std::string& schema, int version) {
  const std::vector<std::string>& steps = migration_steps();
  if (steps.size() != kSchemaVersion) throw std::logic_error("one migration step per version");
  if (version < 1 || version > kSchemaVersion)
    throw std::invalid_argument("schema version " + std::to_string(version) + " is not 1.." +
                                std::to_string(kSchemaVersion));
  apply_migrations(conn, schema,
                   Migrations{"postgres 0.1.0", "schema_migrations",
                              std::span<const std::string>(steps).first(version)});
}

void register_statements(pqxx::connection& conn, const std::string& schema) {
  prepare_statements(conn, schema, kStatements);
  prepare_statements(conn, schema, kControlStatements);
}

std::string statement_sql(const std::string& name, const std::string& schema) {
  return postgres::statement_sql(kStatements, name, schema);
}

}  // namespace conveyor::postgres
