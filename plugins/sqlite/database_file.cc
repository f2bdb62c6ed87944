#include "database_file.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>
#include <conveyor/storage_plugin.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>

#include "connection.hpp"
#include "sqlite_errors.hpp"

namespace conveyor::sqlite {
namespace {

using sdk::Error;

// The file a path names now; nullopt when there is none.
std::optional<FileId> file_id(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

}  // namespace

void prepare_database_file(const Config& cfg) {
  namespace fs = std::filesystem;
  const std::string& path = cfg.path;
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    if (fs::exists(parent, ec))
      throw Error(CONVEYOR_E_INVALID, "sqlite: '" + parent.string() +
                                          "' in storage option 'path' ('" + path +
                                          "') is not a directory");
    throw Error(CONVEYOR_E_INVALID, "sqlite: directory '" + parent.string() +
                                        "' of storage option 'path' ('" + path +
                                        "') does not exist: create it (mkdir -p " +
                                        parent.string() + ") or fix the path");
  }
  if (!cfg.create && !fs::exists(path, ec))
    throw Error(CONVEYOR_E_NOT_FOUND,
                "sqlite database '" + path +
                    "' does not exist (storage option 'path'); `conveyor serve` or `conveyor "
                    "enqueue` creates it, or fix the path");
  int fd = ::open(path.c_str(), O_RDWR | (cfg.create ? O_CREAT : 0) | O_CLOEXEC, 0644);
  if (fd < 0) {
    int err = errno;
    throw Error(err == EISDIR || err == ENOENT || err == ENOTDIR ? CONVEYOR_E_INVALID
                                                                 : CONVEYOR_E_UNAVAILABLE,
                "sqlite: cannot open database file '" + path +
                    "' for reading and writing: " + os_error(err));
  }
  ::close(fd);
}

DatabaseFile DatabaseFile::identify(const std::string& path) {
  const std::optional<FileId> id = file_id(path);
  if (!id)
    throw Error(CONVEYOR_E_INVALID,
                "sqlite database '" + path + "' disappeared while it was opened");
  return DatabaseFile(path, *id);
}

void DatabaseFile::check_same_file(const char* op) const {
  // One stat() per call.
  const std::optional<FileId> now = file_id(path_);
  if (now && *now == id_) return;
  throw Error(CONVEYOR_E_INTERNAL,
              std::string("sqlite ") + op + ": database '" + path_ + "' was " +
                  (now ? "replaced by another file" : "removed") +
                  " while this process had it open; nothing more is written to the old file. "
                  "Restore the file and restart Conveyor");
}

void DatabaseFile::check_header(const char* op, Connection& c) const {
  // Garbage written over the file in place keeps its inode, and the
  // connections' page caches hide it: read the header from the file itself
  // (through SQLite's own handle, one pread; opening and closing another
  // descriptor would drop SQLite's POSIX locks). Every file we keep open has
  // one: the writer switched it to WAL mode, which writes it.
  static constexpr char kMagic[] = "SQLite format 3";  // 16 bytes with its NUL
  sqlite3_file* file = nullptr;
  char header[sizeof kMagic] = {};
  if (sqlite3_file_control(c.db().getHandle(), "main", SQLITE_FCNTL_FILE_POINTER, &file) ==
          SQLITE_OK &&
      file != nullptr && file->pMethods != nullptr) {
    const int rc = file->pMethods->xRead(file, header, sizeof header, 0);
    if (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ) return;  // reported by the call
  }
  if (std::memcmp(header, kMagic, sizeof kMagic) == 0) return;
  throw Error(CONVEYOR_E_INTERNAL,
              std::string("sqlite ") + op + ": database '" + path_ +
                  "' was overwritten (its header is no longer a SQLite database header) while "
                  "this process had it open; nothing more is written to it. Restore the file "
                  "from a backup and restart Conveyor");
}

}  // namespace conveyor::sqlite
