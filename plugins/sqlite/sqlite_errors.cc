#include "sqlite_errors.hpp"

#include <system_error>

namespace conveyor::sqlite {

std::string os_error(int err) { return std::generic_category().message(err); }

bool is_busy(int code) {
  int primary = code & 0xff;
  return primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
}

conveyor_status status_for(int code) {
  if (code < 0) return CONVEYOR_E_INTERNAL;
  switch (code & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CANTOPEN:
    case SQLITE_PROTOCOL:
    case SQLITE_READONLY:
    case SQLITE_NOLFS:
    case SQLITE_NOMEM:
      return CONVEYOR_E_UNAVAILABLE;
    case SQLITE_NOTADB:
      return CONVEYOR_E_INVALID;
    default:
      return CONVEYOR_E_INTERNAL;
  }
}

sdk::Error translate(const SQLite::Exception& e, const char* op, const std::string& path,
                     sqlite3* db) {
  std::string msg = std::string("sqlite ") + op + " on '" + path + "': " + e.what();
  int code = e.getErrorCode();
  if (code >= 0) {
    msg += " (sqlite code " + std::to_string(e.getExtendedErrorCode()) + ")";
    int primary = code & 0xff;
    if (db != nullptr && (primary == SQLITE_CANTOPEN || primary == SQLITE_IOERR)) {
      int sys = sqlite3_system_errno(db);
      if (sys != 0) msg += ": " + os_error(sys);
    }
  }
  return sdk::Error(status_for(code), msg);
}

}  // namespace conveyor::sqlite
