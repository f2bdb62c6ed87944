// The database file itself: checked before SQLite opens it, and checked
// again on every call that it is still the file the connections use.
#ifndef CONVEYOR_PLUGINS_SQLITE_DATABASE_FILE_HPP
#define CONVEYOR_PLUGINS_SQLITE_DATABASE_FILE_HPP

#include <cstdint>
#include <string>
#include <utility>

#include "config.hpp"

namespace conveyor::sqlite {

class Connection;

// Which file a path names (device and inode).
struct FileId {
  uint64_t dev = 0;
  uint64_t ino = 0;
  friend bool operator==(const FileId&, const FileId&) = default;
};

// Checks the path before SQLite sees it, so errors name the path and what to
// do: the directory must exist (a typo must not silently start an empty
// database elsewhere), and with create = false so must the file.
void prepare_database_file(const Config& cfg);

// The file the connections opened. The open connections keep a removed or
// replaced file alive, so without these checks writes would be acknowledged
// into a database nobody will see.
class DatabaseFile {
 public:
  // The file config.path names now; throws CONVEYOR_E_INVALID when there is none.
  static DatabaseFile identify(const std::string& path);
  DatabaseFile() = default;

  // Throws CONVEYOR_E_INTERNAL when the path no longer names this file.
  void check_same_file(const char* op) const;
  // Throws CONVEYOR_E_INTERNAL when the file's header is no longer SQLite's
  // (overwritten in place).
  void check_header(const char* op, Connection& c) const;

 private:
  DatabaseFile(std::string path, FileId id) : path_(std::move(path)), id_(id) {}
  std::string path_;
  FileId id_;
};

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_DATABASE_FILE_HPP
