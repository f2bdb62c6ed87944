// Moving the change marker (meta 'change_marker'), which tells every handle
// and process on the file to read queue states and overrides again.
#ifndef CONVEYOR_PLUGINS_SQLITE_CHANGE_MARKER_HPP
#define CONVEYOR_PLUGINS_SQLITE_CHANGE_MARKER_HPP

#include "connection.hpp"

namespace conveyor::sqlite {

// Moves the change marker, in the same transaction as the change it reports.
inline void bump_change_marker(Connection& c) {
  SQLite::Statement& bump = c.get<sql::kBumpMarker>();
  ResetOnExit reset(bump);
  bump.exec();
}

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_CHANGE_MARKER_HPP
