// Binding parameters and reading columns of the plugin's statements.
#ifndef CONVEYOR_PLUGINS_SQLITE_VALUES_HPP
#define CONVEYOR_PLUGINS_SQLITE_VALUES_HPP

#include <SQLiteCpp/Column.h>
#include <SQLiteCpp/Statement.h>
#include <conveyor/storage_plugin.hpp>

#include <climits>
#include <cstddef>
#include <string>
#include <string_view>

namespace conveyor::sqlite {

// Binds text with its length; SQLite's copy (SQLITE_TRANSIENT) keeps it
// independent of the caller's buffer.
inline void bind_text(SQLite::Statement& st, int index, std::string_view s) {
  st.bind(index, std::string(s));
}

// Binds bytes without copying: the caller's buffer outlives the statement's
// execution (the statement is reset before the ABI call returns).
inline void bind_blob(SQLite::Statement& st, int index, std::string_view s) {
  if (s.size() > static_cast<size_t>(INT_MAX))
    throw sdk::Error(CONVEYOR_E_INVALID, "payload too large for sqlite");
  st.bindNoCopy(
      index,
      s.data() != nullptr ? static_cast<const void*>(s.data()) : static_cast<const void*>(""),
      static_cast<int>(s.size()));
}

inline std::string column_text(const SQLite::Statement& st, int index) {
  SQLite::Column c = st.getColumn(index);
  const char* p = c.getText();
  int n = c.getBytes();
  return std::string(p, static_cast<size_t>(n));
}

inline std::string column_blob(const SQLite::Statement& st, int index) {
  SQLite::Column c = st.getColumn(index);
  const void* p = c.getBlob();
  int n = c.getBytes();
  if (p == nullptr || n <= 0) return std::string();
  return std::string(static_cast<const char*>(p), static_cast<size_t>(n));
}

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_VALUES_HPP
