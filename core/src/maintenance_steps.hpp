// The bodies of the engine's maintenance steps (Maintenance runs them on
// their periods). Each throws StorageError when storage fails.
#pragma once

#include "dispatcher.hpp"
#include "job_runner.hpp"
#include "lease_table.hpp"
#include "maintenance.hpp"
#include "override_follower.hpp"
#include "unserved_kinds.hpp"

#include <conveyor/clock.hpp>
#include <conveyor/config.hpp>
#include <conveyor/internal/metrics.hpp>
#include <conveyor/internal/remote_workers.hpp>
#include <conveyor/internal/storage.hpp>

#include <chrono>
#include <cstdint>

namespace conveyor {

// Extends by lease from now the lease of every job whose handler still runs.
// A refused extension of a job that is still running means another process
// rescued or cancelled it: logged. Returns how many were refused that way.
uint32_t extend_running_leases(Storage& storage, const LeaseTable& leases, const Clock& clock,
                               std::chrono::milliseconds lease);

// Makes every job whose lease expired available again (in batches of 1,000).
// Returns how many were rescued.
// Counted per queue in metrics (unattributed from an ABI 1.0 plugin).
uint64_t rescue_expired_jobs(Storage& storage, const Clock& clock, Metrics& metrics);

// Deletes finished jobs finalized more than retention ago (in batches).
uint64_t purge_finished_jobs(Storage& storage, const Clock& clock, std::chrono::seconds retention);

// Adds to the dispatcher every queue storage knows that it does not.
void discover_queues(Storage& storage, Dispatcher& dispatcher, const Config& config);

// The safety net under notifications (Dispatcher::Options::swept): wakes
// every queue that job_counts reports with pending jobs and not paused (a
// notification lost, or a job made ready without one). Returns how many
// queues it woke.
uint32_t wake_queues_with_pending_jobs(Storage& storage, Dispatcher& dispatcher,
                                       const Clock& clock);

// Deletes the shared records of key buckets (FleetBucket::kKeyPrefix) that
// have been full for kIdleKeyBucketAge, in batches: such a record means the
// same as none, so shared storage for keys stays proportional to keys with
// work (ABI 1.5's delete_shared_states). Returns how many were deleted.
uint64_t forget_idle_key_buckets(Storage& storage, const Clock& clock);
inline constexpr std::chrono::seconds kIdleKeyBucketAge{60};
inline constexpr std::chrono::seconds kIdleKeyBucketSweep{30};

// What the engine's maintenance steps work on.
struct MaintainedParts {
  Storage& storage;
  OverrideFollower& follower;
  Dispatcher& dispatcher;
  const LeaseTable& leases;
  const Clock& clock;
  const Config& config;
  Metrics& metrics;                   // rescued jobs count per queue
  UnservedKinds* unserved = nullptr;  // scanned when given (the plugin has list_jobs)
  RemoteWorkers* remote = nullptr;    // swept when given
  bool sweep_pending = false;         // run wake_queues_with_pending_jobs
  JobRunner* runner = nullptr;        // its attempts past their deadline time out
};
// The name of the step that follows overrides (run_soon on a notification).
inline constexpr const char* kOverridesStep = "reading rate-limit overrides";
// The engine's steps on their periods: overrides (250 ms), queue discovery
// (poll interval), heartbeats (a third of the lease), rescue, purge, and the
// scan for unserved kinds (UnservedKinds::period), remote workers' expired
// leases and silent workers (every second), and the sweep for pending jobs
// (notified_poll_interval_ms), and job timeouts (JobRunner::kTimeoutCheckPeriod:
// the runner's attempts, then remote workers' jobs).
std::vector<Maintenance::Step> engine_maintenance_steps(MaintainedParts parts);

// Gives back to storage the leases of jobs this process will not finish
// (dropped or abandoned at shutdown) so another process runs them; logs the
// abandoned ones. Returns how many were released; never throws.
uint32_t release_unfinished_leases(Storage& storage, const Clock& clock,
                                   const JobRunner::Stopped& stopped);

}  // namespace conveyor
