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
void configure_session(pqxx::connection& conn);

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
