// The SQLite reference: the canonical claim as bare SQL in a loop, no engine,
// on a file beside the backend's scratch databases, with the plugin's pragmas
// (WAL, the backend's synchronous setting) and a table shaped like its own.
//   claim-only:      BEGIN IMMEDIATE; UPDATE ... RETURNING (100 rows); COMMIT
//   claim+complete:  the same, then BEGIN IMMEDIATE; 100 lease-guarded
//                    UPDATEs to completed; COMMIT (what a drain must do)
//   append-only:     the same drain on a layout whose rows are never updated
//                    (a claim appends a claim mark per job, a completion a
//                    completed mark): what a layout like postgres-queue's
//                    could reach on SQLite, against the canonical loop that
//                    bounds the one-mutable-row plugin (README, Performance)
#include "bench_engine.hpp"
#include "sample_stats.hpp"
#include "workloads.hpp"

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>

#include <functional>
#include <limits>

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

// The append-only layout: entries are written once, at enqueue; what happens
// to an entry is a mark, appended, whose primary key (entry, stage) admits
// one claim (stage 1) and one closing (stage 2). A rescue finds claims by
// lease expiry (marks_expiry) and a purge closed entries by time
// (marks_final): the indexes a real plugin would need, so the figure
// includes their cost.
constexpr const char* kAppendOnlySchema = R"sql(
CREATE TABLE entries (
  id           INTEGER PRIMARY KEY,
  queue        TEXT    NOT NULL,
  kind         TEXT    NOT NULL,
  payload      BLOB    NOT NULL,
  priority     INTEGER NOT NULL,
  run_at       INTEGER NOT NULL,
  attempt      INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER NOT NULL,
  created_at   INTEGER NOT NULL,
  last_error   TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX entries_claim ON entries (queue, priority, run_at, id);
CREATE TABLE marks (
  entry_id      INTEGER NOT NULL,
  stage         INTEGER NOT NULL,
  what          INTEGER NOT NULL,
  at            INTEGER NOT NULL,
  lease_token   INTEGER NOT NULL DEFAULT 0,
  lease_expires INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (entry_id, stage)
) WITHOUT ROWID;
CREATE INDEX marks_expiry ON marks (lease_expires) WHERE stage = 1;
CREATE INDEX marks_final ON marks (at) WHERE stage = 2;
)sql";

// Unclaimed entries in claim order after the queue's hint (the last entry it
// claimed): first the rest of the hint's (priority, run_at), then the later
// ones. SQLite turns a three-column row-value bound into a two-column range
// plus a filter, which would scan from the hint's (priority, run_at) on every
// claim, hence two statements.
constexpr const char* kAppendOnlyCandidatesAtHint =
    "SELECT id, kind, payload, priority, attempt, max_attempts, run_at, created_at, last_error"
    " FROM entries INDEXED BY entries_claim WHERE queue = ?1 AND priority = ?2 AND run_at = ?3"
    " AND id > ?4 AND run_at <= ?5"
    " AND NOT EXISTS (SELECT 1 FROM marks WHERE entry_id = entries.id AND stage = 1)"
    " ORDER BY id LIMIT ?6";
constexpr const char* kAppendOnlyCandidatesAfterHint =
    "SELECT id, kind, payload, priority, attempt, max_attempts, run_at, created_at, last_error"
    " FROM entries INDEXED BY entries_claim WHERE queue = ?1 AND (priority, run_at) > (?2, ?3)"
    " AND run_at <= ?5"
    " AND NOT EXISTS (SELECT 1 FROM marks WHERE entry_id = entries.id AND stage = 1)"
    " ORDER BY priority, run_at, id LIMIT ?6";
// ?4: the claimed entry ids, a JSON array.
constexpr const char* kAppendOnlyClaimMarks =
    "INSERT INTO marks (entry_id, stage, what, at, lease_token, lease_expires)"
    " SELECT value, 1, 3, ?1, ?2, ?3 FROM json_each(?4)";
// Lease-guarded: only entries whose claim mark holds lease ?3; a second
// completion of an entry finds its stage-2 mark and adds nothing.
constexpr const char* kAppendOnlyComplete =
    "INSERT INTO marks (entry_id, stage, what, at)"
    " SELECT m.entry_id, 2, 4, ?1 FROM json_each(?2) AS j"
    " JOIN marks AS m ON m.entry_id = j.value AND m.stage = 1 AND m.lease_token = ?3"
    " ON CONFLICT DO NOTHING";

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

