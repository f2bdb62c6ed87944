#include "wal_watch.hpp"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace conveyor::sqlite {

WalWatch::~WalWatch() {
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
}

bool WalWatch::wait_for_write(const std::string& database_path,
                              std::chrono::steady_clock::time_point until) {
  if (inotify_fd_ < 0) {
    inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (inotify_fd_ < 0) return true;
  }
  if (!watched_) {
    // The -wal file exists while a connection (the watcher's own) is open.
    if (::inotify_add_watch(inotify_fd_, (database_path + "-wal").c_str(),
                            IN_MODIFY | IN_DELETE_SELF | IN_MOVE_SELF) < 0)
      return true;
    watched_ = true;
  }
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  pollfd p{inotify_fd_, POLLIN, 0};
  const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
  if (ready == 0) return false;
  if (ready < 0) return true;  // EINTR: look, to be safe
  // Drain the events: one look covers them all.
  alignas(inotify_event) char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(inotify_fd_, buf, sizeof buf)) > 0) {
    for (ssize_t at = 0; at < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
      if ((e->mask & IN_IGNORED) != 0) watched_ = false;  // the file went away
      at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
    }
  }
  return true;
}

}  // namespace conveyor::sqlite
