#include "ring_rotator.hpp"

#include "connection_pool.hpp"
#include "pg_options.hpp"
#include "pg_rows.hpp"
#include "pg_run.hpp"
#include "queue_schema.hpp"

#include <pqxx/except>
#include <pqxx/result>
#include <pqxx/transaction>

#include <algorithm>
#include <optional>

namespace conveyor::pgqueue {
namespace {

// The most entries copied forward per rotation attempt (the rest next tick).
constexpr int kMaxMovedPerAttempt = 20000;

bool take_rotation_lock(pqxx::work& tx, const std::string& schema) {
  return tx
      .exec_params("SELECT pg_try_advisory_xact_lock($1, hashtext($2))", kRotationLockClass,
                   schema)[0][0]
      .as<bool>();
}

struct RingRow {
  uint32_t slots = 0;
  uint32_t write_slot = 0;
  int64_t rotated_at = 0;
};

RingRow read_ring(pqxx::work& tx, const std::string& s) {
  pqxx::result r = tx.exec("SELECT slots, write_slot, rotated_at FROM " + s + ".ring");
  if (r.empty()) throw std::runtime_error("the ring row is missing (was migrate called?)");
  return RingRow{r[0][0].as<uint32_t>(), r[0][1].as<uint32_t>(), r[0][2].as<int64_t>()};
}

// Copies the unclaimed entries of slot `from` into slot `to` (step 1).
uint64_t copy_forward(pqxx::work& tx, const std::string& schema, uint32_t from, uint32_t to,
                      int64_t now_us) {
  const std::string s = postgres::quote_identifier(schema);
  const std::string ready = ready_partition(schema, from), marks = marks_partition(schema, from);
  const std::string cols =
      "job_id, queue, priority, run_at, attempt, max_attempts, created_at, kind, payload, "
      "last_error, cost, key, timeout_ms, started_at";
  pqxx::result r = tx.exec_params(
      "WITH live AS ("
      "  SELECT r.* FROM " +
          ready +
          " r"
          "  WHERE NOT EXISTS (SELECT 1 FROM " +
          marks +
          " m"
          "                    WHERE m.slot = r.slot AND m.entry_id = r.entry_id AND m.stage = 1)"
          "  ORDER BY r.entry_id LIMIT $3 FOR UPDATE SKIP LOCKED"
          "), marked AS ("
          "  INSERT INTO " +
          s +
          ".marks (slot, entry_id, stage, what, job_id, at)"
          "  SELECT slot, entry_id, 1, 0, job_id, $1 FROM live"
          "  ON CONFLICT DO NOTHING RETURNING entry_id"
          ") INSERT INTO " +
          s + ".ready (slot, " + cols +
          ")"
          "  SELECT $2, " +
          cols + " FROM live l JOIN marked m ON m.entry_id = l.entry_id",
      now_us, to, kMaxMovedPerAttempt);
  return r.affected_rows();
}

// Whether slot holds an entry nobody took or a claim nobody closed.
bool holds_live(pqxx::work& tx, const std::string& schema, uint32_t slot) {
  const std::string ready = ready_partition(schema, slot), marks = marks_partition(schema, slot);
  return tx
      .exec("SELECT EXISTS (SELECT 1 FROM " + ready + " r WHERE NOT EXISTS (SELECT 1 FROM " +
            marks +
            " m WHERE m.slot = r.slot AND m.entry_id = r.entry_id AND m.stage = 1))"
            " OR EXISTS (SELECT 1 FROM " +
            marks + " m WHERE m.stage = 1 AND m.what = 3 AND NOT EXISTS (SELECT 1 FROM " + marks +
            " c WHERE c.slot = m.slot AND c.entry_id = m.entry_id AND c.stage = 2))")[0][0]
      .as<bool>();
}

// Counts the finished, unpurged jobs of `slot` into `retired` (queue_schema.cc,
// version 2) in the transaction that truncates it, so queue_stats reports
// them until purge rather than until rotation; `tally` (version 3) loses
// what `retired` gains.
void retire_finished(pqxx::work& tx, const std::string& schema, uint32_t slot, int64_t now_us) {
  const std::string s = postgres::quote_identifier(schema);
  tx.exec_params(
      "WITH gone AS ("
      "  SELECT queue, state, count(*) AS jobs, max(finalized_at) AS newest FROM " +
          s +
          ".entries WHERE slot = $1 AND state BETWEEN 4 AND 6 AND NOT purged"
          "  GROUP BY queue, state"
          "), kept AS ("
          "  INSERT INTO " +
          s +
          ".retired (queue, state, jobs, newest, retired_at)"
          "  SELECT queue, state, jobs, newest, $2 FROM gone"
          ") INSERT INTO " +
          s + ".tally (slot, queue, state, n) SELECT " + tally_slot_sql() +
          ", queue, state, -jobs FROM gone",
      slot, now_us);
}

}  // namespace

const char* to_string(Rotation r) {
  switch (r) {
    case Rotation::kLockedElsewhere:
      return "locked elsewhere";
    case Rotation::kNotDue:
      return "not due";
    case Rotation::kIdle:
      return "idle";
    case Rotation::kBlocked:
      return "blocked by an open claim";
    case Rotation::kLockTimeout:
      return "lock timeout";
    case Rotation::kRotated:
      return "rotated";
  }
  return "?";
}

RotationResult rotate_ring(pqxx::connection& conn, const std::string& schema, int64_t interval_us,
                           int64_t wall_now_us) {
  const std::string s = postgres::quote_identifier(schema);
  RotationResult out;
  uint32_t w = 0, oldest = 0;
  {
    pqxx::work tx(conn);
    if (!take_rotation_lock(tx, schema)) return {Rotation::kLockedElsewhere, 0, 0};
    const RingRow ring = read_ring(tx, s);
    out.write_slot = w = ring.write_slot;
    if (wall_now_us - ring.rotated_at < interval_us) return {Rotation::kNotDue, 0, w};
    if (!tx.exec("SELECT EXISTS (SELECT 1 FROM " + ready_partition(schema, w) + ")")[0][0]
             .as<bool>())
      return {Rotation::kIdle, 0, w};
    oldest = (w + 1) % ring.slots;
    out.moved = copy_forward(tx, schema, oldest, w, wall_now_us);
    if (out.moved > 0) tx.exec("UPDATE " + s + ".ring SET moves = moves + 1");
    tx.commit();
  }
  pqxx::work tx(conn);
  if (!take_rotation_lock(tx, schema)) return {Rotation::kLockedElsewhere, out.moved, w};
  if (read_ring(tx, s).write_slot != w) return {Rotation::kNotDue, out.moved, w};
  tx.exec("SET LOCAL lock_timeout = '100ms'");
  try {
    tx.exec("LOCK TABLE " + ready_partition(schema, oldest) + ", " +
            marks_partition(schema, oldest) + " IN ACCESS EXCLUSIVE MODE");
  } catch (const pqxx::sql_error& e) {
    if (e.sqlstate() == "55P03") return {Rotation::kLockTimeout, out.moved, w};
    throw;
  }
  // Re-checked under the lock: nothing can take or claim in `oldest` now.
  if (holds_live(tx, schema, oldest)) return {Rotation::kBlocked, out.moved, w};
  retire_finished(tx, schema, oldest, wall_now_us);
  tx.exec("TRUNCATE " + ready_partition(schema, oldest) + ", " + marks_partition(schema, oldest));
  tx.exec_params(
      "UPDATE " + s + ".ring SET write_slot = $1, rotated_at = $2, rotations = rotations + 1",
      oldest, wall_now_us);
  // Heartbeat rows whose claim was closed (an extension that raced with its
  // completion) have no further use.
  tx.exec("DELETE FROM " + s + ".lease_ext e WHERE NOT EXISTS (SELECT 1 FROM " + s +
          ".marks m WHERE m.job_id = e.job_id AND m.lease_token = e.lease_token AND m.stage = 1"
          " AND m.what = 3 AND NOT EXISTS (SELECT 1 FROM " +
          s + ".marks c WHERE c.slot = m.slot AND c.entry_id = m.entry_id AND c.stage = 2))");
  tx.commit();
  return {Rotation::kRotated, out.moved, oldest};
}

bool fold_tally(pqxx::connection& conn, const std::string& schema, std::optional<uint32_t> which) {
  pqxx::work tx(conn);
  // A lock of its own: folding never holds up a rotation (two folds of one
  // partition are serialized by its table lock anyway).
  if (!tx.exec_params("SELECT pg_try_advisory_xact_lock($1, hashtext($2))", kTallyFoldLockClass,
                      schema)[0][0]
           .as<bool>())
    return false;
  // Two seconds past its turn: the statements that wrote it are done (one
  // still running waits for the lock below and its rows are kept).
  const uint32_t slot =
      which ? *which % kTallySlots
            : (tx.exec("SELECT " + tally_slot_sql())[0][0].as<uint32_t>() + 2) % kTallySlots;
  const std::string part = tally_partition(schema, slot);
  tx.exec("SET LOCAL lock_timeout = '100ms'");
  try {
    tx.exec("LOCK TABLE " + part + " IN ACCESS EXCLUSIVE MODE");
  } catch (const pqxx::sql_error& e) {
    if (e.sqlstate() == "55P03") return false;
    throw;
  }
  pqxx::result sums = tx.exec("SELECT queue, state, sum(n)::bigint, count(*) FROM " + part +
                              " GROUP BY queue, state");
  bool folded = true;
  for (const auto& row : sums)
    if (postgres::int_at(row, 3) > 1) folded = false;
  if (folded) return false;  // one row per queue and state already
  tx.exec("TRUNCATE " + part);
  for (const auto& row : sums)
    if (postgres::int_at(row, 2) != 0)
      tx.exec_params("INSERT INTO " + part + " (slot, queue, state, n) VALUES ($1, $2, $3, $4)",
                     slot, postgres::text_at(row, 0), postgres::int32_at(row, 1),
                     postgres::int_at(row, 2));
  tx.commit();
  return true;
}

RingMaintainer::RingMaintainer(postgres::ConnectionPool& pool, std::string schema,
                               std::chrono::milliseconds interval)
    : pool_(pool),
      schema_(std::move(schema)),
      interval_(interval),
      thread_(
          std::clamp(interval / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000)),
          [this] { tick(); }) {}

void RingMaintainer::tick() noexcept {
  try {
    postgres::run_on_pool(
        pool_, "rotating the ring", postgres::Retry::kNever, [&](pqxx::connection& c) {
          rotate_ring(c, schema_, interval_.count() * 1000, postgres::wall_clock_us());
          // A partition's turn lasts a second: more folds would find nothing.
          const auto now = std::chrono::steady_clock::now();
          if (now - last_fold_ >= std::chrono::seconds(1)) {
            last_fold_ = now;
            fold_tally(c, schema_);
          }
        });
  } catch (...) {
    // The server is away or busy: the next tick tries again. Nothing is
    // lost by a missed rotation; the ring only grows a little longer.
  }
}

}  // namespace conveyor::pgqueue
