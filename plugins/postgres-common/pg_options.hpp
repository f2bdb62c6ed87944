// The [storage.options] every PostgreSQL plugin takes (dsn, schema,
// pool_size, connect_timeout_s, lease_commit, statement_timeout_ms,
// idle_close_s), parsed and checked; documented at the top of
// plugins/postgres/postgres_storage.cc.
#ifndef CONVEYOR_PLUGINS_POSTGRES_PG_OPTIONS_HPP
#define CONVEYOR_PLUGINS_POSTGRES_PG_OPTIONS_HPP

#include <conveyor/storage_plugin.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace conveyor::postgres {

struct PgOptions {
  // A libpq key=value connection string: the user's dsn (URI or key=value)
  // plus the defaults the plugin adds when the dsn leaves them out.
  std::string conninfo;
  // "host:port/dbname as user" for messages; never contains the password.
  std::string target;
  std::string schema = "conveyor";
  uint32_t pool_size = 8;
  uint32_t connect_timeout_s = 5;
  // lease_commit = "async" (the default): claims, completions and failures
  // commit without waiting for their WAL flush (synchronous_commit = off for
  // those statements alone; see configure_session). "sync": the session's
  // synchronous_commit, as every other statement.
  bool async_lease_commits = true;
  // The plugin's own statement_timeout on each of its connections, whatever
  // the database or role sets (0: no limit).
  uint32_t statement_timeout_ms = 60000;
  // Pooled connections idle this long are closed, so a drained process gives
  // its server slots back (0: kept open).
  uint32_t idle_close_s = 60;
};

// Throws sdk::Error(CONVEYOR_E_INVALID) naming the option and what is allowed.
// extra_keys: the plugin's own keys (it parses them itself); any other key is
// refused naming it and every known key.
PgOptions parse_options(const sdk::Options& options,
                        std::span<const std::string_view> extra_keys = {});

// The value of key as a whole number in [min, max], fallback when absent.
// Throws sdk::Error(CONVEYOR_E_INVALID) naming the option and the range.
uint32_t parse_bounded(const sdk::Options& options, const char* key, uint32_t fallback,
                       uint32_t min, uint32_t max);

// [a-z_][a-z0-9_]{0,62}, not starting with "pg_" (reserved by PostgreSQL).
bool is_valid_schema_name(std::string_view name) noexcept;

// A validated identifier in double quotes, ready to put into SQL text.
std::string quote_identifier(std::string_view name);

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_PG_OPTIONS_HPP
