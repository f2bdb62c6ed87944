// Rotating the ring: advancing the write slot and emptying the oldest slot
// with TRUNCATE once nothing live remains in it. Exactly one process rotates
// at a time (a transaction-level advisory lock on the schema).
//
// One rotation, when the interval since the last one has passed and the
// write slot w holds entries (an idle ring does not rotate):
//   1. Copy forward: every unclaimed, uncancelled entry of the oldest slot
//      o = (w + 1) % slots gets a copy in w (same job id and claim key) and
//      a stage-1 "moved" mark in o. The mark's primary key arbitrates with
//      concurrent claims and cancels exactly as between two claimers, so an
//      entry is either claimed/cancelled there or moved, never both. The
//      ring's move generation is bumped with it (claim hints made before are
//      void: a claim may have skipped an original it found locked).
//      Committed on its own.
//   2. Prune, in a second transaction: LOCK o's two partitions ACCESS
//      EXCLUSIVE under lock_timeout (100 ms; a busy moment is retried on the
//      next tick rather than stalling claims: every claim and completion
//      queues behind the lock request, since their generic plans lock every
//      partition), re-check under the lock that o holds no unmarked entry
//      and no open claim (a claim mark without a closing mark), then
//      TRUNCATE both partitions and make o the write slot. An open claim (a
//      running job) blocks the prune: the ring keeps writing into w until
//      the job finishes or its lease is rescued. The lock is held through
//      the commit, which waits for its WAL flush whatever synchronous_commit
//      says (it drops files): on a disk with fsync on, claims wait 15-20 ms
//      once per rotation.
#ifndef CONVEYOR_PLUGINS_POSTGRES_QUEUE_RING_ROTATOR_HPP
#define CONVEYOR_PLUGINS_POSTGRES_QUEUE_RING_ROTATOR_HPP

#include <pqxx/connection>

#include "periodic_thread.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace conveyor::postgres {
class ConnectionPool;
}

namespace conveyor::pgqueue {

// Advisory-lock class held (per transaction) while rotating ("Rota"); the
// object is hashtext(schema).
inline constexpr int kRotationLockClass = 0x526f7461;
// Advisory-lock class of fold_tally ("Tall"); object: the schema's hash.
inline constexpr int kTallyFoldLockClass = 0x54616c6c;

enum class Rotation {
  kLockedElsewhere,  // another process is rotating this ring
  kNotDue,           // the interval has not passed
  kIdle,             // nothing was written since the last rotation
  kBlocked,          // the oldest slot still holds an open claim
  kLockTimeout,      // the oldest slot was busy past lock_timeout
  kRotated,          // the oldest slot was truncated and is the write slot now
};
const char* to_string(Rotation r);

struct RotationResult {
  Rotation outcome = Rotation::kNotDue;
  uint64_t moved = 0;       // entries copied forward out of the oldest slot
  uint32_t write_slot = 0;  // after the call
};

// One rotation attempt on conn (see above). interval_us: the least time
// between rotations, by the wall clock wall_now_us.
RotationResult rotate_ring(pqxx::connection& conn, const std::string& schema, int64_t interval_us,
                           int64_t wall_now_us);

// Folds the `tally` partition (queue_schema.cc, version 3) whose turn ended
// two seconds ago into one row per queue and state: TRUNCATE and re-insert
// the sums, under the partition's lock. Skipped (false) when another process
// holds the rotation lock, the lock is busy, or it is folded already. Tests
// name the partition (which); any one is safe to fold at any time.
bool fold_tally(pqxx::connection& conn, const std::string& schema,
                std::optional<uint32_t> which = std::nullopt);

// Calls rotate_ring and fold_tally on a pooled connection every quarter interval, on a
// thread of its own, until destroyed. Failures (server away, lock timeouts)
// are retried on the next tick.
class RingMaintainer {
 public:
  RingMaintainer(postgres::ConnectionPool& pool, std::string schema,
                 std::chrono::milliseconds interval);

 private:
  void tick() noexcept;

  postgres::ConnectionPool& pool_;
  const std::string schema_;
  const std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point last_fold_{};  // the thread's only
  PeriodicThread thread_;  // last: stopped before the members it uses go
};

}  // namespace conveyor::pgqueue

#endif  // CONVEYOR_PLUGINS_POSTGRES_QUEUE_RING_ROTATOR_HPP
