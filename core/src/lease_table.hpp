// LeaseTable: the leases of the jobs this process claimed and has not yet
// settled. A lease enters when its job is handed to a worker, is marked
// handler-done when the job's outcome goes to the completer, and leaves when
// the completer settles it (recorded, refused or abandoned) or shutdown
// gives it back. Heartbeats extend every lease held (running, or finished
// with its outcome not yet recorded), so a job whose result waits for
// storage is not rescued and run again; an outcome may be committed while
// its entry still exists, so a refused extension of a finished job is not a
// lost lease.
//
// Thread-safe: every method may be called from any thread.
#pragma once

#include <conveyor/internal/mutex.hpp>
#include <conveyor/internal/storage.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace conveyor {

class LeaseTable {
 public:
  struct Running {
    conveyor_lease lease;
    std::string queue;
    std::string kind;
  };

  // Adds the leases of freshly claimed jobs.
  void add(std::span<const Job> jobs) EXCLUDES(mu_);
  // The job's handler returned; its outcome is with the completer.
  void mark_handler_done(const conveyor_lease& lease) EXCLUDES(mu_);
  // Removes the lease. Returns false when it was not present (settled before).
  bool settle(const conveyor_lease& lease) EXCLUDES(mu_);
  // Leases whose handler is still running, for shutdown.
  std::vector<conveyor_lease> running() const EXCLUDES(mu_);
  // Every lease held (running or with its outcome unrecorded), for heartbeats.
  std::vector<conveyor_lease> held() const EXCLUDES(mu_);
  // The same with the queue and kind, for what shutdown reports.
  std::vector<Running> running_jobs() const EXCLUDES(mu_);
  // True while the lease is present and its handler has not returned.
  bool handler_running(const conveyor_lease& lease) const EXCLUDES(mu_);
  size_t size() const EXCLUDES(mu_);

 private:
  struct Entry {
    int64_t lease_token = 0;
    bool handler_done = false;
    std::string queue;
    std::string kind;
  };
  using Map = std::unordered_multimap<int64_t, Entry>;  // by job id
  Map::iterator find(const conveyor_lease& lease) REQUIRES(mu_);
  Map::const_iterator find(const conveyor_lease& lease) const REQUIRES(mu_);

  // Guarded by mu_.
  mutable Mutex mu_;
  Map entries_ GUARDED_BY(mu_);
};

}  // namespace conveyor
