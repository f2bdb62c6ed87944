// get_job and list_jobs: jobs as the host's inspection commands see them.
#include <algorithm>
#include <climits>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "job_row.hpp"
#include "sqlite_storage.hpp"
#include "values.hpp"

namespace conveyor::sqlite {
namespace {

using sdk::Error;
using sdk::OwnedJob;

// One index range of list_jobs: a stored state and the run_at bounds that
// split AVAILABLE (run_at <= now) from SCHEDULED (run_at > now).
struct ListRange {
  int stored_state;
  int64_t run_at_min;
  int64_t run_at_max;
};

std::vector<ListRange> list_ranges(std::span<const int32_t> states, int64_t now_us) {
  bool want[7] = {};
  if (states.empty())
    for (int s = 1; s <= 6; ++s) want[s] = true;
  for (int32_t s : states) want[s] = true;  // 1..6, checked by the adapter
  std::vector<ListRange> ranges;
  const int64_t lo = INT64_MIN, hi = INT64_MAX;
  if (want[CONVEYOR_JOB_AVAILABLE] && want[CONVEYOR_JOB_SCHEDULED])
    ranges.push_back({kAvailable, lo, hi});
  else if (want[CONVEYOR_JOB_AVAILABLE])
    ranges.push_back({kAvailable, lo, now_us});
  else if (want[CONVEYOR_JOB_SCHEDULED])
    ranges.push_back({kAvailable, now_us == hi ? hi : now_us + 1, hi});
  for (int s :
       {CONVEYOR_JOB_RUNNING, CONVEYOR_JOB_COMPLETED, CONVEYOR_JOB_FAILED, CONVEYOR_JOB_CANCELLED})
    if (want[s]) ranges.push_back({s, lo, hi});
  return ranges;
}

// The first `limit` ids after after_id of a queue's final jobs in one state:
// one jobs_list range per kind (the given one, or each of the queue's kinds
// in turn), each read only below the limit-th id found so far.
void final_ids(Connection& c, std::string_view queue, int state, std::string_view kind,
               int64_t after_id, uint32_t limit, std::vector<int64_t>& ids) {
  SQLite::Statement& range = c.get<sql::kListFinalIds>();
  SQLite::Statement& next = c.get<sql::kNextFinalKind>();
  std::vector<int64_t> found;  // sorted, at most limit
  auto read_kind = [&](std::string_view k) {
    const int64_t below = found.size() < limit ? INT64_MAX : found.back();
    ResetOnExit reset(range);
    bind_text(range, 1, queue);
    range.bind(2, state);
    bind_text(range, 3, k);
    range.bind(4, static_cast<int64_t>(after_id));
    range.bind(5, static_cast<int64_t>(below));
    range.bind(6, static_cast<int64_t>(limit));
    std::vector<int64_t> merged;
    std::vector<int64_t> mine;
    while (range.executeStep()) mine.push_back(range.getColumn(0).getInt64());
    std::merge(found.begin(), found.end(), mine.begin(), mine.end(), std::back_inserter(merged));
    if (merged.size() > limit) merged.resize(limit);
    found.swap(merged);
  };
  if (!kind.empty()) {
    read_kind(kind);
  } else {
    std::string k;  // kinds are never empty: '' sorts before every kind
    for (;;) {
      {
        ResetOnExit reset(next);
        bind_text(next, 1, queue);
        next.bind(2, state);
        bind_text(next, 3, k);
        if (!next.executeStep()) break;
        k = column_text(next, 0);
      }
      read_kind(k);
    }
  }
  ids.insert(ids.end(), found.begin(), found.end());
}

}  // namespace

void SqliteStorage::get_job(int64_t job_id, int64_t now_us, const sdk::JobSink& sink) {
  bool found = false;
  OwnedJob j;
  db_.read("get_job", [&](Connection& c) {
    SQLite::Statement& st = c.get<sql::kGetJob>();
    ResetOnExit reset(st);
    st.bind(1, static_cast<int64_t>(job_id));
    found = st.executeStep();
    if (found) j = job_from_row(st, now_us);
  });
  if (!found)
    throw Error(CONVEYOR_E_NOT_FOUND, "get_job: job " + std::to_string(job_id) + " not found");
  conveyor_job v = j.view();
  sink(v);
}

uint32_t SqliteStorage::list_jobs(std::string_view queue, std::span<const int32_t> states,
                                  std::string_view kind, int64_t after_id, uint32_t limit,
                                  int64_t now_us, const sdk::JobSink& sink) {
  const std::vector<ListRange> ranges = list_ranges(states, now_us);
  std::vector<OwnedJob> jobs;
  db_.read("list_jobs", [&](Connection& c) {
    jobs.clear();
    std::vector<int64_t> final;  // ids, read below
    // Each range in id order, at most limit each; merged below.
    for (const ListRange& r : ranges) {
      if (r.stored_state >= CONVEYOR_JOB_COMPLETED) {
        final_ids(c, queue, r.stored_state, kind, after_id, limit, final);
        continue;
      }
      SQLite::Statement& st =
          r.stored_state == kAvailable ? c.get<sql::kListAvailable>() : c.get<sql::kListRunning>();
      ResetOnExit reset(st);
      bind_text(st, 1, queue);
      st.bind(2, static_cast<int64_t>(after_id));
      st.bind(3, static_cast<int64_t>(r.run_at_min));
      st.bind(4, static_cast<int64_t>(r.run_at_max));
      st.bind(5, static_cast<int64_t>(limit));
      bind_text(st, 6, kind);
      while (st.executeStep()) jobs.push_back(job_from_row(st, now_us));
    }
    // The final jobs' rows, by primary key (only the ones that can be listed).
    std::sort(final.begin(), final.end());
    if (final.size() > limit) final.resize(limit);
    SQLite::Statement& get = c.get<sql::kGetJob>();
    for (int64_t id : final) {
      ResetOnExit reset(get);
      get.bind(1, static_cast<int64_t>(id));
      if (get.executeStep()) jobs.push_back(job_from_row(get, now_us));
    }
  });
  std::sort(jobs.begin(), jobs.end(),
            [](const OwnedJob& a, const OwnedJob& b) { return a.id < b.id; });
  if (jobs.size() > limit) jobs.resize(limit);
  for (const OwnedJob& j : jobs) {
    conveyor_job v = j.view();
    sink(v);
  }
  return static_cast<uint32_t>(jobs.size());
}

}  // namespace conveyor::sqlite
