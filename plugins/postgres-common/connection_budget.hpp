// Whether a process's connections fit in what the server has left: read at
// open, and a warning naming the numbers and the fix when pool_size + 1 (the
// LISTEN connection) does not fit. PostgreSQL refuses a connection over a
// limit ("sorry, too many clients already"), to this process and every
// other client alike, so running out is found out late and far away; the
// warning says it up front.
#ifndef CONVEYOR_PLUGINS_POSTGRES_COMMON_CONNECTION_BUDGET_HPP
#define CONVEYOR_PLUGINS_POSTGRES_COMMON_CONNECTION_BUDGET_HPP

#include <pqxx/connection>

#include <cstdint>
#include <optional>
#include <string>

namespace conveyor::postgres {

struct ConnectionBudget {
  int64_t max_connections = 0;
  // superuser_reserved_connections (+ reserved_connections, PostgreSQL 16+).
  int64_t reserved = 0;
  int64_t others = 0;           // client connections open now, but the one reading this
  int64_t database_limit = -1;  // the database's CONNECTION LIMIT (-1: none)
  int64_t database_others = 0;  // ... and its client connections, but this one
  int64_t role_limit = -1;      // the role's CONNECTION LIMIT (-1: none)
  int64_t role_others = 0;
  std::string database;
  std::string role;
};

// Reads the budget on c (any role may: pg_stat_activity shows every
// session's database and role).
ConnectionBudget read_connection_budget(pqxx::connection& c);

// The warning when pool_size + 1 connections do not fit (nothing when they
// do). target names the server.
std::optional<std::string> connection_budget_warning(const ConnectionBudget& b, uint32_t pool_size,
                                                     const std::string& target);

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_COMMON_CONNECTION_BUDGET_HPP
