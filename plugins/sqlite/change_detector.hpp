// What other connections changed in the database since the last look.
#ifndef CONVEYOR_PLUGINS_SQLITE_CHANGE_DETECTOR_HPP
#define CONVEYOR_PLUGINS_SQLITE_CHANGE_DETECTOR_HPP

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace conveyor::sqlite {

class Connection;
class Database;

// Looks on a connection of its own: PRAGMA data_version changes when another
// connection committed. On a change it reads the job ids' high-water mark
// (new jobs: JOBS for each of their queues) and the change marker
// (RATE_LIMITS, and QUEUE_STATE for each queue whose paused flag changed).
// Jobs made ready again in place (retry, release, rescue) are not reported.
class ChangeDetector {
 public:
  ChangeDetector();
  ~ChangeDetector();
  ChangeDetector(const ChangeDetector&) = delete;
  ChangeDetector& operator=(const ChangeDetector&) = delete;

  // Whether a look has opened the connection.
  bool started() const { return conn_ != nullptr; }
  // Appends (kind, queue) for what changed since the last look; the first
  // look only learns the state. On an error the state is kept, so a look run
  // again starts from the same state.
  void look(Database& db, std::vector<std::pair<int32_t, std::string>>& found);

 private:
  std::unique_ptr<Connection> conn_;
  int64_t data_version_ = -1;  // -1: never looked
  int64_t last_id_ = 0;
  int64_t marker_ = 0;
  std::unordered_map<std::string, bool> paused_;  // queue -> paused
};

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_CHANGE_DETECTOR_HPP
