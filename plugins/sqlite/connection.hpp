// One SQLite connection with its prepared statements.
#ifndef CONVEYOR_PLUGINS_SQLITE_CONNECTION_HPP
#define CONVEYOR_PLUGINS_SQLITE_CONNECTION_HPP

#include <SQLiteCpp/Column.h>
#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "statements.hpp"

namespace conveyor::sqlite {

// A connection and its statement cache: each statement is prepared on first
// use and reused for the connection's life. One thread at a time uses it.
class Connection {
 public:
  Connection(const std::string& path, int flags, int busy_timeout_ms)
      : db_(path, flags, busy_timeout_ms) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  SQLite::Database& db() { return db_; }

  template <const Sql& S>
  SQLite::Statement& get() {
    std::unique_ptr<SQLite::Statement>& slot = statements_[slot_of<S>()];
    if (!slot) slot = std::make_unique<SQLite::Statement>(db_, S.text);
    return *slot;
  }

  // Ends an open transaction, if any, ignoring errors (the caller is already
  // reporting one).
  void rollback_quietly() noexcept;

 private:
  SQLite::Database db_;
  // Declared after db_: statements are finalized before the connection closes.
  std::array<std::unique_ptr<SQLite::Statement>, kStatementCount> statements_;
};

// Resets a statement (and drops its bindings) when the scope ends, so no
// statement keeps a transaction or a borrowed buffer alive.
class ResetOnExit {
 public:
  explicit ResetOnExit(SQLite::Statement& st) : st_(st) {}
  ~ResetOnExit() {
    st_.tryReset();
    try {
      st_.clearBindings();
    } catch (...) {
    }
  }
  ResetOnExit(const ResetOnExit&) = delete;
  ResetOnExit& operator=(const ResetOnExit&) = delete;

 private:
  SQLite::Statement& st_;
};

// The first column of S's first row; 0 when it returns no row.
template <const Sql& S>
int64_t query_int(Connection& c) {
  SQLite::Statement& st = c.get<S>();
  ResetOnExit reset(st);
  return st.executeStep() ? st.getColumn(0).getInt64() : 0;
}

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_CONNECTION_HPP
