// PostgresProbe: the bench's own connection to a PostgreSQL backend's
// database, for what the engine cannot report: WAL written, dead tuples, and
// dropping the scratch schemas the workloads ran in.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace conveyor::bench {

// Sums over every table of one schema, from pg_stat_user_tables.
struct TupleStats {
  int64_t live = 0;
  int64_t dead = 0;      // n_dead_tup now
  int64_t inserted = 0;  // n_tup_ins
  int64_t updated = 0;   // n_tup_upd (each leaves a dead version)
  int64_t deleted = 0;   // n_tup_del
  int64_t vacuums = 0;   // vacuum_count + autovacuum_count
  bool operator==(const TupleStats&) const = default;
};

class PostgresProbe {
 public:
  // Connects. Throws std::runtime_error naming the DSN's host on failure.
  explicit PostgresProbe(const std::string& dsn);
  ~PostgresProbe();
  PostgresProbe(const PostgresProbe&) = delete;
  PostgresProbe& operator=(const PostgresProbe&) = delete;

  // Bytes of WAL written since the cluster began (pg_current_wal_lsn).
  int64_t wal_bytes();
  // Statistics are read in a fresh transaction each time (no cached snapshot).
  TupleStats tuples(const std::string& schema);
  // Statistics after every closed session's counters arrived: a backend that
  // exits leaves pg_stat_activity a moment before it flushes its counters, so
  // this reads until two readings 250 ms apart agree (5 s at most).
  TupleStats settled_tuples(const std::string& schema);
  // Bytes on disk of every table of one schema, indexes and TOAST included.
  int64_t relation_bytes(const std::string& schema);
  // Other sessions connected to this database (the engine's pool, mostly).
  int64_t other_sessions();
  // pg_stat_activity's state of one session ("idle in transaction", ...);
  // empty when no such session exists.
  std::string session_state(int pid);
  void drop_schema(const std::string& schema);
  // CPU seconds used so far by each server process of this database, plus the
  // cluster's background processes (from /proc: only when the server runs on
  // this machine; empty otherwise). The probe's own session is left out.
  std::map<int, double> server_cpu_by_pid();
  std::string server_version();
  // "fsync=on synchronous_commit=on full_page_writes=on shared_buffers=128MB":
  // what a throughput figure depends on, stated beside it.
  std::string durability_settings();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// CPU seconds the server spent between two server_cpu_by_pid() readings:
// processes in both count their growth, processes new in after count in full
// (processes that exited in between are missed).
double server_cpu_delta(const std::map<int, double>& before, const std::map<int, double>& after);

// "postgresql://user@host:port/db" -> "host:port/db" (no password), for messages.
std::string describe_dsn(const std::string& dsn);

}  // namespace conveyor::bench
