// SQLite failures as Conveyor errors.
#ifndef CONVEYOR_PLUGINS_SQLITE_SQLITE_ERRORS_HPP
#define CONVEYOR_PLUGINS_SQLITE_SQLITE_ERRORS_HPP

#include <SQLiteCpp/Exception.h>
#include <sqlite3.h>
#include <conveyor/storage_plugin.hpp>

#include <string>

namespace conveyor::sqlite {

// The text of an errno value.
std::string os_error(int err);

// Whether a SQLite result code means another connection holds a lock (worth
// retrying).
bool is_busy(int code);

// The Conveyor status of a SQLite result code.
conveyor_status status_for(int code);

// An error naming the operation, the database path and SQLite's code (and,
// for open and I/O errors on db, the OS error behind them).
sdk::Error translate(const SQLite::Exception& e, const char* op, const std::string& path,
                     sqlite3* db = nullptr);

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_SQLITE_ERRORS_HPP
