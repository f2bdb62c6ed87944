// The PostgreSQL reference: the canonical claim and complete as bare SQL in a
// loop, no engine, in a scratch schema conveyor_bench_ref with a table shaped
// like the postgres plugin's (its columns, indexes and autovacuum settings;
// no pause check, no diagnostics columns). Each of 4 clients (own connection, prepared
// statements) repeats, in 2 transactions per batch:
//   WITH c AS (SELECT id ... ORDER BY priority, run_at, id LIMIT 100
//              FOR UPDATE SKIP LOCKED) UPDATE ... FROM c RETURNING ...;  COMMIT
//   UPDATE ... SET state = completed WHERE id = ANY($ids) AND lease_token = $t;  COMMIT
// until the queue is empty.
#include "bench_engine.hpp"
#include "postgres_probe.hpp"
#include "sample_stats.hpp"
#include "workloads.hpp"

#include <pqxx/pqxx>

#include <latch>
#include <map>
#include <optional>
#include <thread>

namespace conveyor::bench {
namespace {

constexpr const char* kSchema = "conveyor_bench_ref";
constexpr uint32_t kClients = 4;

constexpr const char* kCreate = R"sql(
CREATE SCHEMA conveyor_bench_ref;
CREATE TABLE conveyor_bench_ref.jobs (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue         text     COLLATE "C" NOT NULL,
  kind          text     NOT NULL,
  payload       bytea    NOT NULL,
  priority      integer  NOT NULL,
  state         smallint NOT NULL,
  attempt       integer  NOT NULL DEFAULT 0,
  max_attempts  integer  NOT NULL,
  run_at        bigint   NOT NULL,
  created_at    bigint   NOT NULL,
  finalized_at  bigint   NOT NULL DEFAULT 0,
  lease_token   bigint   NOT NULL DEFAULT 0,
  lease_expires bigint   NOT NULL DEFAULT 0,
  last_error    text     NOT NULL DEFAULT ''
) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
CREATE INDEX jobs_ready ON conveyor_bench_ref.jobs (queue, priority, run_at, id) WHERE state = 1;
CREATE INDEX jobs_lease ON conveyor_bench_ref.jobs (lease_expires) WHERE state = 3;
CREATE INDEX jobs_final ON conveyor_bench_ref.jobs (finalized_at) WHERE state >= 4;
)sql";

constexpr const char* kClaim =
    "WITH c AS (SELECT id FROM conveyor_bench_ref.jobs WHERE queue = $1 AND state = 1"
    " AND run_at <= $2 ORDER BY priority, run_at, id LIMIT $3 FOR UPDATE SKIP LOCKED)"
    " UPDATE conveyor_bench_ref.jobs j SET state = 3, attempt = j.attempt + 1,"
    " lease_token = $4, lease_expires = $5 FROM c WHERE j.id = c.id"
    " RETURNING j.id, j.kind, j.payload, j.priority, j.attempt, j.max_attempts, j.run_at,"
    " j.created_at, j.last_error";
constexpr const char* kComplete =
    "UPDATE conveyor_bench_ref.jobs SET state = 4, finalized_at = $1, lease_token = 0,"
    " lease_expires = 0 WHERE id = ANY($2::bigint[]) AND state = 3 AND lease_token = $3";

struct ClaimedRow {
  int64_t id;
  std::string kind, payload, last_error;
  int priority, attempt, max_attempts;
  int64_t run_at, created_at;
};

void fill(const std::string& dsn, uint64_t jobs) {
  pqxx::connection c(dsn);
  pqxx::work tx(c);
  tx.exec(std::string("DROP SCHEMA IF EXISTS ") + kSchema + " CASCADE");
  tx.exec(kCreate);
  const int64_t now = wall_us();
  tx.exec_params(
      "INSERT INTO conveyor_bench_ref.jobs (queue, kind, payload, priority, state, max_attempts,"
      " run_at, created_at) SELECT 'ref', 'noop', '\\x7b7d'::bytea, 0, 1, 25, $1, $1"
      " FROM generate_series(1, $2)",
      now, static_cast<int64_t>(jobs));
  tx.commit();
  pqxx::nontransaction nt(c);
  nt.exec("ANALYZE conveyor_bench_ref.jobs");
}

// One client: claims and completes until the queue is empty; returns jobs done.
// The connection is left in `conn`, open, so that its server process is still
// there when the caller reads the server's CPU time.
uint64_t client(const std::string& dsn, uint32_t batch, int64_t token_base, std::latch& ready,
                std::unique_ptr<pqxx::connection>& conn) {
  // Every client arrives at the latch exactly once, even if it cannot connect.
  std::exception_ptr setup_error;
  try {
    conn = std::make_unique<pqxx::connection>(dsn);
    conn->prepare("claim", kClaim);
    conn->prepare("complete", kComplete);
  } catch (...) {
    setup_error = std::current_exception();
  }
  ready.arrive_and_wait();
  if (setup_error) std::rethrow_exception(setup_error);
  pqxx::connection& c = *conn;
  std::vector<ClaimedRow> rows;
  rows.reserve(batch);
  uint64_t done = 0;
  int64_t token = token_base;
  for (;;) {
    ++token;
    rows.clear();
    {
      pqxx::work tx(c);
      const int64_t now = wall_us();
      const pqxx::result r = tx.exec_prepared("claim", "ref", now, static_cast<int64_t>(batch),
                                              token, now + 30'000'000);
      tx.commit();
      for (const auto& row : r)
        rows.push_back(ClaimedRow{row[0].as<int64_t>(), row[1].as<std::string>(),
                                  row[2].as<std::string>(), row[8].as<std::string>(),
                                  row[3].as<int>(), row[4].as<int>(), row[5].as<int>(),
                                  row[6].as<int64_t>(), row[7].as<int64_t>()});
    }
    if (rows.empty()) return done;
    std::string ids = "{";
    for (const ClaimedRow& row : rows) ids += std::to_string(row.id) + ",";
    ids.back() = '}';
    pqxx::work tx(c);
    const pqxx::result r = tx.exec_prepared("complete", wall_us(), ids, token);
    tx.commit();
    if (r.affected_rows() != rows.size())
      throw std::runtime_error("postgres reference: a completion missed its lease");
    done += rows.size();
  }
}

struct RunOnce {
  double jobs_per_sec = 0;
  std::optional<double> server_cpu_us_per_job;  // when the server runs on this machine
};

RunOnce run_once(const std::string& dsn, uint64_t jobs, uint32_t batch) {
  fill(dsn, jobs);
  PostgresProbe probe(dsn);
  std::latch ready(kClients + 1);
  std::vector<uint64_t> done(kClients, 0);
  std::vector<std::string> errors(kClients);
  std::vector<std::unique_ptr<pqxx::connection>> connections(kClients);
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      try {
        done[i] = client(dsn, batch, int64_t{i + 1} << 40, ready, connections[i]);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  ready.arrive_and_wait();
  const std::map<int, double> server_cpu0 = probe.server_cpu_by_pid();
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& t : threads) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RunOnce out;
  if (!server_cpu0.empty())
    out.server_cpu_us_per_job =
        server_cpu_delta(server_cpu0, probe.server_cpu_by_pid()) * 1e6 / static_cast<double>(jobs);
  connections.clear();
  for (const std::string& e : errors)
    if (!e.empty()) throw std::runtime_error("postgres reference: " + e);
  uint64_t total = 0;
  for (uint64_t d : done) total += d;
  {
    pqxx::connection c(dsn);
    pqxx::nontransaction nt(c);
    const auto completed =
        nt.exec1("SELECT count(*) FROM conveyor_bench_ref.jobs WHERE state = 4")[0].as<int64_t>();
    if (total != jobs || completed != static_cast<int64_t>(jobs))
      throw std::runtime_error(fmt::format(
          "postgres reference: {} jobs claimed and {} completed of {}", total, completed, jobs));
    nt.exec(std::string("DROP SCHEMA ") + kSchema + " CASCADE");
  }
  out.jobs_per_sec = static_cast<double>(total) / s;
  return out;
}

}  // namespace

