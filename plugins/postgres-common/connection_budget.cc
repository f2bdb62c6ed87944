#include "connection_budget.hpp"

#include <pqxx/nontransaction>

namespace conveyor::postgres {

ConnectionBudget read_connection_budget(pqxx::connection& c) {
  pqxx::nontransaction tx(c);
  const pqxx::row r = tx.exec1(R"sql(
    WITH a AS (
      SELECT datid, usesysid FROM pg_stat_activity
       WHERE backend_type = 'client backend' AND pid <> pg_backend_pid())
    SELECT current_setting('max_connections')::bigint,
           current_setting('superuser_reserved_connections')::bigint
             + coalesce(nullif(current_setting('reserved_connections', true), '')::bigint, 0),
           (SELECT count(*) FROM a),
           d.datconnlimit, (SELECT count(*) FROM a WHERE a.datid = d.oid),
           r.rolconnlimit, (SELECT count(*) FROM a WHERE a.usesysid = r.oid),
           d.datname, r.rolname
      FROM pg_database d, pg_roles r
     WHERE d.datname = current_database() AND r.rolname = current_user)sql");
  ConnectionBudget b;
  b.max_connections = r[0].as<int64_t>();
  b.reserved = r[1].as<int64_t>();
  b.others = r[2].as<int64_t>();
  b.database_limit = r[3].as<int64_t>();
  b.database_others = r[4].as<int64_t>();
  b.role_limit = r[5].as<int64_t>();
  b.role_others = r[6].as<int64_t>();
  b.database = r[7].as<std::string>();
  b.role = r[8].as<std::string>();
  return b;
}

std::optional<std::string> connection_budget_warning(const ConnectionBudget& b, uint32_t pool_size,
                                                     const std::string& target) {
  const int64_t need = static_cast<int64_t>(pool_size) + 1;
  const int64_t usable = b.max_connections - b.reserved;
  std::string why;
  if (const int64_t left = usable - b.others; need > left)
    why += "only " + std::to_string(std::max<int64_t>(left, 0)) +
           " connection(s) are left: max_connections " + std::to_string(b.max_connections) + " - " +
           std::to_string(b.reserved) + " reserved for superusers - " + std::to_string(b.others) +
           " open by other clients";
  if (b.database_limit >= 0) {
    if (const int64_t left = b.database_limit - b.database_others; need > left)
      why += std::string(why.empty() ? "" : "; ") + "database " + b.database + " allows " +
             std::to_string(b.database_limit) + " connection(s) (CONNECTION LIMIT) and " +
             std::to_string(b.database_others) + " are open by other clients";
  }
  if (b.role_limit >= 0) {
    if (const int64_t left = b.role_limit - b.role_others; need > left)
      why += std::string(why.empty() ? "" : "; ") + "role " + b.role + " allows " +
             std::to_string(b.role_limit) + " connection(s) (CONNECTION LIMIT) and " +
             std::to_string(b.role_others) + " are open by other sessions of it";
  }
  if (why.empty()) return std::nullopt;
  return "PostgreSQL at " + target + ": this process may open " + std::to_string(need) +
         " connections (pool_size " + std::to_string(pool_size) + " + 1 for LISTEN), but " + why +
         ". Once they run out, new connections are refused (\"too many clients\") to this "
         "process and to every other client. Lower pool_size, raise max_connections, or put a "
         "pooler in front (PgBouncer in session mode). For a fleet: servers x (pool_size + 1) + "
         "other clients <= max_connections - superuser_reserved_connections (here " +
         std::to_string(usable) + ")";
}

}  // namespace conveyor::postgres
