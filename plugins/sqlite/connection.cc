#include "connection.hpp"

#include <sqlite3.h>

namespace conveyor::sqlite {

void Connection::rollback_quietly() noexcept {
  sqlite3* h = db_.getHandle();
  if (h != nullptr && sqlite3_get_autocommit(h) == 0)
    sqlite3_exec(h, "ROLLBACK", nullptr, nullptr, nullptr);
}

}  // namespace conveyor::sqlite
