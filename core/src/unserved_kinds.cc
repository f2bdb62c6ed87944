#include "unserved_kinds.hpp"

#include <conveyor/internal/log.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>

namespace conveyor {

UnservedKinds::UnservedKinds(Storage& storage, const ServedKinds& served, const Clock& clock,
                             std::chrono::seconds grace)
    : storage_(storage), served_(served), clock_(clock), grace_(grace) {}

std::chrono::milliseconds UnservedKinds::period(std::chrono::seconds grace) {
  using std::chrono::milliseconds;
  return std::clamp(std::chrono::duration_cast<milliseconds>(grace) / 4, milliseconds(1000),
                    milliseconds(15000));
}

void UnservedKinds::scan() {
  const int64_t now = clock_.wall_now_us();
  // Listing AVAILABLE jobs as of the end of the grace period yields exactly
  // those ready (run_at) since before it.
  const int64_t ready_by =
      now - std::chrono::duration_cast<std::chrono::microseconds>(grace_).count();
  const ServedKinds::Snapshot served = served_.snapshot();
  Report next;
  for (const QueueStats& s : storage_.job_counts(now)) {
    if (s.pending <= 0) continue;
    // No pending job ready since before the grace: nothing to count, and no
    // list (a young deep backlog would otherwise be walked to find none).
    if (s.oldest_pending_known && s.oldest_pending_run_at_us > ready_by) continue;
    JobQuery query;
    query.queue = s.queue;
    query.states = {JobState::kAvailable};
    query.limit = kScanLimit;
    std::map<std::string, int64_t> counts;
    for (const Job& job : storage_.list_jobs(query, ready_by)) {
      if (job.run_at_us > ready_by) continue;  // not past its grace (a plugin's rounding)
      if (!std::binary_search(served->begin(), served->end(), job.kind)) ++counts[job.kind];
    }
    if (counts.empty()) continue;
    std::vector<KindCount>& kinds = next[s.queue];
    for (auto& [kind, n] : counts) kinds.push_back({kind, n});
  }

  std::set<std::pair<std::string, std::string>> found;
  for (const auto& [queue, kinds] : next) {
    for (const KindCount& k : kinds) {
      found.insert({queue, k.kind});
      if (warned_.count({queue, k.kind})) continue;
      std::string list;
      for (const std::string& s : *served) list += (list.empty() ? "" : ", ") + s;
      LogFields fields{{"queue", queue}, {"kind", k.kind}};
      spdlog::warn(
          "queue {}: {}{} pending job(s) of kind '{}' ready for over {} s, and no consumer of "
          "this process serves that kind (it serves: {}); they wait until one does",
          queue, k.pending >= kScanLimit ? "at least " : "", k.pending, k.kind, grace_.count(),
          list.empty() ? "no kinds" : list);
    }
  }
  warned_ = std::move(found);
  MutexLock lock(mu_);
  report_ = std::move(next);
}

UnservedKinds::Report UnservedKinds::report() const {
  MutexLock lock(mu_);
  return report_;
}

}  // namespace conveyor
