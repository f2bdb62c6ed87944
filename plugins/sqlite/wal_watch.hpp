// Waiting for the database's -wal file to be written, with inotify.
#ifndef CONVEYOR_PLUGINS_SQLITE_WAL_WATCH_HPP
#define CONVEYOR_PLUGINS_SQLITE_WAL_WATCH_HPP

#include <chrono>
#include <string>

namespace conveyor::sqlite {

// Every commit, by any connection in any process, appends to the -wal file,
// so a write to it is the cue to look for changes; without it, nothing needs
// a look.
class WalWatch {
 public:
  WalWatch() = default;
  ~WalWatch();  // closes the inotify descriptor
  WalWatch(const WalWatch&) = delete;
  WalWatch& operator=(const WalWatch&) = delete;

  // Waits until the -wal file of the database at database_path is written or
  // until `until`: whether it was written (or may have been: true when
  // inotify cannot watch it).
  bool wait_for_write(const std::string& database_path,
                      std::chrono::steady_clock::time_point until);

 private:
  int inotify_fd_ = -1;   // -1: not set up (or unavailable)
  bool watched_ = false;  // the -wal file's watch is in place
};

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_WAL_WATCH_HPP