// Enqueues `jobs` noop jobs in one transaction: insert_from_s selects from
// s(i), i = 1..?1, with ?2 the enqueue time.
void fill(SQLite::Database& db, const std::string& insert_from_s, uint64_t jobs, int64_t now) {
  SQLite::Transaction txn(db);
  SQLite::Statement ins(
      db, "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1) " +
              insert_from_s);
  ins.bind(1, static_cast<int64_t>(jobs));
  ins.bind(2, now);
  ins.exec();
  txn.commit();
}

// The database file in WAL mode with the backend's synchronous setting.
void open_scratch(SQLite::Database& db, const std::string& synchronous, const char* schema) {
  db.exec("PRAGMA journal_mode = WAL");
  db.exec("PRAGMA synchronous = " + synchronous);
  db.exec(schema);
}

ClaimedRow copy_row(SQLite::Statement& st) {
  return ClaimedRow{
      st.getColumn(0).getInt64(),  st.getColumn(1).getString(), st.getColumn(2).getString(),
      st.getColumn(8).getString(), st.getColumn(3).getInt(),    st.getColumn(4).getInt(),
      st.getColumn(5).getInt(),    st.getColumn(6).getInt64(),  st.getColumn(7).getInt64()};
}

// Runs a statement that returns no rows and makes it ready to run again.
void exec_again(SQLite::Statement& st) {
  st.exec();
  st.reset();
}

// One timed drain on a fresh scratch database: the schema, `jobs` noop jobs
// (fill_sql, see fill), then loop(db, now) claims and completes them and
// returns how many it claimed; `what` names the loop in errors. Jobs/s.
double timed_drain(const std::filesystem::path& path, const std::string& synchronous,
                   const char* schema, const std::string& fill_sql, uint64_t jobs, const char* what,
                   const std::function<uint64_t(SQLite::Database&, int64_t now)>& loop) {
  remove_db(path);
  double jobs_per_sec = 0;
  {
    SQLite::Database db(path.string(), SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    open_scratch(db, synchronous, schema);
    const int64_t now = wall_us();
    fill(db, fill_sql, jobs, now);
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t total = loop(db, now);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (total != jobs)
      throw std::runtime_error(fmt::format("{} claimed {} of {} jobs", what, total, jobs));
    jobs_per_sec = static_cast<double>(total) / s;
  }
  remove_db(path);
  return jobs_per_sec;
}

double run_once(const std::filesystem::path& path, const std::string& synchronous, uint64_t jobs,
                uint32_t batch, bool complete) {
  const char* fill_sql =
      "INSERT INTO jobs (queue, kind, payload, priority, state, max_attempts, run_at,"
      " created_at) SELECT 'ref', 'noop', CAST('{}' AS BLOB), 0, 1, 25, ?2, ?2 FROM s";
  const auto drain = [&](SQLite::Database& db, int64_t now) -> uint64_t {
    SQLite::Statement begin(db, "BEGIN IMMEDIATE"), commit(db, "COMMIT");
    SQLite::Statement claim(db, kClaim), done(db, kComplete);
    std::vector<ClaimedRow> rows;
    rows.reserve(batch);
    uint64_t total = 0;
    int64_t token = 0;
    for (;;) {
      ++token;
      rows.clear();
      exec_again(begin);
      claim.bind(1, token);
      claim.bind(2, now + 30'000'000);
      claim.bind(3, "ref");
      claim.bind(4, wall_us());
      claim.bind(5, static_cast<int64_t>(batch));
      while (claim.executeStep()) rows.push_back(copy_row(claim));
      claim.reset();
      exec_again(commit);
      if (rows.empty()) break;
      total += rows.size();
      if (complete) {
        exec_again(begin);
        const int64_t finished = wall_us();
        for (const ClaimedRow& r : rows) {
          done.bind(1, finished);
          done.bind(2, r.id);
          done.bind(3, token);
          if (done.exec() != 1) throw std::runtime_error("sqlite reference: a completion missed");
          done.reset();
        }
        exec_again(commit);
      }
    }
    return total;
  };
  return timed_drain(path, synchronous, kSchema, fill_sql, jobs, "sqlite reference", drain);
}

double run_append_only_once(const std::filesystem::path& path, const std::string& synchronous,
                            uint64_t jobs, uint32_t batch) {
  const char* fill_sql =
      "INSERT INTO entries (queue, kind, payload, priority, max_attempts, run_at,"
      " created_at) SELECT 'ref', 'noop', CAST('{}' AS BLOB), 0, 25, ?2, ?2 FROM s";
  const auto drain = [&](SQLite::Database& db, int64_t now) -> uint64_t {
    SQLite::Statement begin(db, "BEGIN IMMEDIATE"), commit(db, "COMMIT");
    SQLite::Statement at_hint(db, kAppendOnlyCandidatesAtHint);
    SQLite::Statement after_hint(db, kAppendOnlyCandidatesAfterHint);
    SQLite::Statement mark(db, kAppendOnlyClaimMarks), done(db, kAppendOnlyComplete);
    std::vector<ClaimedRow> rows;
    rows.reserve(batch);
    std::string ids;
    // The hint: the last claimed entry's (priority, run_at, id); none yet.
    int64_t hint_priority = std::numeric_limits<int64_t>::min();
    int64_t hint_run_at = std::numeric_limits<int64_t>::min(), hint_id = 0;
    uint64_t total = 0;
    int64_t token = 0;
    for (;;) {
      ++token;
      rows.clear();
      exec_again(begin);
      const int64_t claim_now = wall_us();
      for (SQLite::Statement* candidates : {&at_hint, &after_hint}) {
        if (rows.size() == batch) break;
        candidates->bind(1, "ref");
        candidates->bind(2, hint_priority);
        candidates->bind(3, hint_run_at);
        if (candidates == &at_hint) candidates->bind(4, hint_id);
        candidates->bind(5, claim_now);
        candidates->bind(6, static_cast<int64_t>(batch - rows.size()));
        while (candidates->executeStep()) {
          rows.push_back(copy_row(*candidates));
          ++rows.back().attempt;  // the claim's attempt
        }
        candidates->reset();
      }
      if (!rows.empty()) {
        ids = "[";
        for (const ClaimedRow& r : rows) ids += (ids.size() > 1 ? "," : "") + std::to_string(r.id);
        ids += "]";
        mark.bind(1, claim_now);
        mark.bind(2, token);
        mark.bind(3, now + 30'000'000);
        mark.bind(4, ids);
        exec_again(mark);
        hint_priority = rows.back().priority;
        hint_run_at = rows.back().run_at;
        hint_id = rows.back().id;
      }
      exec_again(commit);
      if (rows.empty()) break;
      total += rows.size();
      exec_again(begin);
      done.bind(1, wall_us());
      done.bind(2, ids);
      done.bind(3, token);
      if (done.exec() != static_cast<int>(rows.size()))
        throw std::runtime_error("sqlite append-only reference: a completion missed");
      done.reset();
      exec_again(commit);
    }
    return total;
  };
  return timed_drain(path, synchronous, kAppendOnlySchema, fill_sql, jobs,
                     "sqlite append-only reference", drain);
}

}  // namespace

