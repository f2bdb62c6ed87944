// Jobs read from rows: the one decoder of every statement that returns jobs.
#ifndef CONVEYOR_PLUGINS_SQLITE_JOB_ROW_HPP
#define CONVEYOR_PLUGINS_SQLITE_JOB_ROW_HPP

#include <SQLiteCpp/Column.h>
#include <SQLiteCpp/Statement.h>
#include <conveyor/storage_plugin.hpp>

#include <cstdint>

namespace conveyor::sqlite {

// Job states as stored. They equal the CONVEYOR_JOB_* values; SCHEDULED is
// never stored (it is AVAILABLE with run_at in the future).
inline constexpr int kAvailable = CONVEYOR_JOB_AVAILABLE;
inline constexpr int kRunning = CONVEYOR_JOB_RUNNING;

// A whole job row (the columns of kGetJob, kListAvailable, kListRunning and
// kRescue, key, started_at and timeout_ms included), as get_job reports it at now_us: AVAILABLE
// with run_at after now_us is SCHEDULED, and only a running job has a lease.
sdk::OwnedJob job_from_row(const SQLite::Statement& st, int64_t now_us);

// A row kClaim or kClaimPlaces returns: the claimed job's stored fields (key,
// started_at and timeout_ms included) into j (its queue, state and lease are the claimer's, set by
// the caller).
void read_claimed_row(const SQLite::Statement& st, sdk::OwnedJob& j);
// The place (pos) of the job in a row kClaim or kClaimPlaces returns.
inline int64_t claimed_row_place(const SQLite::Statement& st) {
  return st.getColumn(10).getInt64();
}

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_JOB_ROW_HPP
