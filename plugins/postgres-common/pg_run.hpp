// Running one storage call on a pooled connection: failures become
// sdk::Error (ConnectionLost for a lost connection, with the server named
// and the cause in plain words; pg_errors.hpp), a connection that was lost
// or whose statement was cancelled (statement_timeout) is closed, not reused,
// serialization failures and deadlocks are retried a few times, and a call
// whose repetition is harmless is repeated once on a fresh connection after
// its connection broke.
#ifndef CONVEYOR_PLUGINS_POSTGRES_COMMON_PG_RUN_HPP
#define CONVEYOR_PLUGINS_POSTGRES_COMMON_PG_RUN_HPP

#include "connection_pool.hpp"
#include "pg_errors.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <utility>

namespace conveyor::postgres {

// Whether a call may be repeated on a fresh connection after its connection
// broke (its outcome then unknown): only when repeating it cannot change what
// it does or reports.
enum class Retry { kNever, kAfterConnectionLoss };

// Serialization failures and deadlocks are tried this many times in all.
inline constexpr int kMaxConflictAttempts = 5;

// Runs fn(connection) on a connection of pool. fn must be safe to run again
// from scratch (it resets whatever it collects).
template <typename Fn>
void run_on_pool(ConnectionPool& pool, const char* op, Retry retry, Fn&& fn) {
  for (int attempt = 1;; ++attempt) {
    std::optional<ConnectionPool::Lease> lease;
    try {
      lease.emplace(pool.acquire());
    } catch (const sdk::Error& e) {
      throw sdk::Error(e.code(), std::string(op) + ": " + e.what());
    }
    try {
      fn(lease->conn());
      return;
    } catch (const sdk::Error&) {
      throw;
    } catch (...) {
      const Failure f = classify_current_exception(lease->conn().is_open());
      if (discards_connection(f)) lease->discard(server_gone(f));
      const std::string what = explain(f, pool.session().statement_timeout_ms);
      if (f.kind == FailureKind::kConnectionLost) {
        if (retry == Retry::kAfterConnectionLoss && attempt == 1) continue;
        throw ConnectionLost(std::string(op) + ": lost the connection to PostgreSQL at " +
                             pool.target() + ": " + what +
                             " (the call may or may not have taken effect)");
      }
      if (f.kind == FailureKind::kConflict && attempt < kMaxConflictAttempts) {
        lease.reset();
        std::this_thread::sleep_for(std::chrono::milliseconds(1 << attempt));
        continue;
      }
      throw sdk::Error(status_of(f.kind),
                       std::string(op) + " on PostgreSQL at " + pool.target() + ": " + what);
    }
  }
}

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_COMMON_PG_RUN_HPP
