// SQL text shared by the PostgreSQL plugins' schemas: statements named and
// prepared per connection with the schema filled in, the session settings
// every pooled connection gets, and versioned migrations applied under an
// advisory lock (N processes starting at once migrate once).
#ifndef CONVEYOR_PLUGINS_POSTGRES_COMMON_PG_SQL_HPP
#define CONVEYOR_PLUGINS_POSTGRES_COMMON_PG_SQL_HPP

#include <pqxx/connection>

#include <span>
#include <string>
#include <string_view>

namespace conveyor::postgres {

// A prepared statement: "{s}" in sql stands for the validated, quoted schema.
// Values are always bound parameters.
struct Statement {
  const char* name;
  const char* sql;
};

// sql with every "{s}" replaced by quoted.
std::string with_schema(std::string_view sql, const std::string& quoted);

// Defines statements on conn for the tables of schema (validated). libpqxx
// prepares each on the server at its first use on that connection.
void prepare_statements(pqxx::connection& conn, const std::string& schema,
                        std::span<const Statement> statements);

// The SQL of the statement called name for schema. Throws std::out_of_range.
std::string statement_sql(std::span<const Statement> statements, const std::string& name,
                          const std::string& schema);

// Makes the server plan every prepared statement once, for any parameters
// (plan_cache_mode = force_generic_plan, PostgreSQL 12+). Custom plans are
// made from statistics that a drain makes wrong within seconds (all jobs
// available at the last ANALYZE, most running or completed now): they chose
// sequential scans and quadratic joins that stalled completions for seconds.
//
// Also sets the session's conveyor.lease_commit, which the statements that
// end or start a lease read through CONVEYOR_PG_LEASE_COMMIT: "off" with
// async_lease_commits, else the session's own synchronous_commit.
void configure_session(pqxx::connection& conn, bool async_lease_commits);

// A condition (always true) for the WHERE clause of a statement that claims,
// completes or fails jobs: it sets synchronous_commit for the statement's own
// transaction to the session's conveyor.lease_commit (configure_session; the
// session's synchronous_commit when unset). One evaluation per statement (an
// uncorrelated subquery), before any row is written.
//
// Why a lease statement may skip the WAL flush: a server crash loses at most
// the last few hundred milliseconds of such commits (3 x wal_writer_delay),
// and each loss ends with the job run again, which at-least-once allows: a
// lost claim leaves it ready, a lost completion or failure leaves it running
// under a lease that expires and is rescued. Enqueues, job operations, limits
// and shared state keep the server's synchronous_commit: an acknowledged
// enqueue is never lost. WAL order is kept, so no later synchronous commit
// survives a lost one before it.
#define CONVEYOR_PG_LEASE_COMMIT                                                  \
  "(SELECT set_config('synchronous_commit', coalesce(nullif(current_setting("     \
  "'conveyor.lease_commit', true), ''), current_setting('synchronous_commit')), " \
  "true)) IS NOT NULL"

// A plugin's schema history: steps[i] upgrades version i to i + 1 ("{s}" is
// the schema); never edit a released step, append. The applied version is
// kept in the table versions_table of the schema.
struct Migrations {
  const char* plugin;          // "postgres 0.1.0", for messages
  const char* versions_table;  // e.g. "schema_migrations"
  std::span<const std::string> steps;
};

// Creates the schema if needed and applies the missing steps, in one
// transaction under an advisory lock on the schema's name. Throws
// sdk::Error(CONVEYOR_E_INVALID) naming both versions when the schema is
// newer than the plugin; libpqxx exceptions otherwise.
void apply_migrations(pqxx::connection& conn, const std::string& schema,
                      const Migrations& migrations);

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_COMMON_PG_SQL_HPP
