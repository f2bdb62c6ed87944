// The outcomes of claimed jobs: complete, fail, extend_leases, release, and
// rescue_expired for leases that ran out.
#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "final_counts.hpp"
#include "job_row.hpp"
#include "sqlite_storage.hpp"
#include "values.hpp"

namespace conveyor::sqlite {
namespace {

using sdk::Error;
using sdk::OwnedJob;

constexpr const char* kLeaseExpiredError = "lease expired: worker presumed dead";

}  // namespace

template <const Sql& S>
void SqliteStorage::per_lease(const char* op, int64_t value, std::span<const conveyor_lease> leases,
                              std::span<conveyor_status> results) {
  std::vector<conveyor_status> out(leases.size(), CONVEYOR_E_LEASE_LOST);
  db_.write_txn(op, [&](Connection& c) {
    SQLite::Statement& st = c.get<S>();
    for (size_t i = 0; i < leases.size(); ++i) {
      ResetOnExit reset(st);
      st.bind(1, static_cast<int64_t>(value));
      st.bind(2, static_cast<int64_t>(leases[i].job_id));
      st.bind(3, static_cast<int64_t>(leases[i].lease_token));
      out[i] = st.exec() > 0 ? CONVEYOR_OK : CONVEYOR_E_LEASE_LOST;
    }
  });
  std::copy(out.begin(), out.end(), results.begin());
}

void SqliteStorage::complete(std::span<const conveyor_lease> leases, int64_t now_us,
                             std::span<conveyor_status> results) {
  std::vector<conveyor_status> out(leases.size(), CONVEYOR_E_LEASE_LOST);
  db_.write_txn("complete", [&](Connection& c) {
    std::fill(out.begin(), out.end(), CONVEYOR_E_LEASE_LOST);
    // Jobs this handle claimed are completed by place, one statement per
    // lease token (a claim's batch shares one); the others one by one, by id.
    // Per token: place -> the lease's index and its claimed_ entry (a job
    // listed twice completes once; an entry is erased once its job is).
    struct Known {
      size_t index;
      ClaimedPlaces::Map::iterator entry;
    };
    std::map<int64_t, std::unordered_map<int64_t, Known>> by_token;
    std::vector<size_t> unknown;
    for (size_t i = 0; i < leases.size(); ++i) {
      const auto known = claimed_.find(leases[i].job_id);
      if (known == claimed_.end())
        unknown.push_back(i);
      else
        by_token[leases[i].lease_token].try_emplace(known->second.pos, Known{i, known});
    }
    // Entries are forgotten as their jobs complete, even if this transaction
    // is then retried or fails: a retry completes and counts those jobs as
    // unknown ones.
    std::vector<int64_t> per_queue(claimed_.queue_count(), 0);
    SQLite::Statement& at = c.get<sql::kCompleteAtPlaces>();
    std::string places;
    for (const auto& [token, known_at] : by_token) {
      places = "[";
      for (const auto& entry : known_at) {
        if (places.size() > 1) places += ',';
        places += std::to_string(entry.first);
      }
      places += ']';
      ResetOnExit reset(at);
      at.bind(1, static_cast<int64_t>(now_us));
      bind_text(at, 2, places);
      at.bind(3, static_cast<int64_t>(token));
      while (at.executeStep()) {
        const Known& k = known_at.at(at.getColumn(0).getInt64());
        out[k.index] = CONVEYOR_OK;
        ++per_queue[k.entry->second.queue];
        claimed_.forget(k.entry);
      }
    }
    // The ids whose queue this handle does not know, a JSON array for
    // kCountCompleted.
    std::string completed = "[";
    SQLite::Statement& st = c.get<sql::kComplete>();
    for (size_t i : unknown) {
      ResetOnExit reset(st);
      st.bind(1, static_cast<int64_t>(now_us));
      st.bind(2, static_cast<int64_t>(leases[i].job_id));
      st.bind(3, static_cast<int64_t>(leases[i].lease_token));
      if (st.exec() == 0) continue;
      out[i] = CONVEYOR_OK;
      if (completed.size() > 1) completed += ',';
      completed += std::to_string(leases[i].job_id);
    }
    {
      SQLite::Statement& add = c.get<sql::kAddCount>();
      for (size_t q = 0; q < per_queue.size(); ++q) {
        if (per_queue[q] == 0) continue;
        ResetOnExit reset(add);
        bind_text(add, 1, claimed_.queue_name(q));
        add.bind(2, CONVEYOR_JOB_COMPLETED);
        add.bind(3, static_cast<int64_t>(per_queue[q]));
        add.exec();
      }
    }
    if (completed.size() > 1) {
      // One statement per batch, cheaper than RETURNING queue on each UPDATE.
      completed += ']';
      SQLite::Statement& count = c.get<sql::kCountCompleted>();
      ResetOnExit reset(count);
      bind_text(count, 1, completed);
      count.exec();
    }
  });
  std::copy(out.begin(), out.end(), results.begin());
}

void SqliteStorage::extend_leases(std::span<const conveyor_lease> leases, int64_t lease_expires_us,
                                  std::span<conveyor_status> results) {
  per_lease<sql::kExtend>("extend_leases", lease_expires_us, leases, results);
}

void SqliteStorage::release(std::span<const conveyor_lease> leases, int64_t now_us,
                            std::span<conveyor_status> results) {
  per_lease<sql::kRelease>("release", now_us, leases, results);
}

void SqliteStorage::fail(conveyor_lease lease, std::string_view error_text, int64_t retry_at_us,
                         int64_t now_us) {
  int changed = 0;
  db_.write_txn("fail", [&](Connection& c) {
    const bool retry = retry_at_us >= 0;
    SQLite::Statement& st = retry ? c.get<sql::kFailRetry>() : c.get<sql::kFailFinal>();
    ResetOnExit reset(st);
    st.bind(1, static_cast<int64_t>(retry ? retry_at_us : now_us));
    bind_text(st, 2, error_text);
    st.bind(3, static_cast<int64_t>(lease.job_id));
    st.bind(4, static_cast<int64_t>(lease.lease_token));
    changed = 0;
    if (!st.executeStep()) return;
    changed = 1;
    claimed_.forget(lease.job_id);
    if (!retry) {
      FinalCounts counts;
      counts.add(column_text(st, 0), CONVEYOR_JOB_FAILED, 1);
      counts.apply(c);
    }
  });
  if (changed == 0)
    throw Error(CONVEYOR_E_LEASE_LOST, "fail: job " + std::to_string(lease.job_id) +
                                           " is not running under lease token " +
                                           std::to_string(lease.lease_token));
}

uint32_t SqliteStorage::rescue_expired(int64_t now_us, uint32_t max_jobs) {
  return rescue(now_us, max_jobs, nullptr);
}

uint32_t SqliteStorage::rescue_expired_v2(int64_t now_us, uint32_t max_jobs,
                                          const sdk::JobSink& sink) {
  return rescue(now_us, max_jobs, &sink);
}

uint32_t SqliteStorage::rescue(int64_t now_us, uint32_t max_jobs, const sdk::JobSink* sink) {
  if (max_jobs == 0) return 0;
  std::vector<OwnedJob> rescued;
  db_.write_txn("rescue_expired", [&](Connection& c) {
    SQLite::Statement& st = c.get<sql::kRescue>();
    ResetOnExit reset(st);
    st.bind(1, static_cast<int64_t>(now_us));
    bind_text(st, 2, kLeaseExpiredError);
    st.bind(3, static_cast<int64_t>(max_jobs));
    rescued.clear();
    FinalCounts counts;
    while (st.executeStep()) {
      OwnedJob& j = rescued.emplace_back(job_from_row(st, now_us));
      if (j.state >= CONVEYOR_JOB_COMPLETED) counts.add(j.queue, j.state, 1);
    }
    counts.apply(c);
  });
  if (sink != nullptr) {
    // RETURNING does not promise an order: report in rescue order.
    std::sort(rescued.begin(), rescued.end(),
              [](const OwnedJob& a, const OwnedJob& b) { return a.id < b.id; });
    for (const OwnedJob& j : rescued) {
      conveyor_job v = j.view();
      (*sink)(v);
    }
  }
  return static_cast<uint32_t>(rescued.size());
}

}  // namespace conveyor::sqlite
