#include "database.hpp"

#include <SQLiteCpp/Statement.h>

namespace conveyor::sqlite {

using sdk::Error;

void Database::open() {
  prepare_database_file(config_);
  writer_ = open_connection(/*writer=*/true);
  // The file the connections use; later calls check the path still names it.
  file_ = DatabaseFile::identify(config_.path);
}

std::unique_ptr<Connection> Database::open_connection(bool writer) {
  std::unique_ptr<Connection> c;
  try {
    // NOMUTEX: a connection is only ever used by one thread at a time (the
    // writer under writer_mu_, readers leased from the pool).
    c = std::make_unique<Connection>(config_.path, SQLite::OPEN_READWRITE | SQLite::OPEN_NOMUTEX,
                                     config_.busy_timeout_ms);
  } catch (const SQLite::Exception& e) {
    throw translate(e, "open", config_.path);
  }
  if (writer) {
    with_busy_retry("open", [&] {
      try {
        SQLite::Statement mode(c->db(), "PRAGMA journal_mode = WAL");
        std::string got = mode.executeStep() ? ascii_upper(mode.getColumn(0).getString()) : "";
        if (got != "WAL")
          throw Error(CONVEYOR_E_UNAVAILABLE, "sqlite: cannot switch '" + config_.path +
                                                  "' to WAL mode (journal_mode is '" + got +
                                                  "'); is it on a network file system?");
        // The value was checked against a fixed list in parse_config.
        c->db().exec("PRAGMA synchronous = " + config_.synchronous);
      } catch (const SQLite::Exception& e) {
        if (is_busy(e.getErrorCode())) throw;
        throw translate(e, "open", config_.path, c->db().getHandle());
      }
    });
  }
  return c;
}

void Database::throw_busy(const char* op, int attempts, std::chrono::milliseconds elapsed,
                          const SQLite::Exception& e) const {
  throw Error(CONVEYOR_E_UNAVAILABLE,
              std::string("sqlite ") + op + " on '" + config_.path +
                  "': database is busy (locked by another connection or process) after " +
                  std::to_string(attempts) + " attempt(s) over " + std::to_string(elapsed.count()) +
                  " ms: " + e.what());
}

Database::ReaderLease::ReaderLease(Database& db) : db_(db), c_(db.readers_.take()) {
  if (!c_) c_ = db.open_connection(/*writer=*/false);
}

}  // namespace conveyor::sqlite
