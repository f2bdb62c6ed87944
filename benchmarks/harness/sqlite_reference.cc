// The SQLite reference: the canonical claim as bare SQL in a loop, no engine,
// on a file beside the backend's scratch databases, with the plugin's pragmas
// (WAL, the backend's synchronous setting) and a table shaped like its own.
//   claim-only:      BEGIN IMMEDIATE; UPDATE ... RETURNING (100 rows); COMMIT
//   claim+complete:  the same, then BEGIN IMMEDIATE; 100 lease-guarded
//                    UPDATEs to completed; COMMIT (what a drain must do)
#include "bench_engine.hpp"
#include "sample_stats.hpp"
#include "workloads.hpp"

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>

namespace conveyor::bench {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE jobs (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  queue         TEXT    NOT NULL,
  kind          TEXT    NOT NULL,
  payload       BLOB    NOT NULL,
  priority      INTEGER NOT NULL,
  state         INTEGER NOT NULL,
  attempt       INTEGER NOT NULL DEFAULT 0,
  max_attempts  INTEGER NOT NULL,
  run_at        INTEGER NOT NULL,
  created_at    INTEGER NOT NULL,
  finalized_at  INTEGER NOT NULL DEFAULT 0,
  lease_token   INTEGER NOT NULL DEFAULT 0,
  lease_expires INTEGER NOT NULL DEFAULT 0,
  last_error    TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX jobs_claim ON jobs (queue, priority, run_at, id) WHERE state = 1;
CREATE INDEX jobs_lease ON jobs (lease_expires) WHERE state = 3;
CREATE INDEX jobs_final ON jobs (finalized_at) WHERE state >= 4;
)sql";

constexpr const char* kClaim =
    "UPDATE jobs SET state = 3, attempt = attempt + 1, lease_token = ?1, lease_expires = ?2"
    " WHERE id IN (SELECT id FROM jobs WHERE queue = ?3 AND state = 1 AND run_at <= ?4"
    " ORDER BY priority, run_at, id LIMIT ?5)"
    " RETURNING id, kind, payload, priority, attempt, max_attempts, run_at, created_at, last_error";
constexpr const char* kComplete =
    "UPDATE jobs SET state = 4, finalized_at = ?1, lease_token = 0, lease_expires = 0"
    " WHERE id = ?2 AND state = 3 AND lease_token = ?3";

// What a claim hands on: the row copied out, as a plugin must.
struct ClaimedRow {
  int64_t id;
  std::string kind, payload, last_error;
  int priority, attempt, max_attempts;
  int64_t run_at, created_at;
};

void remove_db(const std::filesystem::path& db) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db.string() + suffix, ec);
}

double run_once(const std::filesystem::path& path, const std::string& synchronous, uint64_t jobs,
                uint32_t batch, bool complete) {
  remove_db(path);
  double jobs_per_sec = 0;
  {
    SQLite::Database db(path.string(), SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    db.exec("PRAGMA journal_mode = WAL");
    db.exec("PRAGMA synchronous = " + synchronous);
    db.exec(kSchema);
    const int64_t now = wall_us();
    {
      SQLite::Transaction fill(db);
      SQLite::Statement ins(db,
                            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE "
                            "i < ?1) INSERT INTO jobs (queue, kind, payload, priority, state, "
                            "max_attempts, run_at, created_at) SELECT 'ref', 'noop', CAST('{}' AS "
                            "BLOB), 0, 1, 25, ?2, ?2 FROM s");
      ins.bind(1, static_cast<int64_t>(jobs));
      ins.bind(2, now);
      ins.exec();
      fill.commit();
    }
    SQLite::Statement begin(db, "BEGIN IMMEDIATE"), commit(db, "COMMIT");
    SQLite::Statement claim(db, kClaim), done(db, kComplete);
    std::vector<ClaimedRow> rows;
    rows.reserve(batch);
    uint64_t total = 0;
    int64_t token = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      ++token;
      rows.clear();
      begin.exec();
      begin.reset();
      claim.bind(1, token);
      claim.bind(2, now + 30'000'000);
      claim.bind(3, "ref");
      claim.bind(4, wall_us());
      claim.bind(5, static_cast<int64_t>(batch));
      while (claim.executeStep())
        rows.push_back(ClaimedRow{claim.getColumn(0).getInt64(), claim.getColumn(1).getString(),
                                  claim.getColumn(2).getString(), claim.getColumn(8).getString(),
                                  claim.getColumn(3).getInt(), claim.getColumn(4).getInt(),
                                  claim.getColumn(5).getInt(), claim.getColumn(6).getInt64(),
                                  claim.getColumn(7).getInt64()});
      claim.reset();
      commit.exec();
      commit.reset();
      if (rows.empty()) break;
      total += rows.size();
      if (complete) {
        begin.exec();
        begin.reset();
        const int64_t finished = wall_us();
        for (const ClaimedRow& r : rows) {
          done.bind(1, finished);
          done.bind(2, r.id);
          done.bind(3, token);
          if (done.exec() != 1) throw std::runtime_error("sqlite reference: a completion missed");
          done.reset();
        }
        commit.exec();
        commit.reset();
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (total != jobs)
      throw std::runtime_error(fmt::format("sqlite reference claimed {} of {} jobs", total, jobs));
    jobs_per_sec = static_cast<double>(total) / s;
  }
  remove_db(path);
  return jobs_per_sec;
}

}  // namespace

std::vector<ReferenceResult> run_sqlite_reference(const std::filesystem::path& db,
                                                  const std::string& synchronous,
                                                  const BenchOptions& options, Progress& progress) {
  std::vector<ReferenceResult> out;
  for (bool complete : {false, true}) {
    ReferenceResult r;
    r.name = complete ? "sqlite-claim-complete" : "sqlite-claim";
    r.description = complete ? "bare SQL: BEGIN IMMEDIATE; claim 100 RETURNING; COMMIT; then "
                               "complete them in a second transaction; 1 client"
                             : "bare SQL: BEGIN IMMEDIATE; UPDATE ... RETURNING claim of 100; "
                               "COMMIT; claim only; 1 client";
    r.clients = 1;
    r.batch = options.claim_batch;
    r.jobs = options.reference_jobs;
    for (uint32_t i = 0; i < options.repeat; ++i) {
      r.runs_jobs_per_sec.push_back(
          run_once(db, synchronous, options.reference_jobs, options.claim_batch, complete));
      progress.line("{} run {}/{}: {:.0f} jobs/s", r.name, i + 1, options.repeat,
                    r.runs_jobs_per_sec.back());
    }
    r.median_jobs_per_sec = median(r.runs_jobs_per_sec);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace conveyor::bench
