// UnservedKinds: which pending jobs no consumer of this engine serves, per
// queue and kind, for queue reports, /metrics and a warning. A job counts
// once it has been ready for the grace period ([engine] unknown_kind_grace_s)
// and its kind is not among the ServedKinds.
//
// Bounded: a pass lists, per queue with pending jobs, at most kScanLimit jobs
// ready since before the grace period (storage's list_jobs, id order, one
// page), so the counts are of those first kScanLimit jobs, not of the whole
// backlog. A queue whose oldest pending job (job_counts) is younger than the
// grace is not listed at all. Needs the plugin's list_jobs (ABI 1.1).
//
// Thread-safety: scan() from one thread at a time (the maintenance thread);
// report() from any thread.
#pragma once

#include "served_kinds.hpp"

#include <conveyor/clock.hpp>
#include <conveyor/internal/mutex.hpp>
#include <conveyor/internal/storage.hpp>
#include <conveyor/queue_report.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace conveyor {

class UnservedKinds {
 public:
  static constexpr uint32_t kScanLimit = 1000;  // jobs examined per queue per pass
  // Per queue (only those with unserved jobs): kinds sorted by name.
  using Report = std::map<std::string, std::vector<KindCount>, std::less<>>;

  UnservedKinds(Storage& storage, const ServedKinds& served, const Clock& clock,
                std::chrono::seconds grace);

  // One pass over every queue storage counts pending jobs in; replaces the
  // report and warns once per (queue, kind) newly found (again if it clears
  // and comes back). Throws StorageError (the report is kept).
  void scan() EXCLUDES(mu_);
  Report report() const EXCLUDES(mu_);

  // How often the engine scans: a quarter of the grace, between 1 s and 15 s,
  // so a job shows at most that long after its grace ends.
  static std::chrono::milliseconds period(std::chrono::seconds grace);

 private:
  // Constant after construction.
  Storage& storage_;
  const ServedKinds& served_;
  const Clock& clock_;
  const std::chrono::seconds grace_;

  // Owned by scan()'s thread.
  std::set<std::pair<std::string, std::string>> warned_;  // (queue, kind)

  // Guarded by mu_.
  mutable Mutex mu_;
  Report report_ GUARDED_BY(mu_);
};

}  // namespace conveyor
