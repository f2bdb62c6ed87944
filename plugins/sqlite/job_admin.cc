// Operator commands that change jobs: cancel, retry_jobs, delete_jobs and
// purge_finished. Each keeps job_counts in step in the same transaction.
#include <string>
#include <utility>
#include <vector>

#include "final_counts.hpp"
#include "sqlite_storage.hpp"
#include "values.hpp"

namespace conveyor::sqlite {

using sdk::Error;

void SqliteStorage::cancel(int64_t job_id, int64_t now_us) {
  int changed = 0;
  db_.write_txn("cancel", [&](Connection& c) {
    SQLite::Statement& st = c.get<sql::kCancel>();
    ResetOnExit reset(st);
    st.bind(1, static_cast<int64_t>(now_us));
    st.bind(2, static_cast<int64_t>(job_id));
    changed = 0;
    if (!st.executeStep()) return;
    changed = 1;
    FinalCounts counts;
    counts.add(column_text(st, 0), CONVEYOR_JOB_CANCELLED, 1);
    counts.apply(c);
  });
  if (changed == 0)
    throw Error(CONVEYOR_E_NOT_FOUND,
                "cancel: job " + std::to_string(job_id) + " does not exist or is already final");
}

void SqliteStorage::retry_jobs(std::span<const int64_t> ids, int64_t now_us,
                               std::span<conveyor_status> results) {
  std::vector<conveyor_status> out(ids.size(), CONVEYOR_E_NOT_FOUND);
  db_.write_txn("retry_jobs", [&](Connection& c) {
    FinalCounts counts;
    SQLite::Statement& st = c.get<sql::kRetryJob>();
    SQLite::Statement& exists = c.get<sql::kJobExists>();
    for (size_t i = 0; i < ids.size(); ++i) {
      // The job's queue and state before the change (job_counts loses it).
      std::string queue;
      int state = 0;
      {
        ResetOnExit reset(exists);
        exists.bind(1, static_cast<int64_t>(ids[i]));
        if (!exists.executeStep()) {
          out[i] = CONVEYOR_E_NOT_FOUND;
          continue;
        }
        queue = column_text(exists, 0);
        state = exists.getColumn(1).getInt();
      }
      ResetOnExit reset(st);
      st.bind(1, static_cast<int64_t>(now_us));
      st.bind(2, static_cast<int64_t>(ids[i]));
      if (st.exec() > 0) {
        out[i] = CONVEYOR_OK;
        counts.add(std::move(queue), state, -1);
      } else {
        out[i] = CONVEYOR_E_WRONG_STATE;
      }
    }
    counts.apply(c);
  });
  std::copy(out.begin(), out.end(), results.begin());
}

void SqliteStorage::delete_jobs(std::span<const int64_t> ids, std::span<conveyor_status> results) {
  std::vector<conveyor_status> out(ids.size(), CONVEYOR_E_NOT_FOUND);
  db_.write_txn("delete_jobs", [&](Connection& c) {
    SQLite::Statement& st = c.get<sql::kDeleteJob>();
    SQLite::Statement& exists = c.get<sql::kJobExists>();
    for (size_t i = 0; i < ids.size(); ++i) {
      int changed = 0;
      {
        ResetOnExit reset(st);
        st.bind(1, static_cast<int64_t>(ids[i]));
        changed = st.exec();
      }
      if (changed > 0) {
        out[i] = CONVEYOR_OK;
        continue;
      }
      ResetOnExit reset(exists);
      exists.bind(1, static_cast<int64_t>(ids[i]));
      out[i] = exists.executeStep() ? CONVEYOR_E_WRONG_STATE : CONVEYOR_E_NOT_FOUND;
    }
  });
  std::copy(out.begin(), out.end(), results.begin());
}

uint64_t SqliteStorage::purge_finished(int64_t finalized_before_us, uint32_t max_jobs) {
  if (max_jobs == 0) return 0;
  int changed = 0;
  db_.write_txn("purge_finished", [&](Connection& c) {
    SQLite::Statement& st = c.get<sql::kPurge>();
    ResetOnExit reset(st);
    st.bind(1, static_cast<int64_t>(finalized_before_us));
    st.bind(2, static_cast<int64_t>(max_jobs));
    changed = st.exec();
  });
  return static_cast<uint64_t>(changed);
}

}  // namespace conveyor::sqlite
