// claim and claim_kinds: ready jobs of a queue leased to a worker.
//
// Idle polling must not take the write lock (a CLI or another server may
// want it): both look on a reader first. Returning 0 when that snapshot shows
// nothing ready is what a claim at that instant would have returned; the
// write transaction re-checks everything.
#include <algorithm>
#include <string_view>
#include <vector>

#include "arguments.hpp"
#include "job_row.hpp"
#include "sqlite_storage.hpp"
#include "values.hpp"

namespace conveyor::sqlite {
namespace {

using sdk::OwnedJob;

// The order claims take ready jobs in (jobs_claim's).
struct InClaimOrder {
  template <typename Job>
  bool operator()(const Job& a, const Job& b) const {
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.run_at != b.run_at) return a.run_at < b.run_at;
    return a.id < b.id;
  }
};

bool queue_paused(Connection& c, std::string_view queue) {
  SQLite::Statement& paused = c.get<sql::kQueuePaused>();
  ResetOnExit reset(paused);
  bind_text(paused, 1, queue);
  return paused.executeStep() && paused.getColumn(0).getInt64() != 0;
}

// Reports the claimed jobs, in the order given, as running under the lease.
uint32_t report_claimed(std::vector<OwnedJob>& claimed, std::string_view queue, int64_t lease_token,
                        int64_t lease_expires_us, const sdk::JobSink& sink) {
  for (OwnedJob& j : claimed) {
    j.state = CONVEYOR_JOB_RUNNING;
    j.queue.assign(queue);
    j.lease_token = lease_token;
    j.lease_expires = lease_expires_us;
    j.finalized_at = 0;
    conveyor_job v = j.view();
    sink(v);
  }
  return static_cast<uint32_t>(claimed.size());
}

}  // namespace

uint32_t SqliteStorage::claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token,
                              int64_t now_us, int64_t lease_expires_us, const sdk::JobSink& sink) {
  require_queue(queue, "claim");
  if (max_jobs == 0) return 0;
  bool any_ready = false;
  db_.read("claim", [&](Connection& c) {
    SQLite::Statement& st = c.get<sql::kAnyReady>();
    ResetOnExit reset(st);
    bind_text(st, 1, queue);
    st.bind(2, static_cast<int64_t>(now_us));
    any_ready = st.executeStep() && st.getColumn(0).getInt() != 0;
  });
  if (!any_ready) return 0;
  std::vector<OwnedJob> claimed;
  db_.write_txn("claim", [&](Connection& c) {
    claimed.clear();
    if (queue_paused(c, queue)) return;
    SQLite::Statement& st = c.get<sql::kClaim>();
    ResetOnExit reset(st);
    st.bind(1, static_cast<int64_t>(lease_token));
    st.bind(2, static_cast<int64_t>(lease_expires_us));
    bind_text(st, 3, queue);
    st.bind(4, static_cast<int64_t>(now_us));
    st.bind(5, static_cast<int64_t>(max_jobs));
    claimed.reserve(std::min<uint32_t>(max_jobs, 1024));
    const uint32_t qi = claimed_.queue_index(queue);
    while (st.executeStep()) {
      OwnedJob& j = claimed.emplace_back();
      read_claimed_row(st, j);
      claimed_.remember(j.id, qi, claimed_row_place(st));
    }
  });
  // RETURNING does not promise an order.
  std::sort(claimed.begin(), claimed.end(), InClaimOrder{});
  return report_claimed(claimed, queue, lease_token, lease_expires_us, sink);
}

uint32_t SqliteStorage::claim_kinds(std::string_view queue, std::span<const std::string_view> kinds,
                                    uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                                    int64_t lease_expires_us, const sdk::JobSink& sink) {
  require_queue(queue, "claim_kinds");
  if (max_jobs == 0) return 0;
  std::vector<std::string_view> wanted(kinds.begin(), kinds.end());
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  struct Candidate {
    int64_t id;
    int64_t priority;
    int64_t run_at;
  };
  // The first max_jobs ready jobs of the wanted kinds in claim order: the
  // first max_jobs of each kind (one jobs_claim range each), merged.
  auto candidates = [&](Connection& c) {
    std::vector<Candidate> out;
    SQLite::Statement& st = c.get<sql::kClaimKindCandidates>();
    for (std::string_view k : wanted) {
      ResetOnExit reset(st);
      bind_text(st, 1, queue);
      bind_text(st, 2, k);
      st.bind(3, static_cast<int64_t>(now_us));
      st.bind(4, static_cast<int64_t>(max_jobs));
      while (st.executeStep())
        out.push_back(
            {st.getColumn(0).getInt64(), st.getColumn(1).getInt64(), st.getColumn(2).getInt64()});
    }
    std::sort(out.begin(), out.end(), InClaimOrder{});
    if (out.size() > max_jobs) out.resize(max_jobs);
    return out;
  };
  bool any_ready = false;
  db_.read("claim_kinds", [&](Connection& c) {
    if (queue_paused(c, queue)) return;
    any_ready = !candidates(c).empty();
  });
  if (!any_ready) return 0;
  std::vector<OwnedJob> claimed;
  db_.write_txn("claim_kinds", [&](Connection& c) {
    claimed.clear();
    if (queue_paused(c, queue)) return;
    const std::vector<Candidate> picked = candidates(c);
    const uint32_t qi = claimed_.queue_index(queue);
    SQLite::Statement& st = c.get<sql::kClaimOne>();
    for (const Candidate& cand : picked) {
      ResetOnExit reset(st);
      st.bind(1, static_cast<int64_t>(lease_token));
      st.bind(2, static_cast<int64_t>(lease_expires_us));
      st.bind(3, static_cast<int64_t>(cand.id));
      while (st.executeStep()) {
        OwnedJob& j = claimed.emplace_back();
        read_claimed_row(st, j);
        claimed_.remember(j.id, qi, claimed_row_place(st));
      }
    }
  });
  return report_claimed(claimed, queue, lease_token, lease_expires_us, sink);  // in claim order
}

}  // namespace conveyor::sqlite
