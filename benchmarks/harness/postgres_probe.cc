#include "postgres_probe.hpp"

#include <fmt/format.h>
#include <pqxx/pqxx>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace conveyor::bench {

struct PostgresProbe::Impl {
  explicit Impl(const std::string& dsn) : conn(dsn) {}
  pqxx::connection conn;
};

PostgresProbe::PostgresProbe(const std::string& dsn) {
  try {
    impl_ = std::make_unique<Impl>(dsn);
  } catch (const std::exception& e) {
    throw std::runtime_error(
        fmt::format("cannot connect to PostgreSQL at {}: {}", describe_dsn(dsn), e.what()));
  }
}

PostgresProbe::~PostgresProbe() = default;

int64_t PostgresProbe::wal_bytes() {
  pqxx::nontransaction tx(impl_->conn);
  return tx.exec1("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")[0].as<int64_t>();
}

TupleStats PostgresProbe::tuples(const std::string& schema) {
  pqxx::work tx(impl_->conn);
  const pqxx::row r = tx.exec_params1(
      "SELECT coalesce(sum(n_live_tup), 0)::bigint, coalesce(sum(n_dead_tup), 0)::bigint,"
      " coalesce(sum(n_tup_ins), 0)::bigint, coalesce(sum(n_tup_upd), 0)::bigint,"
      " coalesce(sum(n_tup_del), 0)::bigint,"
      " coalesce(sum(vacuum_count + autovacuum_count), 0)::bigint"
      " FROM pg_stat_user_tables WHERE schemaname = $1",
      schema);
  tx.commit();
  return TupleStats{r[0].as<int64_t>(), r[1].as<int64_t>(), r[2].as<int64_t>(),
                    r[3].as<int64_t>(), r[4].as<int64_t>(), r[5].as<int64_t>()};
}

TupleStats PostgresProbe::settled_tuples(const std::string& schema) {
  TupleStats last = tuples(schema);
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    TupleStats now = tuples(schema);
    if (now == last) return now;
    last = now;
  }
  return last;
}

int64_t PostgresProbe::relation_bytes(const std::string& schema) {
  pqxx::nontransaction tx(impl_->conn);
  // Partitioned parents ('p') own no storage; their partitions are 'r' rows.
  return tx
      .exec_params1(
          "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c"
          " JOIN pg_namespace n ON n.oid = c.relnamespace"
          " WHERE n.nspname = $1 AND c.relkind IN ('r', 'm')",
          schema)[0]
      .as<int64_t>();
}

std::string PostgresProbe::session_state(int pid) {
  pqxx::nontransaction tx(impl_->conn);
  const pqxx::result r =
      tx.exec_params("SELECT coalesce(state, '') FROM pg_stat_activity WHERE pid = $1", pid);
  return r.empty() ? std::string() : r[0][0].as<std::string>();
}

int64_t PostgresProbe::other_sessions() {
  pqxx::nontransaction tx(impl_->conn);
  return tx
      .exec1(
          "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
          " AND pid <> pg_backend_pid() AND backend_type = 'client backend'")[0]
      .as<int64_t>();
}

void PostgresProbe::drop_schema(const std::string& schema) {
  pqxx::work tx(impl_->conn);
  tx.exec("DROP SCHEMA IF EXISTS " + tx.quote_name(schema) + " CASCADE");
  tx.commit();
}

std::map<int, double> PostgresProbe::server_cpu_by_pid() {
  std::vector<int> pids;
  {
    pqxx::nontransaction tx(impl_->conn);
    for (const auto& row : tx.exec("SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                                   " AND (datname = current_database() OR datname IS NULL)"))
      pids.push_back(row[0].as<int>());
  }
  std::map<int, double> out;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  for (int pid : pids) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    if (!std::getline(f, stat)) continue;  // another machine, or the process is gone
    // Fields after "pid (comm) ": state is field 3; utime and stime are 14 and 15.
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stod(field);
      if (i == 15) stime = std::stod(field);
    }
    out[pid] = (utime + stime) / tick;
  }
  return out;
}

double server_cpu_delta(const std::map<int, double>& before, const std::map<int, double>& after) {
  double sum = 0;
  for (const auto& [pid, cpu] : after) {
    auto it = before.find(pid);
    sum += it == before.end() ? cpu : std::max(0.0, cpu - it->second);
  }
  return sum;
}

std::string PostgresProbe::server_version() {
  pqxx::nontransaction tx(impl_->conn);
  return tx.exec1("SHOW server_version")[0].as<std::string>();
}

std::string describe_dsn(const std::string& dsn) {
  // URI form: keep what follows '@' (or "://" when there is no user part).
  auto scheme = dsn.find("://");
  if (scheme != std::string::npos) {
    auto at = dsn.find('@', scheme);
    std::string rest = dsn.substr(at == std::string::npos ? scheme + 3 : at + 1);
    auto q = rest.find('?');
    return q == std::string::npos ? rest : rest.substr(0, q);
  }
  // key=value form: drop password=...
  std::string out;
  size_t pos = 0;
  while (pos < dsn.size()) {
    size_t end = dsn.find(' ', pos);
    if (end == std::string::npos) end = dsn.size();
    std::string kv = dsn.substr(pos, end - pos);
    if (!kv.empty() && kv.rfind("password=", 0) != 0) out += (out.empty() ? "" : " ") + kv;
    pos = end + 1;
  }
  return out;
}

std::string PostgresProbe::durability_settings() {
  pqxx::nontransaction tx(impl_->conn);
  std::string out;
  for (const char* name : {"fsync", "synchronous_commit", "full_page_writes", "shared_buffers"})
    out += fmt::format("{}{}={}", out.empty() ? "" : " ", name,
                       tx.exec1(std::string("SHOW ") + name)[0].as<std::string>());
  return out;
}

}  // namespace conveyor::bench
