#include "pg_sql.hpp"

#include "pg_options.hpp"

#include <conveyor/storage_plugin.hpp>

#include <pqxx/nontransaction>
#include <pqxx/transaction>

#include <stdexcept>

namespace conveyor::postgres {
namespace {

// Advisory-lock class for migrations ("Conv"); the object is the schema's hash.
constexpr int kMigrationLockClass = 0x436f6e76;

}  // namespace

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

void prepare_statements(pqxx::connection& conn, const std::string& schema,
                        std::span<const Statement> statements) {
  const std::string s = quote_identifier(schema);
  for (const Statement& st : statements) conn.prepare(st.name, with_schema(st.sql, s));
}

std::string statement_sql(std::span<const Statement> statements, const std::string& name,
                          const std::string& schema) {
  for (const Statement& st : statements)
    if (name == st.name) return with_schema(st.sql, quote_identifier(schema));
  throw std::out_of_range("no statement named " + name);
}

void configure_session(pqxx::connection& conn, bool async_lease_commits) {
  pqxx::nontransaction tx(conn);
  tx.exec("SET plan_cache_mode = force_generic_plan");
  tx.exec(async_lease_commits
              ? "SET conveyor.lease_commit = 'off'"
              : "SELECT set_config('conveyor.lease_commit', current_setting('synchronous_commit'), "
                "false)");
}

void apply_migrations(pqxx::connection& conn, const std::string& schema,
                      const Migrations& migrations) {
  const std::string s = quote_identifier(schema);
  const std::string versions = s + "." + migrations.versions_table;
  const int latest = static_cast<int>(migrations.steps.size());
  pqxx::work tx(conn);
  tx.exec_params("SELECT pg_advisory_xact_lock($1, hashtext($2))", kMigrationLockClass, schema);
  // Look before creating: CREATE ... IF NOT EXISTS needs the CREATE privilege
  // even when the object exists, and an operator may have created it.
  if (tx.exec_params("SELECT 1 FROM pg_namespace WHERE nspname = $1", schema).empty())
    tx.exec("CREATE SCHEMA " + s);
  if (tx.exec_params("SELECT to_regclass($1) IS NULL", versions)[0][0].as<bool>())
    tx.exec("CREATE TABLE " + versions +
            " (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())");
  const int current = tx.exec("SELECT coalesce(max(version), 0) FROM " + versions)[0][0].as<int>();
  if (current > latest)
    throw sdk::Error(CONVEYOR_E_INVALID, "PostgreSQL schema " + s + " has version " +
                                             std::to_string(current) + ", newer than version " +
                                             std::to_string(latest) + " that this plugin (" +
                                             migrations.plugin + ") knows; upgrade Conveyor");
  for (int v = current; v < latest; ++v) {
    tx.exec(with_schema(migrations.steps[v], s));
    tx.exec_params("INSERT INTO " + versions + " (version) VALUES ($1)", v + 1);
  }
  tx.commit();
}

}  // namespace conveyor::postgres
