// claim, claim_kinds and claim_keys: ready jobs of a queue leased to a
// worker.
//
// Idle polling must not take the write lock (a CLI or another server may
// want it): claim and claim_kinds look on a reader first. Returning 0 when
// that snapshot shows nothing ready is what a claim at that instant would
// have returned; the write transaction re-checks everything. claim_keys is
// not idle polling: its keys come from a listing that found them ready.
//
// A claim's write transaction picks the jobs' places, then updates them all
// in one statement (kClaimPlaces); with many keys, a statement reads the
// first job of kKeySlots keys (kClaimKeyFirsts), where a statement per key
// and per job cost more than the reads themselves.
#include <algorithm>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
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

// places as a JSON array ("[3,17,42]"), for json_each in kClaimPlaces.
std::string json_array_of(std::span<const int64_t> places) {
  std::string out = "[";
  for (const int64_t p : places) {
    if (out.size() > 1) out += ',';
    out += std::to_string(p);
  }
  out += ']';
  return out;
}

}  // namespace

template <typename Pick>
uint32_t SqliteStorage::claim_picked(const char* op, std::string_view queue, int64_t lease_token,
                                     int64_t now_us, int64_t lease_expires_us, bool look_first,
                                     const Pick& pick, const sdk::JobSink& sink) {
  if (look_first) {
    bool any_ready = false;
    db_.read(op, [&](Connection& c) {
      if (queue_paused(c, queue)) return;
      any_ready = !pick(c, /*probe=*/true).empty();
    });
    if (!any_ready) return 0;
  }
  std::vector<OwnedJob> claimed;
  std::vector<int64_t> picked;
  std::vector<int64_t> places;  // claimed[i]'s
  db_.write_txn(op, [&](Connection& c) {
    claimed.clear();
    places.clear();
    if (queue_paused(c, queue)) return;
    picked = pick(c, /*probe=*/false);
    if (picked.empty()) return;
    const uint32_t qi = claimed_.queue_index(queue);
    SQLite::Statement& st = c.get<sql::kClaimPlaces>();
    ResetOnExit reset(st);
    st.bind(1, static_cast<int64_t>(lease_token));
    st.bind(2, static_cast<int64_t>(lease_expires_us));
    st.bind(3, json_array_of(picked));
    st.bind(4, static_cast<int64_t>(now_us));
    claimed.reserve(picked.size());
    while (st.executeStep()) {
      OwnedJob& j = claimed.emplace_back();
      read_claimed_row(st, j);
      places.push_back(claimed_row_place(st));
      claimed_.remember(j.id, qi, places.back());
    }
  });
  // RETURNING does not promise an order: report in the picked one.
  std::unordered_map<int64_t, size_t> rank;  // place -> index in picked
  rank.reserve(picked.size());
  for (size_t i = 0; i < picked.size(); ++i) rank.emplace(picked[i], i);
  std::vector<size_t> order(claimed.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return rank.at(places[a]) < rank.at(places[b]); });
  std::vector<OwnedJob> in_order;
  in_order.reserve(claimed.size());
  for (const size_t i : order) in_order.push_back(std::move(claimed[i]));
  return report_claimed(in_order, queue, lease_token, lease_expires_us, sink);
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
    int64_t pos;
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
        out.push_back({st.getColumn(0).getInt64(), st.getColumn(1).getInt64(),
                       st.getColumn(2).getInt64(), st.getColumn(3).getInt64()});
    }
    std::sort(out.begin(), out.end(), InClaimOrder{});
    if (out.size() > max_jobs) out.resize(max_jobs);
    std::vector<int64_t> places;
    places.reserve(out.size());
    for (const Candidate& cand : out) places.push_back(cand.pos);
    return places;
  };
  return claim_picked("claim_kinds", queue, lease_token, now_us, lease_expires_us,
                      /*look_first=*/true, pick, sink);
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
  // claim order. Without a kind filter, the keys that take one job are read
  // kKeySlots at a time (kClaimKeyFirsts: one seek each, one statement for
  // them all). Any other key is read alone: its jobs_key range in claim
  // order, other kinds skipped, up to the max_jobs-th match (without a
  // filter, the range's first max_jobs). Keys not listed are never read.
  auto pick = [&](Connection& c, bool /*probe: never*/) {
    std::vector<int64_t> places;
    std::vector<const sdk::KeyClaim*> firsts;  // keys read by kClaimKeyFirsts
    SQLite::Statement& st = c.get<sql::kClaimKeyCandidates>();
    for (const sdk::KeyClaim& k : keys) {
      if (k.max_jobs == 0) continue;
      if (k.max_jobs == 1 && wanted.empty()) {
        firsts.push_back(&k);
        continue;
      }
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
        places.push_back(st.getColumn(0).getInt64());
        ++taken;
      }
    }
    SQLite::Statement& first = c.get<sql::kClaimKeyFirsts>();
    for (size_t at = 0; at < firsts.size(); at += sql::kKeySlots) {
      ResetOnExit reset(first);
      first.clearBindings();
      bind_text(first, 1, queue);
      first.bind(2, static_cast<int64_t>(now_us));
      const size_t n = std::min<size_t>(sql::kKeySlots, firsts.size() - at);
      for (size_t i = 0; i < n; ++i) bind_text(first, static_cast<int>(3 + i), firsts[at + i]->key);
      while (first.executeStep())
        if (!first.getColumn(0).isNull()) places.push_back(first.getColumn(0).getInt64());
    }
    return places;
  };
  // The keys come from a listing (list_ready_keys, on a reader) that found
  // them ready: claim_keys is not idle polling, so no look first.
  return claim_picked("claim_keys", queue, lease_token, now_us, lease_expires_us,
                      /*look_first=*/false, pick, sink);
}

}  // namespace conveyor::sqlite
