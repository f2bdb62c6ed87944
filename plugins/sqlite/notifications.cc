// wait_for_notification: sleeps until the -wal file is written, then looks
// for what changed, at least kLookGap and at most kFullLookEvery apart.
#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sqlite_storage.hpp"

namespace conveyor::sqlite {

void SqliteStorage::wait_for_notification(int64_t timeout_us, const sdk::NotifySink& sink) {
  using std::chrono::steady_clock;
  std::vector<std::pair<int32_t, std::string>> found;
  {
    std::lock_guard lock(watch_mu_);
    db_.check_file("wait_for_notification");
    const steady_clock::time_point deadline =
        steady_clock::now() + std::chrono::microseconds(std::max<int64_t>(0, timeout_us));
    bool written = !changes_.started();  // the first call looks at once
    for (;;) {
      const steady_clock::time_point now = steady_clock::now();
      if (written || now - looked_ >= kFullLookEvery) {
        db_.with_busy_retry("wait_for_notification", [&] {
          found.clear();
          changes_.look(db_, found);
        });
        looked_ = now;
      }
      if (!found.empty() || steady_clock::now() >= deadline) break;
      // At least kLookGap after this look, at most until the next full look.
      std::this_thread::sleep_until(std::min(deadline, looked_ + kLookGap));
      written = wal_.wait_for_write(db_.path(), std::min(deadline, looked_ + kFullLookEvery));
    }
  }
  for (const auto& [kind, queue] : found) sink(kind, queue);
}

}  // namespace conveyor::sqlite