ReferenceResult run_postgres_reference(const std::string& dsn, const BenchOptions& options,
                                       Progress& progress) {
  ReferenceResult r;
  r.name = "postgres-claim-complete";
  r.description =
      "bare SQL: claim 100 FOR UPDATE SKIP LOCKED (CTE) + complete them, 2 transactions per "
      "batch, 4 clients";
  r.clients = kClients;
  r.batch = options.claim_batch;
  r.jobs = options.reference_jobs;
  try {
    for (uint32_t i = 0; i < options.repeat; ++i) {
      const RunOnce run = run_once(dsn, options.reference_jobs, options.claim_batch);
      r.runs_jobs_per_sec.push_back(run.jobs_per_sec);
      if (run.server_cpu_us_per_job)
        r.runs_server_cpu_us_per_job.push_back(*run.server_cpu_us_per_job);
      progress.line(
          "{} run {}/{}: {:.0f} jobs/s{}", r.name, i + 1, options.repeat, run.jobs_per_sec,
          run.server_cpu_us_per_job
              ? fmt::format(", database server {:.1f} us CPU per job", *run.server_cpu_us_per_job)
              : "");
    }
  } catch (const pqxx::broken_connection& e) {
    throw std::runtime_error(
        fmt::format("postgres reference: cannot reach {}: {}", describe_dsn(dsn), e.what()));
  }
  r.median_jobs_per_sec = median(r.runs_jobs_per_sec);
  return r;
}

}  // namespace conveyor::bench
