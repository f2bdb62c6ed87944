#include "job_row.hpp"

#include "values.hpp"

namespace conveyor::sqlite {

sdk::OwnedJob job_from_row(const SQLite::Statement& st, int64_t now_us) {
  sdk::OwnedJob j;
  j.id = st.getColumn(0).getInt64();
  j.queue = column_text(st, 1);
  j.kind = column_text(st, 2);
  j.payload = column_blob(st, 3);
  j.priority = st.getColumn(4).getInt();
  j.state = st.getColumn(5).getInt();
  j.attempt = st.getColumn(6).getInt();
  j.max_attempts = st.getColumn(7).getInt();
  j.run_at = st.getColumn(8).getInt64();
  j.created_at = st.getColumn(9).getInt64();
  j.finalized_at = st.getColumn(10).getInt64();
  j.lease_token = st.getColumn(11).getInt64();
  j.lease_expires = st.getColumn(12).getInt64();
  j.last_error = column_text(st, 13);
  j.cost = st.getColumn(14).getInt();
  j.key = column_text(st, 15);
  j.started_at = st.getColumn(16).getInt64();
  j.timeout_ms = st.getColumn(17).getInt64();
  if (j.state == kAvailable && j.run_at > now_us) j.state = CONVEYOR_JOB_SCHEDULED;
  if (j.state != kRunning) {
    j.lease_token = 0;
    j.lease_expires = 0;
  }
  return j;
}

void read_claimed_row(const SQLite::Statement& st, sdk::OwnedJob& j) {
  j.id = st.getColumn(0).getInt64();
  j.kind = column_text(st, 1);
  j.payload = column_blob(st, 2);
  j.priority = st.getColumn(3).getInt();
  j.attempt = st.getColumn(4).getInt();
  j.max_attempts = st.getColumn(5).getInt();
  j.run_at = st.getColumn(6).getInt64();
  j.created_at = st.getColumn(7).getInt64();
  j.last_error = column_text(st, 8);
  j.cost = st.getColumn(9).getInt();
  j.key = column_text(st, 11);
  j.started_at = st.getColumn(12).getInt64();
  j.timeout_ms = st.getColumn(13).getInt64();
}

}  // namespace conveyor::sqlite
