#include "maintenance_steps.hpp"

#include "fleet_bucket.hpp"

#include <conveyor/internal/log.hpp>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <map>

#include <algorithm>

namespace conveyor {
namespace {
constexpr uint32_t kRescueBatch = 1000;
constexpr uint32_t kPurgeBatch = 10000;
constexpr size_t kAbandonedLogLines = 20;
constexpr size_t kRescuedIdsLogged = 10;
using std::chrono::milliseconds;

// Purge often enough that nothing outlives retention by much more than a
// quarter of it, and at least once a minute.
milliseconds purge_period(uint32_t retention_s) {
  return std::clamp(milliseconds(int64_t(retention_s) * 250), milliseconds(100),
                    milliseconds(60'000));
}
}  // namespace

std::vector<Maintenance::Step> engine_maintenance_steps(MaintainedParts p) {
  const EngineConfig& e = p.config.engine;
  const auto lease = milliseconds(e.lease_ms);
  const auto retention = std::chrono::seconds(e.retention_s);
  std::vector<Maintenance::Step> steps = {
      {kOverridesStep, milliseconds(250),
       [p] {
         if (p.follower.refresh()) p.dispatcher.wake_all();
       }},
      {"discovering queues", milliseconds(e.poll_interval_ms),
       [p] { discover_queues(p.storage, p.dispatcher, p.config); }},
      {"extending leases", std::max(lease / 3, milliseconds(10)),
       [p, lease] { extend_running_leases(p.storage, p.leases, p.clock, lease); },
       /*proves_storage=*/false},  // nothing to extend: no storage call
      {"rescuing expired leases", milliseconds(e.rescue_interval_ms),
       [p, lease] {
         // Ours first: after an outage longer than a lease, the jobs this
         // process ran or still runs get their leases back before any is
         // rescued, so none whose result waits here runs again.
         extend_running_leases(p.storage, p.leases, p.clock, lease);
         if (rescue_expired_jobs(p.storage, p.clock, p.metrics) > 0) p.dispatcher.wake_all();
       }},
      {"purging finished jobs", purge_period(e.retention_s),
       [p, retention] { purge_finished_jobs(p.storage, p.clock, retention); }},
  };
  if (p.unserved)
    steps.push_back({"finding pending jobs of unserved kinds",
                     UnservedKinds::period(std::chrono::seconds(e.unknown_kind_grace_s)),
                     [u = p.unserved] { u->scan(); }});
  if (p.sweep_pending)
    steps.push_back({"looking for pending jobs of drained queues",
                     milliseconds(e.notified_poll_interval_ms),
                     [p] { wake_queues_with_pending_jobs(p.storage, p.dispatcher, p.clock); }});
  if (p.storage.has_slot(StorageSlot::kDeleteSharedStates))
    steps.push_back({"forgetting idle fleet buckets of keys", kIdleKeyBucketSweep,
                     [p] { forget_idle_key_buckets(p.storage, p.clock); }});
  if (p.runner || p.remote)
    steps.push_back({"timing out jobs", JobRunner::kTimeoutCheckPeriod,
                     [p] {
                       if (p.runner) p.runner->time_out_due(p.clock.steady_now());
                       if (p.remote) p.remote->time_out_due();  // may throw StorageError
                     },
                     /*proves_storage=*/false});
  if (p.remote)
    steps.push_back({"sweeping remote workers' leases", milliseconds(1000),
                     [r = p.remote] { r->sweep(); },
                     /*proves_storage=*/false});
  return steps;
}

uint64_t forget_idle_key_buckets(Storage& storage, const Clock& clock) {
  // Full again before now - kIdleKeyBucketAge: the same as no record (a
  // record's value is when its bucket is full again, wall ns).
  const int64_t below =
      (clock.wall_now_us() -
       std::chrono::duration_cast<std::chrono::microseconds>(kIdleKeyBucketAge).count()) *
      1000;
  constexpr uint32_t kBatch = 1000;
  uint64_t total = 0;
  for (uint32_t n = kBatch; n == kBatch;) {
    n = storage.delete_shared_states(FleetBucket::kKeyPrefix, below, kBatch);
    total += n;
  }
  return total;
}

uint32_t wake_queues_with_pending_jobs(Storage& storage, Dispatcher& dispatcher,
                                       const Clock& clock) {
  uint32_t woken = 0;
  for (const QueueStats& s : storage.job_counts(clock.wall_now_us())) {
    if (s.pending <= 0 || s.paused || !dispatcher.has_queue(s.queue)) continue;
    dispatcher.wake(s.queue);
    ++woken;
  }
  return woken;
}

uint32_t extend_running_leases(Storage& storage, const LeaseTable& leases, const Clock& clock,
                               std::chrono::milliseconds lease) {
  const std::vector<conveyor_lease> running = leases.held();
  if (running.empty()) return 0;
  const int64_t expires =
      clock.wall_now_us() + std::chrono::duration_cast<std::chrono::microseconds>(lease).count();
  const std::vector<conveyor_status> results = storage.extend_leases(running, expires);
  uint32_t lost = 0;
  for (size_t i = 0; i < results.size() && i < running.size(); ++i) {
    if (results[i] == CONVEYOR_OK) continue;
    // A handler that finished since the snapshot may have had its outcome
    // recorded, which ends the lease: not a lost lease.
    if (!leases.handler_running(running[i])) continue;
    ++lost;
    LogFields fields{{"job_id", running[i].job_id}};
    spdlog::warn("job {}: lease lost while running (cancelled or rescued elsewhere)",
                 running[i].job_id);
  }
  return lost;
}

uint64_t rescue_expired_jobs(Storage& storage, const Clock& clock, Metrics& metrics) {
  uint64_t total = 0;
  uint32_t n;
  // One line per sweep, by queue: runnable again, failed (no attempts
  // left), and a few job ids to look at.
  struct Counts {
    uint64_t runnable = 0, failed = 0;
    std::vector<int64_t> ids;
  };
  std::map<std::string, Counts, std::less<>> by_queue;
  do {
    Storage::Rescued r = storage.rescue_expired(clock.wall_now_us(), kRescueBatch);
    n = r.count;
    total += n;
    for (const Job& j : r.jobs) {
      metrics.queue(j.queue).rescued.fetch_add(1, std::memory_order_relaxed);
      Counts& c = by_queue[j.queue];
      ++(j.state == JobState::kFailed ? c.failed : c.runnable);
      if (c.ids.size() < kRescuedIdsLogged) c.ids.push_back(j.id);
    }
    // A plugin of ABI 1.0 reports only the count: it is not attributed to a queue.
    if (r.jobs.empty()) metrics.rescued_unattributed.fetch_add(n, std::memory_order_relaxed);
  } while (n == kRescueBatch);
  for (const auto& [queue, c] : by_queue) {
    LogFields fields{{"queue", queue}};
    spdlog::info(
        "queue {}: rescued {} job(s) whose leases expired: {} runnable again, {} failed (no "
        "attempts left); jobs {}{}",
        queue, c.runnable + c.failed, c.runnable, c.failed, fmt::join(c.ids, ", "),
        c.runnable + c.failed > c.ids.size() ? ", ..." : "");
  }
  if (by_queue.empty() && total > 0) spdlog::info("rescued {} jobs whose leases expired", total);
  return total;
}

uint64_t purge_finished_jobs(Storage& storage, const Clock& clock, std::chrono::seconds retention) {
  const int64_t cutoff = clock.wall_now_us() - retention.count() * 1'000'000;
  uint64_t total = 0, n;
  do {
    n = storage.purge_finished(cutoff, kPurgeBatch);
    total += n;
  } while (n == kPurgeBatch);
  return total;
}

void discover_queues(Storage& storage, Dispatcher& dispatcher, const Config& config) {
  for (const auto& [name, paused] : storage.list_queues())
    if (!dispatcher.has_queue(name)) dispatcher.add_queue(name, config.max_workers_for(name));
}

uint32_t release_unfinished_leases(Storage& storage, const Clock& clock,
                                   const JobRunner::Stopped& s) {
  std::vector<conveyor_lease> leases_back = s.dropped;
  size_t logged = 0;
  for (const auto& a : s.abandoned) {
    leases_back.push_back(a.lease);
    if (logged++ < kAbandonedLogLines) {
      LogFields fields{{"queue", a.queue}, {"job_id", a.lease.job_id}, {"kind", a.kind}};
      spdlog::warn(
          "job {} (queue {}, kind {}) still running after the shutdown timeout; "
          "its lease is released and another worker will run it",
          a.lease.job_id, a.queue, a.kind);
    }
  }
  if (leases_back.empty()) return 0;
  uint32_t released = 0;
  try {
    for (auto r : storage.release(leases_back, clock.wall_now_us())) released += r == CONVEYOR_OK;
    spdlog::warn("shutdown: released {} leases ({} still running, {} never started)", released,
                 s.abandoned.size(), s.dropped.size());
  } catch (const std::exception& e) {
    spdlog::error("releasing leases at shutdown failed (they will expire): {}", e.what());
  }
  return released;
}

}  // namespace conveyor
