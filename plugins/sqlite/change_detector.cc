#include "change_detector.hpp"

#include <conveyor/storage_plugin.h>

#include <algorithm>
#include <optional>

#include "connection.hpp"
#include "database.hpp"

namespace conveyor::sqlite {

ChangeDetector::ChangeDetector() = default;
ChangeDetector::~ChangeDetector() = default;

void ChangeDetector::look(Database& db, std::vector<std::pair<int32_t, std::string>>& found) {
  if (!conn_) conn_ = db.open_connection(/*writer=*/false);
  Connection& c = *conn_;
  const int64_t version = query_int<sql::kDataVersion>(c);
  if (version == data_version_) return;
  // Read after the version: a commit in between is reported now and again
  // looked at (finding nothing new) on the next change.
  const int64_t last_id = query_int<sql::kLastJobId>(c);
  const int64_t marker = query_int<sql::kGetMarker>(c);
  const bool first = data_version_ < 0;  // the first look only learns the state
  if (!first && last_id > last_id_) {
    SQLite::Statement& st = c.get<sql::kQueuesOfJobsAfter>();
    ResetOnExit reset(st);
    st.bind(1, static_cast<int64_t>(last_id_));
    st.bind(2, static_cast<int64_t>(last_id));
    while (st.executeStep()) found.emplace_back(CONVEYOR_NOTIFY_JOBS, st.getColumn(0).getString());
  }
  // The paused flags are read again only when the marker moved (rare).
  std::optional<std::unordered_map<std::string, bool>> paused;
  if (first || marker != marker_) {
    paused.emplace();
    SQLite::Statement& st = c.get<sql::kQueueStates>();
    ResetOnExit reset(st);
    while (st.executeStep())
      paused->emplace(st.getColumn(0).getString(), st.getColumn(1).getInt() != 0);
  }
  if (!first && paused) {
    found.emplace_back(CONVEYOR_NOTIFY_RATE_LIMITS, "");
    for (const auto& [queue, is_paused] : *paused) {
      // A queue first seen unpaused was enqueued into (JOBS says so).
      auto before = paused_.find(queue);
      if (before == paused_.end() ? is_paused : before->second != is_paused)
        found.emplace_back(CONVEYOR_NOTIFY_QUEUE_STATE, queue);
    }
  }
  // Only now, so that a look run again after SQLITE_BUSY starts from the same state.
  data_version_ = version;
  last_id_ = std::max(last_id_, last_id);
  marker_ = marker;
  if (paused) paused_ = std::move(*paused);
}

}  // namespace conveyor::sqlite
