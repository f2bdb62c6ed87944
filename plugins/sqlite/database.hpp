// The plugin's connections to its database file and the transactions run on
// them.
//
// One writer connection guarded by a mutex: every write is a single BEGIN
// IMMEDIATE transaction, so claimers in any thread or process are serialised
// by SQLite's write lock and never see the same job. Reads run on pooled
// reader connections; in WAL mode they never block the writer and see only
// committed data. SQLITE_BUSY / SQLITE_LOCKED: SQLite's busy handler waits up
// to busy_timeout_ms; a transaction that still fails (or fails without the
// handler being consulted) is retried from scratch with a short backoff,
// bounded by busy_timeout_ms and a fixed number of attempts, then reported as
// CONVEYOR_E_UNAVAILABLE.
#ifndef CONVEYOR_PLUGINS_SQLITE_DATABASE_HPP
#define CONVEYOR_PLUGINS_SQLITE_DATABASE_HPP

#include <SQLiteCpp/Exception.h>
#include <conveyor/storage_plugin.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "config.hpp"
#include "connection.hpp"
#include "database_file.hpp"
#include "reader_pool.hpp"
#include "sqlite_errors.hpp"

namespace conveyor::sqlite {

class Database {
 public:
  explicit Database(Config config) : config_(std::move(config)) {}
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Checks the file, opens the writer connection (switching the file to WAL
  // mode) and notes which file it opened.
  void open();
  const std::string& path() const { return config_.path; }
  // Throws CONVEYOR_E_INTERNAL when the path no longer names the file opened.
  void check_file(const char* op) const { file_.check_same_file(op); }

  // A new connection; the writer's also sets the journal mode and
  // synchronous.
  std::unique_ptr<Connection> open_connection(bool writer);

  // Runs fn(conn) inside BEGIN IMMEDIATE ... COMMIT on the writer connection,
  // with the writer's mutex held throughout. fn must be safe to run again
  // from scratch (it resets whatever it collects): a busy transaction is
  // retried.
  template <typename Fn>
  void write_txn(const char* op, Fn&& fn);
  // Runs fn(conn) on a pooled reader connection, with the same busy retry.
  template <typename Fn>
  void read(const char* op, Fn&& fn);
  // Runs fn again while it fails with SQLITE_BUSY/SQLITE_LOCKED, within the
  // bounds above; other SQLite errors are translated.
  template <typename Fn>
  void with_busy_retry(const char* op, Fn&& fn);

 private:
  // Upper bound on how many times a transaction is retried after
  // SQLITE_BUSY/SQLITE_LOCKED (the other bound is busy_timeout_ms).
  static constexpr int kMaxBusyAttempts = 12;

  // A reader connection taken from the pool for one read.
  class ReaderLease {
   public:
    explicit ReaderLease(Database& db);
    ~ReaderLease() { db_.readers_.give_back(std::move(c_)); }
    ReaderLease(const ReaderLease&) = delete;
    ReaderLease& operator=(const ReaderLease&) = delete;
    Connection& conn() { return *c_; }

   private:
    Database& db_;
    std::unique_ptr<Connection> c_;
  };

  [[noreturn]] void throw_busy(const char* op, int attempts, std::chrono::milliseconds elapsed,
                               const SQLite::Exception& e) const;

  Config config_;
  DatabaseFile file_;  // the database file opened
  std::mutex writer_mu_;
  std::unique_ptr<Connection> writer_;
  ReaderPool readers_;
};

template <typename Fn>
void Database::with_busy_retry(const char* op, Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  auto backoff = std::chrono::microseconds(500);
  for (int attempt = 1;; ++attempt) {
    try {
      fn();
      return;
    } catch (const SQLite::Exception& e) {
      if (!is_busy(e.getErrorCode())) throw translate(e, op, config_.path);
      auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - start);
      if (attempt >= kMaxBusyAttempts || elapsed.count() >= config_.busy_timeout_ms)
        throw_busy(op, attempt, elapsed, e);
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::microseconds(50'000));
    }
  }
}

template <typename Fn>
void Database::write_txn(const char* op, Fn&& fn) {
  std::lock_guard<std::mutex> lock(writer_mu_);
  file_.check_same_file(op);
  Connection& c = *writer_;
  file_.check_header(op, c);
  with_busy_retry(op, [&] {
    try {
      {
        SQLite::Statement& begin = c.get<sql::kBegin>();
        ResetOnExit reset(begin);
        begin.exec();
      }
      fn(c);
      SQLite::Statement& commit = c.get<sql::kCommit>();
      ResetOnExit reset(commit);
      commit.exec();
    } catch (...) {
      c.rollback_quietly();
      throw;
    }
  });
}

template <typename Fn>
void Database::read(const char* op, Fn&& fn) {
  file_.check_same_file(op);
  ReaderLease lease(*this);
  file_.check_header(op, lease.conn());
  with_busy_retry(op, [&] { fn(lease.conn()); });
}

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_DATABASE_HPP
