#include "pg_schema.hpp"

#include "pg_options.hpp"

#include <conveyor/storage_plugin.h>
#include <conveyor/storage_plugin.hpp>

#include <pqxx/nontransaction>
#include <pqxx/transaction>

#include <array>
#include <iterator>
#include <stdexcept>
#include <utility>

namespace conveyor::postgres {
namespace {

static_assert(CONVEYOR_JOB_AVAILABLE == 1 && CONVEYOR_JOB_RUNNING == 3 &&
                  CONVEYOR_JOB_COMPLETED == 4 && CONVEYOR_JOB_FAILED == 5 &&
                  CONVEYOR_JOB_CANCELLED == 6,
              "the SQL below spells the state numbers out (final states are state >= 4)");

// Advisory-lock class for migrations ("Conv"); the object is the schema's hash.
constexpr int kMigrationLockClass = 0x436f6e76;

// One entry per version step: kMigrations[i] upgrades version i to i + 1.
// "{s}" stands for the quoted schema. Never edit a released step; append.
constexpr const char* kMigrations[] = {
    // 0 -> 1
    R"sql(
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
-- Every queue ever enqueued into or paused (list_queues reads only this).
CREATE TABLE {s}.queues (
  name   text    COLLATE "C" PRIMARY KEY,
  paused boolean NOT NULL DEFAULT false
);
CREATE TABLE {s}.rate_limits (
  queue      text             COLLATE "C" PRIMARY KEY,
  rate       double precision NOT NULL,
  burst      bigint           NOT NULL,
  updated_at bigint           NOT NULL
);
CREATE TABLE {s}.meta (
  key   text   PRIMARY KEY,
  value bigint NOT NULL
);
INSERT INTO {s}.meta (key, value) VALUES ('change_marker', 0);
)sql",
};
static_assert(std::size(kMigrations) == kSchemaVersion, "one migration step per schema version");

struct Statement {
  const char* name;
  const char* sql;
};

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
    run_at = CASE WHEN j.attempt < j.max_attempts THEN $1::bigint ELSE j.run_at END,
    finalized_at = CASE WHEN j.attempt < j.max_attempts THEN 0 ELSE $1::bigint END,
    lease_token = 0, lease_expires = 0, last_error = $2::text
WHERE j.id = ANY(ARRAY(SELECT id FROM expired)))sql"},

    Statement{stmt::kCancel, R"sql(
UPDATE {s}.jobs SET state = 6, finalized_at = $1::bigint, lease_token = 0, lease_expires = 0
WHERE id = $2::bigint AND state < 4)sql"},

    // Pause/resume, the change marker and the notification in one statement:
    // all or nothing, and the notification leaves when it commits.
    Statement{stmt::kSetPaused, R"sql(
WITH upserted AS (
  INSERT INTO {s}.queues (name, paused) VALUES ($1::text, $2::boolean)
  ON CONFLICT (name) DO UPDATE SET paused = excluded.paused
  RETURNING name
), bumped AS (
  UPDATE {s}.meta SET value = value + 1 WHERE key = 'change_marker' RETURNING value
)
SELECT pg_notify($3::text, $4::text) FROM upserted CROSS JOIN bumped)sql"},

    Statement{stmt::kQueueStats, R"sql(
SELECT coalesce(c.queue, p.name) COLLATE "C" AS name, coalesce(p.paused, false),
       coalesce(c.pending, 0), coalesce(c.scheduled, 0), coalesce(c.running, 0),
       coalesce(c.completed, 0), coalesce(c.failed, 0), coalesce(c.cancelled, 0)
FROM (
  SELECT queue,
         count(*) FILTER (WHERE state = 1 AND run_at <= $1::bigint) AS pending,
         count(*) FILTER (WHERE state = 1 AND run_at > $1::bigint) AS scheduled,
         count(*) FILTER (WHERE state = 3) AS running,
         count(*) FILTER (WHERE state = 4) AS completed,
         count(*) FILTER (WHERE state = 5) AS failed,
         count(*) FILTER (WHERE state = 6) AS cancelled
  FROM {s}.jobs GROUP BY queue
) AS c
FULL JOIN (SELECT name, paused FROM {s}.queues WHERE paused) AS p ON p.name = c.queue
ORDER BY 1)sql"},

    Statement{stmt::kListQueues, R"sql(
SELECT name, paused FROM {s}.queues ORDER BY name)sql"},

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

    Statement{stmt::kSetRateLimit, R"sql(
WITH upserted AS (
  INSERT INTO {s}.rate_limits (queue, rate, burst, updated_at)
  VALUES ($1::text, $2::double precision, $3::bigint, $4::bigint)
  ON CONFLICT (queue) DO UPDATE
    SET rate = excluded.rate, burst = excluded.burst, updated_at = excluded.updated_at
  RETURNING queue
), bumped AS (
  UPDATE {s}.meta SET value = value + 1 WHERE key = 'change_marker' RETURNING value
)
SELECT pg_notify($5::text, $6::text) FROM upserted CROSS JOIN bumped)sql"},

    // One row when an override was deleted, none when there was none.
    Statement{stmt::kDeleteRateLimit, R"sql(
WITH deleted AS (
  DELETE FROM {s}.rate_limits WHERE queue = $1::text RETURNING queue
), bumped AS (
  UPDATE {s}.meta SET value = value + 1
  WHERE key = 'change_marker' AND EXISTS (SELECT 1 FROM deleted)
  RETURNING value
)
SELECT pg_notify($2::text, $3::text) FROM deleted CROSS JOIN bumped)sql"},

    Statement{stmt::kListRateLimits, R"sql(
SELECT queue, rate, burst, updated_at FROM {s}.rate_limits ORDER BY queue)sql"},

    Statement{stmt::kChangeMarker, R"sql(
SELECT value FROM {s}.meta WHERE key = 'change_marker')sql"},
};