std::vector<ReferenceResult> run_sqlite_reference(const std::filesystem::path& db,
                                                  const std::string& synchronous,
                                                  const BenchOptions& options, Progress& progress) {
  std::vector<ReferenceResult> out;
  enum class Loop { kClaim, kClaimComplete, kAppendOnly };
  for (Loop loop : {Loop::kClaim, Loop::kClaimComplete, Loop::kAppendOnly}) {
    ReferenceResult r;
    switch (loop) {
      case Loop::kClaim:
        r.name = "sqlite-claim";
        r.description =
            "bare SQL: BEGIN IMMEDIATE; UPDATE ... RETURNING claim of 100; COMMIT; claim only; "
            "1 client";
        break;
      case Loop::kClaimComplete:
        r.name = "sqlite-claim-complete";
        r.description =
            "bare SQL: BEGIN IMMEDIATE; claim 100 RETURNING; COMMIT; then complete them in a "
            "second transaction; 1 client";
        break;
      case Loop::kAppendOnly:
        r.name = "sqlite-append-only";
        r.description =
            "bare SQL on an append-only layout (rows never updated: a claim and a completion "
            "each append a mark per job, in two transactions per batch of 100); 1 client";
        break;
    }
    r.clients = 1;
    r.batch = options.claim_batch;
    r.jobs = options.reference_jobs;
    for (uint32_t i = 0; i < options.repeat; ++i) {
      r.runs_jobs_per_sec.push_back(
          loop == Loop::kAppendOnly
              ? run_append_only_once(db, synchronous, options.reference_jobs, options.claim_batch)
              : run_once(db, synchronous, options.reference_jobs, options.claim_batch,
                         loop == Loop::kClaimComplete));
      progress.line("{} run {}/{}: {:.0f} jobs/s", r.name, i + 1, options.repeat,
                    r.runs_jobs_per_sec.back());
    }
    r.median_jobs_per_sec = median(r.runs_jobs_per_sec);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace conveyor::bench
