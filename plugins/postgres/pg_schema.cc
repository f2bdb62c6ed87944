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

// One entry per version step: steps[i] upgrades version i to i + 1. Never
// edit a released step; append.
const std::vector<std::string>& migration_steps() {
  static const std::vector<std::string> steps = {std::string(kJobsV1) + kControlTables};
  return steps;
}

// Every statement the plugin runs. Values are always bound parameters; "{s}"
// is the validated, quoted schema name.
constexpr std::array kStatements = {
    Statement{stmt::kEnqueue, R"sql(
WITH registered AS (
  INSERT INTO {s}.queues (name) SELECT unnest($8::text[]) ON CONFLICT (name) DO NOTHING
), inserted AS (
  INSERT INTO {s}.jobs (queue, kind, payload, priority, state, max_attempts, run_at, created_at)
  SELECT t.queue, t.kind, decode(t.payload, 'hex'), t.priority, 1, t.max_attempts, t.run_at, $7
  FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::integer[], $6::bigint[])
       WITH ORDINALITY AS t(queue, kind, payload, priority, max_attempts, run_at, ord)
  ORDER BY t.ord
  RETURNING id
), notified AS (
  -- One notification per queue of the batch, sent when this commits. (Not
  -- only for queues with jobs due now: enqueue has no host clock to tell.)
  SELECT count(pg_notify($9::text, q)) AS n FROM unnest($8::text[]) AS q
)
SELECT inserted.id FROM inserted CROSS JOIN notified)sql"},

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
UPDATE {s}.jobs AS j
SET state = 3, attempt = j.attempt + 1, lease_token = $4::bigint, lease_expires = $5::bigint,
    claimed_at = $2::bigint, claimed_by = $6::text
WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING j.id, j.kind, j.payload, j.priority, j.attempt, j.max_attempts, j.run_at,
          j.created_at, j.last_error)sql"},

    // Lease-guarded batch updates: one statement for the whole batch, a
    // lease applies only while the job runs under its token. RETURNING names
    // the leases that were current. The plugin sends the leases sorted by id
    // so concurrent batches over the same jobs (a heartbeat and a
    // completion) lock them in one order; should a plan ever lock them
    // otherwise, the deadlock is retried. The plan (generic: it cannot know
    // the batch's size) walks the leases and looks each job up by primary
    // key, so its cost grows linearly with the batch.
    Statement{stmt::kComplete, R"sql(
UPDATE {s}.jobs AS j SET state = 4, finalized_at = $1::bigint, lease_token = 0, lease_expires = 0
FROM unnest($2::bigint[], $3::bigint[]) AS l(id, token)
WHERE j.id = l.id AND j.lease_token = l.token AND j.state = 3
RETURNING j.id, l.token)sql"},

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
WHERE id = $3::bigint AND state = 3 AND lease_token = $4::bigint)sql"},

    Statement{stmt::kFailFinal, R"sql(
UPDATE {s}.jobs
SET state = 5, finalized_at = $1::bigint, last_error = $2::text, lease_token = 0,
    lease_expires = 0
WHERE id = $3::bigint AND state = 3 AND lease_token = $4::bigint)sql"},

    // run_at is kept: a rescued job keeps its place in its queue.
    Statement{stmt::kRescue, R"sql(
WITH expired AS (
  SELECT id FROM {s}.jobs
  WHERE lease_token <> 0 AND state = 3 AND lease_expires < $1::bigint
  ORDER BY lease_expires, id
  LIMIT $3::bigint
  FOR UPDATE SKIP LOCKED
)
UPDATE {s}.jobs AS j
SET state = CASE WHEN j.attempt < j.max_attempts THEN 1 ELSE 5 END,
    finalized_at = CASE WHEN j.attempt < j.max_attempts THEN 0 ELSE $1::bigint END,
    lease_token = 0, lease_expires = 0, last_error = $2::text
WHERE j.id = ANY(ARRAY(SELECT id FROM expired)))sql"},

    Statement{stmt::kCancel, R"sql(
UPDATE {s}.jobs SET state = 6, finalized_at = $1::bigint, lease_token = 0, lease_expires = 0
WHERE id = $2::bigint AND state < 4)sql"},

    Statement{stmt::kQueueStats, CONVEYOR_QUEUE_STATS_SQL("{s}.jobs")},

    Statement{stmt::kGetJob, R"sql(
SELECT id, queue, kind, payload, priority, state, attempt, max_attempts, run_at, created_at,
       finalized_at, lease_token, lease_expires, last_error
FROM {s}.jobs WHERE id = $1::bigint)sql"},

    Statement{stmt::kPurge, R"sql(
WITH doomed AS (
  SELECT id FROM {s}.jobs
  WHERE state >= 4 AND finalized_at < $1::bigint
  ORDER BY finalized_at, id
  LIMIT $2::bigint
  FOR UPDATE SKIP LOCKED
)
DELETE FROM {s}.jobs WHERE id = ANY(ARRAY(SELECT id FROM doomed)))sql"},

    // ABI 1.1. One statement each (all or none), primary-key lookups only:
    // the rows applied to, and (the outer SELECT sees the snapshot before the
    // change) which of the ids exist at all.
    Statement{stmt::kRetryJobs, R"sql(
WITH retried AS (
  UPDATE {s}.jobs
  SET state = 1, run_at = $1::bigint, attempt = 0, finalized_at = 0, lease_token = 0,
      lease_expires = 0
  WHERE id = ANY($2::bigint[]) AND state >= 5
  RETURNING id
)
SELECT j.id, r.id IS NOT NULL FROM {s}.jobs AS j LEFT JOIN retried AS r ON r.id = j.id
WHERE j.id = ANY($2::bigint[]))sql"},

    Statement{stmt::kDeleteJobs, R"sql(
WITH deleted AS (
  DELETE FROM {s}.jobs WHERE id = ANY($1::bigint[]) AND state >= 4 RETURNING id
)
SELECT j.id, d.id IS NOT NULL FROM {s}.jobs AS j LEFT JOIN deleted AS d ON d.id = j.id
WHERE j.id = ANY($1::bigint[]))sql"},
};

}  // namespace

void migrate_schema(pqxx::connection& conn, const std::string& schema) {
  const std::vector<std::string>& steps = migration_steps();
  if (steps.size() != kSchemaVersion) throw std::logic_error("one migration step per version");
  apply_migrations(conn, schema, Migrations{"postgres 0.1.0", "schema_migrations", steps});
}

void register_statements(pqxx::connection& conn, const std::string& schema) {
  prepare_statements(conn, schema, kStatements);
  prepare_statements(conn, schema, kControlStatements);
}

std::string statement_sql(const std::string& name, const std::string& schema) {
  return postgres::statement_sql(kStatements, name, schema);
}

}  // namespace conveyor::postgres