std::string with_schema(std::string_view sql, const std::string& quoted) {
  std::string out;
  out.reserve(sql.size() + 16 * quoted.size());
  for (size_t i = 0; i < sql.size();) {
    if (sql.compare(i, 3, "{s}") == 0) {
      out += quoted;
      i += 3;
    } else {
      out += sql[i++];
    }
  }
  return out;
}

}  // namespace

void migrate_schema(pqxx::connection& conn, const std::string& schema) {
  const std::string s = quote_identifier(schema);
  pqxx::work tx(conn);
  tx.exec_params("SELECT pg_advisory_xact_lock($1, hashtext($2))", kMigrationLockClass, schema);
  // Look before creating: CREATE ... IF NOT EXISTS needs the CREATE privilege
  // even when the object exists, and an operator may have created it.
  if (tx.exec_params("SELECT 1 FROM pg_namespace WHERE nspname = $1", schema).empty())
    tx.exec("CREATE SCHEMA " + s);
  if (tx.exec_params("SELECT to_regclass($1) IS NULL", s + ".schema_migrations")[0][0].as<bool>())
    tx.exec("CREATE TABLE " + s +
            ".schema_migrations (version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())");
  const int current =
      tx.exec("SELECT coalesce(max(version), 0) FROM " + s + ".schema_migrations")[0][0].as<int>();
  if (current > kSchemaVersion)
    throw sdk::Error(CONVEYOR_E_INVALID,
                     "PostgreSQL schema " + s + " has version " + std::to_string(current) +
                         ", newer than version " + std::to_string(kSchemaVersion) +
                         " that this plugin (postgres 0.1.0) knows; upgrade Conveyor");
  for (int v = current; v < kSchemaVersion; ++v) {
    tx.exec(with_schema(kMigrations[v], s));
    tx.exec_params("INSERT INTO " + s + ".schema_migrations (version) VALUES ($1)", v + 1);
  }
  tx.commit();
}

void register_statements(pqxx::connection& conn, const std::string& schema) {
  const std::string s = quote_identifier(schema);
  for (const Statement& st : kStatements) conn.prepare(st.name, with_schema(st.sql, s));
}

void configure_session(pqxx::connection& conn) {
  pqxx::nontransaction tx(conn);
  tx.exec("SET plan_cache_mode = force_generic_plan");
}

std::string statement_sql(const std::string& name, const std::string& schema) {
  for (const Statement& st : kStatements)
    if (name == st.name) return with_schema(st.sql, quote_identifier(schema));
  throw std::out_of_range("no statement named " + name);
}

}  // namespace conveyor::postgres
