// Queue-level operations: pausing, the per-queue counts (queue_stats and
// job_counts), list_queues, rate-limit overrides and the change marker that
// tells other processes to read them again.
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "arguments.hpp"
#include "change_marker.hpp"
#include "sqlite_storage.hpp"
#include "values.hpp"

namespace conveyor::sqlite {
namespace {

using sdk::Error;

// One queue's counts as queue_stats and job_counts report them, with the 1.1
// field the SDK's copy does not carry.
struct QueueRow : sdk::OwnedQueueStats {
  int64_t oldest_pending_run_at = 0;  // 0: nothing pending
  conveyor_queue_stats view() const noexcept {
    conveyor_queue_stats v = sdk::OwnedQueueStats::view();
    v.oldest_pending_run_at_us = oldest_pending_run_at;
    return v;
  }
};

}  // namespace

void SqliteStorage::set_queue_paused(std::string_view queue, bool paused, int64_t /*now_us*/) {
  require_queue(queue, "set_queue_paused");
  db_.write_txn("set_queue_paused", [&](Connection& c) {
    {
      SQLite::Statement& st = c.get<sql::kUpsertQueue>();
      ResetOnExit reset(st);
      bind_text(st, 1, queue);
      st.bind(2, paused ? 1 : 0);
      st.exec();
    }
    bump_change_marker(c);
  });
}

void SqliteStorage::queue_stats(int64_t now_us, const sdk::QueueStatsSink& sink) {
  std::vector<QueueRow> rows;
  db_.read("queue_stats", [&](Connection& c) {
    rows.clear();
    SQLite::Statement& st = c.get<sql::kQueueStats>();
    ResetOnExit reset(st);
    st.bind(1, static_cast<int64_t>(now_us));
    while (st.executeStep()) {
      QueueRow& r = rows.emplace_back();
      r.queue = column_text(st, 0);
      r.paused = st.getColumn(1).getInt64() != 0;
      for (int i = 0; i < 6; ++i) r.counts[i] = st.getColumn(2 + i).getInt64();
      r.oldest_pending_run_at = st.getColumn(8).getInt64();
    }
  });
  for (const QueueRow& r : rows) sink(r.view());
}

void SqliteStorage::list_queues(const sdk::QueueSink& sink) {
  std::vector<std::pair<std::string, bool>> rows;
  db_.read("list_queues", [&](Connection& c) {
    rows.clear();
    SQLite::Statement& st = c.get<sql::kListQueues>();
    ResetOnExit reset(st);
    while (st.executeStep()) rows.emplace_back(column_text(st, 0), st.getColumn(1).getInt64() != 0);
  });
  for (const auto& [name, paused] : rows) sink(name, paused);
}

void SqliteStorage::job_counts(int64_t now_us, const sdk::QueueStatsSink& sink) {
  std::vector<QueueRow> rows;
  db_.read("job_counts", [&](Connection& c) {
    rows.clear();
    {
      // The maintained counts (state 0: a paused queue's marker row), in name order.
      SQLite::Statement& st = c.get<sql::kJobCounts>();
      ResetOnExit reset(st);
      while (st.executeStep()) {
        std::string queue = column_text(st, 0);
        if (rows.empty() || rows.back().queue != queue)
          rows.emplace_back().queue = std::move(queue);
        QueueRow& r = rows.back();
        const int state = st.getColumn(1).getInt();
        const int64_t n = st.getColumn(2).getInt64();
        switch (state) {
          case 0:
            r.paused = true;
            break;
          case CONVEYOR_JOB_COMPLETED:
            r.counts[3] = n;
            break;
          case CONVEYOR_JOB_FAILED:
            r.counts[4] = n;
            break;
          case CONVEYOR_JOB_CANCELLED:
            r.counts[5] = n;
            break;
          default:
            break;
        }
      }
    }
    // Live jobs are counted from the partial indexes that hold only available
    // and running rows, never the retained ones.
    std::map<std::string, int64_t, std::less<>> running;
    {
      SQLite::Statement& st = c.get<sql::kCountRunning>();
      ResetOnExit reset(st);
      while (st.executeStep()) running[column_text(st, 0)] = st.getColumn(1).getInt64();
    }
    SQLite::Statement& live = c.get<sql::kCountAvailable>();
    for (QueueRow& r : rows) {
      ResetOnExit reset(live);
      bind_text(live, 1, r.queue);
      live.bind(2, static_cast<int64_t>(now_us));
      if (live.executeStep()) {
        const int64_t available = live.getColumn(0).getInt64();
        r.counts[1] = live.getColumn(1).getInt64();
        r.counts[0] = available - r.counts[1];
        r.oldest_pending_run_at = live.getColumn(2).getInt64();
      }
      if (auto it = running.find(r.queue); it != running.end()) r.counts[2] = it->second;
    }
  });
  // As queue_stats: queues with retained jobs or paused.
  for (const QueueRow& r : rows) {
    bool any = r.paused;
    for (int64_t n : r.counts) any = any || n != 0;
    if (any) sink(r.view());
  }
}

void SqliteStorage::set_rate_limit(std::string_view queue, double rate_per_sec, uint32_t burst,
                                   int64_t now_us) {
  set_rate_limit_scoped(queue, rate_per_sec, burst, CONVEYOR_SCOPE_PROCESS, now_us);
}

void SqliteStorage::set_rate_limit_scoped(std::string_view queue, double rate_per_sec,
                                          uint32_t burst, int32_t scope, int64_t now_us) {
  require_queue(queue, "set_rate_limit");
  if (!(rate_per_sec > 0) || !std::isfinite(rate_per_sec))
    throw Error(CONVEYOR_E_INVALID, "set_rate_limit: rate_per_sec must be > 0 and finite");
  if (burst < 1) throw Error(CONVEYOR_E_INVALID, "set_rate_limit: burst must be >= 1");
  db_.write_txn("set_rate_limit", [&](Connection& c) {
    {
      SQLite::Statement& st = c.get<sql::kUpsertRateLimit>();
      ResetOnExit reset(st);
      bind_text(st, 1, queue);
      st.bind(2, rate_per_sec);
      st.bind(3, static_cast<int64_t>(burst));
      st.bind(4, static_cast<int64_t>(now_us));
      st.bind(5, scope);
      st.exec();
    }
    bump_change_marker(c);
  });
}

void SqliteStorage::delete_rate_limit(std::string_view queue) {
  require_queue(queue, "delete_rate_limit");
  int changed = 0;
  db_.write_txn("delete_rate_limit", [&](Connection& c) {
    {
      SQLite::Statement& st = c.get<sql::kDeleteRateLimit>();
      ResetOnExit reset(st);
      bind_text(st, 1, queue);
      changed = st.exec();
    }
    if (changed == 0) return;
    bump_change_marker(c);
  });
  if (changed == 0)
    throw Error(CONVEYOR_E_NOT_FOUND,
                "delete_rate_limit: queue '" + std::string(queue) + "' has no rate-limit override");
}

void SqliteStorage::list_rate_limits(const sdk::RateLimitSink& sink) {
  std::vector<sdk::OwnedRateLimit> rows;
  db_.read("list_rate_limits", [&](Connection& c) {
    rows.clear();
    SQLite::Statement& st = c.get<sql::kListRateLimits>();
    ResetOnExit reset(st);
    while (st.executeStep())
      rows.push_back(sdk::OwnedRateLimit{column_text(st, 0), st.getColumn(1).getDouble(),
                                         st.getColumn(2).getInt64(), st.getColumn(3).getInt64(),
                                         st.getColumn(4).getInt()});
  });
  for (const sdk::OwnedRateLimit& r : rows) sink(r.view());
}

int64_t SqliteStorage::change_marker() {
  int64_t marker = 0;
  db_.read("change_marker", [&](Connection& c) {
    SQLite::Statement& st = c.get<sql::kGetMarker>();
    ResetOnExit reset(st);
    marker = st.executeStep() ? st.getColumn(0).getInt64() : 0;
  });
  return marker;
}

}  // namespace conveyor::sqlite
