// claim, claim_kinds and claim_keys: ready jobs of a queue leased to a
// worker.
//
// Idle polling must not take the write lock (a CLI or another server may
// want it): each looks on a reader first. Returning 0 when that snapshot shows
// nothing ready is what a claim at that instant would have returned; the
// write transaction re-checks everything.
#include <algorithm>
#include <span>
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

// The kinds of a claim_kinds or claim_keys filter, sorted, each once.
std::vector<std::string_view> distinct_kinds(std::span<const std::string_view> kinds) {
  std::vector<std::string_view> wanted(kinds.begin(), kinds.end());
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  return wanted;
}

}  // namespace

template <typename Pick>
uint32_t SqliteStorage::claim_picked(const char* op, std::string_view queue, int64_t lease_token,
                                     int64_t lease_expires_us, const Pick& pick,
                                     const sdk::JobSink& sink) {
  bool any_ready = false;
  db_.read(op, [&](Connection& c) {
    if (queue_paused(c, queue)) return;
    any_ready = !pick(c, /*probe=*/true).empty();
  });
  if (!any_ready) return 0;
  std::vector<OwnedJob> claimed;
  db_.write_txn(op, [&](Connection& c) {
    claimed.clear();
    if (queue_paused(c, queue)) return;
    const std::vector<int64_t> picked = pick(c, /*probe=*/false);
    const uint32_t qi = claimed_.queue_index(queue);
    SQLite::Statement& st = c.get<sql::kClaimOne>();
    for (const int64_t id : picked) {
      ResetOnExit reset(st);
      st.bind(1, static_cast<int64_t>(lease_token));
      st.bind(2, static_cast<int64_t>(lease_expires_us));
      st.bind(3, static_cast<int64_t>(id));
      while (st.executeStep()) {
        OwnedJob& j = claimed.emplace_back();
        read_claimed_row(st, j);
        claimed_.remember(j.id, qi, claimed_row_place(st));
      }
    }
  });
  return report_claimed(claimed, queue, lease_token, lease_expires_us, sink);  // as picked
}

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
  const std::vector<std::string_view> wanted = distinct_kinds(kinds);
  struct Candidate {
    int64_t id;
    int64_t priority;
    int64_t run_at;
  };
  // The first max_jobs ready jobs of the wanted kinds in claim order: the
  // first max_jobs of each kind (one jobs_claim range each), merged.
  auto pick = [&](Connection& c, bool /*probe*/) {
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
    std::vector<int64_t> ids;
    ids.reserve(out.size());
    for (const Candidate& cand : out) ids.push_back(cand.id);
    return ids;
  };
  return claim_picked("claim_kinds", queue, lease_token, lease_expires_us, pick, sink);
}

uint32_t SqliteStorage::claim_keys(std::string_view queue, std::span<const std::string_view> kinds,
                                   std::span<const sdk::KeyClaim> keys, int64_t lease_token,
                                   int64_t now_us, int64_t lease_expires_us,
                                   const sdk::JobSink& sink) {
  require_queue(queue, "claim_keys");
  if (std::all_of(keys.begin(), keys.end(), [](const sdk::KeyClaim& k) { return k.max_jobs == 0; }))
    return 0;
  const std::vector<std::string_view> wanted = distinct_kinds(kinds);
  // Per listed key, its first max_jobs ready jobs of the wanted kinds in
  // claim order: its jobs_key range read in claim order, other kinds
  // skipped, up to the max_jobs-th match (without a filter, the range's
  // first max_jobs). Keys not listed are never read.
  auto pick = [&](Connection& c, bool probe) {
    std::vector<int64_t> ids;
    SQLite::Statement& st = c.get<sql::kClaimKeyCandidates>();
    for (const sdk::KeyClaim& k : keys) {
      if (k.max_jobs == 0) continue;
      ResetOnExit reset(st);
      bind_text(st, 1, queue);
      bind_text(st, 2, k.key);
      st.bind(3, static_cast<int64_t>(now_us));
      st.bind(4, wanted.empty() ? static_cast<int64_t>(k.max_jobs) : int64_t{-1});
      uint32_t taken = 0;
      while (taken < k.max_jobs && st.executeStep()) {
        if (!wanted.empty()) {
          const SQLite::Column kind = st.getColumn(1);
          const std::string_view v(kind.getText(), static_cast<size_t>(kind.getBytes()));
          if (!std::binary_search(wanted.begin(), wanted.end(), v)) continue;
        }
        ids.push_back(st.getColumn(0).getInt64());
        if (probe) return ids;
        ++taken;
      }
    }
    return ids;
  };
  return claim_picked("claim_keys", queue, lease_token, lease_expires_us, pick, sink);
}

}  // namespace conveyor::sqlite
