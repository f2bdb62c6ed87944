// Maintenance: the engine's periodic storage chores (following overrides,
// discovering queues, heartbeats, rescue, purge), each step on a period of
// its own, run by one thread that this class owns.
//
// A failing step logs its first failure, a reminder at most every 30 s and
// its recovery, not a line per tick; storage errors are also reported to the
// StorageHealth. Steps run one at a time, never concurrently.
//
// Thread-safety: wake() from any thread; run_due() only while the thread is
// not started (tests drive it with a ManualClock); start() and stop() from
// one owner.
#pragma once

#include "storage_health.hpp"

#include <conveyor/clock.hpp>
#include <conveyor/internal/mutex.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace conveyor {

class Maintenance {
 public:
  struct Step {
    std::string name;  // what it does, for logs: "rescuing expired leases"
    std::chrono::milliseconds period;
    std::function<void()> run;  // throws on failure
    // Whether a run that returns proves storage works (it always calls
    // storage), so it may reset the StorageHealth's count of failures.
    bool proves_storage = true;
  };

  Maintenance(const Clock& clock, StorageHealth& health, std::vector<Step> steps);
  ~Maintenance();  // stop()
  Maintenance(const Maintenance&) = delete;
  Maintenance& operator=(const Maintenance&) = delete;

  // Runs every step due at now; returns when the next one is due.
  SteadyTime run_due(SteadyTime now) EXCLUDES(mu_);
  // Makes the step named name due now and wakes the thread. Thread-safe.
  void run_soon(const std::string& name) EXCLUDES(mu_);

  void start();
  // Wakes the thread and joins it; a running step finishes first. Idempotent.
  void stop() EXCLUDES(mu_);

  // Consecutive failures of the step named name (0 when it last worked).
  // Only while the thread is not running (tests).
  uint64_t failures(const std::string& name) const;

 private:
  struct Scheduled {
    Step step;
    SteadyTime due{};
    uint64_t failures = 0;
    SteadyTime next_log{};
  };
  void run_step(Scheduled& s, SteadyTime now);

  // Constant after construction.
  const Clock& clock_;
  StorageHealth& health_;

  // Each step's due is guarded by mu_ (run_soon() sets it from any thread);
  // the rest belongs to the running thread. Not GUARDED_BY, which cannot
  // name a field of the elements.
  std::vector<Scheduled> steps_;

  // Guarded by mu_.
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_requested_ GUARDED_BY(mu_) = false;
  bool woken_ GUARDED_BY(mu_) = false;

  // Owned by the owner thread (start() and stop()).
  std::thread thread_;
};

}  // namespace conveyor
