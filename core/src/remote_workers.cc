// The engine's side of the worker API (remote_workers.hpp).
#include <conveyor/internal/log.hpp>
#include <conveyor/internal/remote_workers.hpp>
#include <conveyor/validation.hpp>

#include "dispatcher.hpp"
#include "job_runner.hpp"
#include "job_timeouts.hpp"
#include "remote_claim.hpp"
#include "served_kinds.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

namespace conveyor {
namespace {

constexpr size_t kMaxQueuesPerClaim = 100;
constexpr size_t kMaxKindsPerClaim = 100;
constexpr size_t kMaxWorkerIdBytes = 200;
constexpr uint32_t kMaxWeight = 1000;

std::chrono::microseconds micros(std::chrono::milliseconds d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d);
}

// The claim's kinds, sorted and unique, each checked.
std::vector<std::string> checked_kinds(const std::vector<std::string>& kinds) {
  if (kinds.empty())
    throw ValidationError("kinds", "kinds: name at least one job kind this worker runs");
  if (kinds.size() > kMaxKindsPerClaim)
    throw ValidationError("kinds", fmt::format("kinds: at most {} kinds per claim, got {}",
                                               kMaxKindsPerClaim, kinds.size()));
  for (size_t i = 0; i < kinds.size(); ++i) {
    try {
      validate_job_kind(kinds[i]);
    } catch (const ValidationError& e) {
      throw ValidationError(fmt::format("kinds[{}]", i), fmt::format("kinds[{}]: {}", i, e.what()));
    }
  }
  std::vector<std::string> out = kinds;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void check_queues(const std::vector<RemoteWorkers::ClaimRequest::Queue>& queues) {
  if (queues.empty())
    throw ValidationError("queues", "queues: name at least one queue to claim from");
  if (queues.size() > kMaxQueuesPerClaim)
    throw ValidationError("queues", fmt::format("queues: at most {} queues per claim, got {}",
                                                kMaxQueuesPerClaim, queues.size()));
  std::set<std::string_view> seen;
  for (size_t i = 0; i < queues.size(); ++i) {
    const std::string field = fmt::format("queues[{}]", i);
    try {
      validate_queue_name(queues[i].name);
    } catch (const ValidationError& e) {
      throw ValidationError(field + ".queue", field + ".queue: " + e.what());
    }
    if (!seen.insert(queues[i].name).second)
      throw ValidationError(field + ".queue", fmt::format("{}.queue: {} is listed twice", field,
                                                          quote_for_message(queues[i].name)));
    if (queues[i].weight > kMaxWeight)
      throw ValidationError(field + ".weight", fmt::format("{}.weight: must be 0..{} (0 means 1), "
                                                           "got {}",
                                                           field, kMaxWeight, queues[i].weight));
  }
}

void check_claim(const RemoteWorkers::ClaimRequest& r) {
  check_queues(r.queues);
  if (r.max_jobs == 0 || r.max_jobs > RemoteWorkers::kMaxJobsPerClaim)
    throw ValidationError("maxJobs", fmt::format("maxJobs: must be 1..{} (the jobs this worker "
                                                 "can start now), got {}",
                                                 RemoteWorkers::kMaxJobsPerClaim, r.max_jobs));
  if (r.wait < std::chrono::milliseconds(0) || r.wait > RemoteWorkers::kMaxWait)
    throw ValidationError(
        "waitSeconds", fmt::format("waitSeconds: must be 0..{}", RemoteWorkers::kMaxWait.count()));
  if (r.lease < std::chrono::milliseconds(0) || r.lease > RemoteWorkers::kMaxLease ||
      (r.lease.count() > 0 && r.lease < std::chrono::seconds(1)))
    throw ValidationError("leaseSeconds",
                          fmt::format("leaseSeconds: must be 0 (the server's lease) or 1..{}",
                                      RemoteWorkers::kMaxLease.count()));
  if (r.worker_id.size() > kMaxWorkerIdBytes)
    throw ValidationError("workerId", fmt::format("workerId: at most {} bytes, got {}",
                                                  kMaxWorkerIdBytes, r.worker_id.size()));
}

void check_leases(std::span<const conveyor_lease> leases) {
  if (leases.empty()) throw ValidationError("leases", "leases: give at least one lease");
  if (leases.size() > RemoteWorkers::kMaxJobsPerClaim)
    throw ValidationError("leases", fmt::format("leases: at most {} per call, got {}: send them "
                                                "in batches",
                                                RemoteWorkers::kMaxJobsPerClaim, leases.size()));
  for (size_t i = 0; i < leases.size(); ++i)
    if (leases[i].job_id <= 0)
      throw ValidationError(
          fmt::format("leases[{}].jobId", i),
          fmt::format("leases[{}].jobId: must be a job id (>= 1), got {}", i, leases[i].job_id));
}

std::string timed_out_message(int64_t job_id, std::string_view error, std::string_view what) {
  return fmt::format(
      "job {}: {}: the server failed the attempt at its deadline (retried with backoff while "
      "attempts remain); stop working on it: the {} was discarded",
      job_id, error, what);
}

std::string lost_message(int64_t job_id, std::string_view what) {
  return fmt::format(
      "job {}: the lease is no longer current (it expired and the job was rescued, or the job "
      "was cancelled or finished): the {} was discarded",
      job_id, what);
}

}  // namespace

RemoteWorkers::RemoteWorkers(Storage& storage, Dispatcher& dispatcher, ServedKinds& served,
                             const Clock& clock, const Config& config, Backpressure backpressure,
                             Succeeded succeeded)
    : storage_(storage),
      dispatcher_(dispatcher),
      served_(served),
      clock_(clock),
      config_(config),
      backpressure_(std::move(backpressure)),
      succeeded_(std::move(succeeded)) {}

RemoteWorkers::~RemoteWorkers() {
  MutexLock lock(mu_);
  for (const auto& [key, w] : workers_)
    for (const std::string& kind : w.kinds) served_.remove(kind);
}

std::chrono::milliseconds RemoteWorkers::lease_or_default(std::chrono::milliseconds lease) const {
  return lease.count() > 0 ? lease : std::chrono::milliseconds(config_.engine.lease_ms);
}

RemoteWorkers::Cancel RemoteWorkers::claim(ClaimRequest request,
                                           std::function<void(Claimed&&)> done) {
  check_claim(request);
  if (!storage_.has_slot(StorageSlot::kClaimKinds)) {
    const PluginInfo& p = storage_.plugin_info();
    throw StorageError(CONVEYOR_E_UNSUPPORTED,
                       fmt::format("storage plugin '{}' implements ABI {}.{}; remote workers need "
                                   "ABI 1.1 (slot claim_kinds): upgrade the plugin",
                                   p.name, p.abi_major, p.abi_minor));
  }
  auto claim = std::make_shared<RemoteClaim>();
  claim->kinds = checked_kinds(request.kinds);
  for (const auto& q : request.queues)
    claim->queues.push_back({q.name, std::max(1u, q.weight), config_.max_workers_for(q.name)});
  claim->max_jobs = request.max_jobs;
  claim->deadline = clock_.steady_now() + request.wait;
  const std::chrono::milliseconds lease = lease_or_default(request.lease);
  claim->lease = micros(lease);
  // Anonymous workers are told apart by what they serve.
  std::string worker = request.worker_id.empty()
                           ? fmt::format("anonymous:{}", fmt::join(claim->kinds, ","))
                           : "id:" + request.worker_id;
  claim->deliver = [this, worker, lease, done = std::move(done)](QueueRunner* runner,
                                                                 std::vector<Job>&& jobs) {
    if (!jobs.empty()) granted(worker, runner, jobs, lease);
    done(Claimed{std::move(jobs), lease});
  };
  std::weak_ptr<RemoteClaim> weak = claim;
  bool closed = false;
  {
    MutexLock lock(mu_);
    touch_worker_locked(worker, claim->kinds);
    closed = closed_;
    if (!closed) {
      std::erase_if(waiting_, [](const std::weak_ptr<RemoteClaim>& w) {
        auto c = w.lock();
        return !c || !c->waiting();
      });
      waiting_.push_back(weak);
    }
  }
  if (closed) {
    if (claim->take()) claim->deliver(nullptr, {});
    return [] { return false; };
  }
  dispatcher_.submit_remote(std::move(claim));
  return [weak] {
    auto c = weak.lock();
    return c && c->cancel();
  };
}

void RemoteWorkers::touch_worker_locked(const std::string& key,
                                        const std::vector<std::string>& kinds) {
  auto [it, added] = workers_.try_emplace(key);
  Worker& w = it->second;
  w.last_seen = clock_.steady_now();
  if (!added && w.kinds == kinds) return;
  for (const std::string& k : kinds) served_.add(k);
  for (const std::string& k : w.kinds) served_.remove(k);
  w.kinds = kinds;
  if (added) spdlog::info("remote worker {} connected: kinds {}", key, fmt::join(kinds, ", "));
}

void RemoteWorkers::granted(const std::string& worker, QueueRunner* runner,
                            std::span<const Job> jobs, std::chrono::milliseconds lease) {
  const SteadyTime now = clock_.steady_now(), expires = now + lease;
  MutexLock lock(mu_);
  for (const Job& job : jobs) {
    Held& h = held_[job.id] = Held{runner,      job.queue,        job.lease_token, expires, now,
                                   job.attempt, job.max_attempts, worker,          job.key};
    if (auto t = attempt_timeout(job, config_.job_timeout_ms_for(job.queue))) {
      h.deadline = now + t->length;
      h.timeout_error = std::move(t->error);
    }
    if (auto it = workers_.find(worker); it != workers_.end()) ++it->second.held;
  }
}

void RemoteWorkers::settle_locked(const conveyor_lease& lease) {
  auto it = held_.find(lease.job_id);
  if (it == held_.end() || it->second.token != lease.lease_token) return;
  if (auto w = workers_.find(it->second.worker); w != workers_.end() && w->second.held > 0)
    --w->second.held;
  QueueRunner* runner = it->second.runner;
  held_.erase(it);
  dispatcher_.remote_job_finished(*runner, lease.job_id);
}

void RemoteWorkers::settle(std::span<const conveyor_lease> leases) {
  MutexLock lock(mu_);
  for (const conveyor_lease& l : leases) settle_locked(l);
}

std::vector<RemoteWorkers::Result> RemoteWorkers::results(
    std::span<const conveyor_lease> leases, const std::vector<conveyor_status>& statuses,
    std::string_view what) const {
  std::vector<Result> out;
  out.reserve(leases.size());
  for (size_t i = 0; i < leases.size(); ++i) {
    const conveyor_status s = i < statuses.size() ? statuses[i] : CONVEYOR_E_LEASE_LOST;
    out.push_back({leases[i].job_id, s,
                   s == CONVEYOR_OK ? std::string() : lost_message(leases[i].job_id, what)});
  }
  MutexLock lock(mu_);
  if (timed_out_.empty()) return out;
  for (size_t i = 0; i < leases.size(); ++i) {
    if (out[i].status == CONVEYOR_OK) continue;
    if (std::optional<std::string> error = timed_out_locked(leases[i])) {
      out[i].timed_out = true;
      out[i].message = timed_out_message(leases[i].job_id, *error, what);
    }
  }
  return out;
}

std::optional<std::string> RemoteWorkers::timed_out_locked(const conveyor_lease& lease) const {
  auto it = timed_out_.find(lease.job_id);
  if (it == timed_out_.end() || it->second.token != lease.lease_token) return std::nullopt;
  return it->second.error;
}

size_t RemoteWorkers::time_out_due() {
  struct Due {
    conveyor_lease lease;
    std::string queue, worker, error;
    int32_t attempt = 0, max_attempts = 0;
  };
  std::vector<Due> due;
  {
    const SteadyTime now = clock_.steady_now();
    MutexLock lock(mu_);
    for (const auto& [id, h] : held_)
      if (h.deadline && *h.deadline <= now)
        due.push_back(
            {{id, h.token}, h.queue, h.worker, h.timeout_error, h.attempt, h.max_attempts});
  }
  size_t n = 0;
  for (const Due& d : due) {
    const int64_t now = clock_.wall_now_us();
    // A failed attempt like any other: retried with backoff while attempts
    // remain. Not backpressure: the queue is not held.
    const int64_t retry_at = next_attempt_at_us(d.attempt, d.max_attempts, config_.engine, now);
    const conveyor_status status = storage_.fail(d.lease, d.error, retry_at, now);  // may throw
    {
      MutexLock lock(mu_);
      auto it = held_.find(d.lease.job_id);
      if (it == held_.end() || it->second.token != d.lease.lease_token)
        continue;  // settled meanwhile
      if (status == CONVEYOR_OK) {
        // Remembered while the worker may still call about it: as long as
        // the lease would have lasted, and a worker's silence after that.
        timed_out_[d.lease.job_id] =
            TimedOut{d.lease.lease_token, d.error,
                     std::max(it->second.expires, clock_.steady_now()) + kWorkerTimeout};
        it->second.runner->counters.timed_out.fetch_add(1, std::memory_order_relaxed);
      }
      settle_locked(d.lease);
    }
    // LEASE_LOST: the worker's result (or a cancel, a rescue) came first.
    if (status != CONVEYOR_OK) continue;
    ++n;
    LogFields fields{{"queue", d.queue}, {"job_id", d.lease.job_id}};
    spdlog::info("queue {}: job {} {} on remote worker {}: its attempt failed{}", d.queue,
                 d.lease.job_id, d.error, d.worker.empty() ? "(anonymous)" : d.worker,
                 retry_at >= 0 ? ", retried with backoff" : " for good (no attempts left)");
    if (retry_at >= 0) dispatcher_.wake_at(d.queue, retry_at);
  }
  return n;
}

void RemoteWorkers::time_out_inherited(std::span<const conveyor_lease> leases,
                                       std::chrono::milliseconds lease_length) {
  std::vector<conveyor_lease> inherited;
  {
    MutexLock lock(mu_);
    for (const conveyor_lease& l : leases) {
      auto it = held_.find(l.job_id);
      if ((it == held_.end() || it->second.token != l.lease_token) && !timed_out_locked(l))
        inherited.push_back(l);
    }
  }
  for (const conveyor_lease& l : inherited) {
    // Granted by an earlier server process, which kept the deadline: storage
    // has when the attempt started and the job's own timeout.
    const int64_t now = clock_.wall_now_us();
    std::optional<Job> job = storage_.get_job(l.job_id, now);
    if (!job || job->state != JobState::kRunning || job->lease_token != l.lease_token ||
        job->started_at_us <= 0)
      continue;
    const std::optional<AttemptTimeout> limit =
        attempt_timeout(*job, config_.job_timeout_ms_for(job->queue));
    if (!limit || job->started_at_us + micros(limit->length).count() > now) continue;
    const int64_t retry_at =
        next_attempt_at_us(job->attempt, job->max_attempts, config_.engine, now);
    if (storage_.fail(l, limit->error, retry_at, now) != CONVEYOR_OK) continue;
    {
      MutexLock lock(mu_);
      timed_out_[l.job_id] = TimedOut{l.lease_token, limit->error,
                                      clock_.steady_now() + lease_length + kWorkerTimeout};
    }
    LogFields fields{{"queue", job->queue}, {"job_id", l.job_id}};
    spdlog::info(
        "queue {}: job {} {} on a remote worker whose lease an earlier server process granted: "
        "its attempt failed{}",
        job->queue, l.job_id, limit->error,
        retry_at >= 0 ? ", retried with backoff" : " for good (no attempts left)");
    if (retry_at >= 0) dispatcher_.wake_at(job->queue, retry_at);
  }
}

std::vector<RemoteWorkers::Result> RemoteWorkers::complete(std::span<const conveyor_lease> leases) {
  check_leases(leases);
  const std::vector<conveyor_status> statuses = storage_.complete(leases, clock_.wall_now_us());
  std::vector<std::pair<std::string, SteadyTime>> completed;  // queue, granted
  {
    MutexLock lock(mu_);
    for (size_t i = 0; i < leases.size(); ++i) {
      auto it = held_.find(leases[i].job_id);
      if (succeeded_ && i < statuses.size() && statuses[i] == CONVEYOR_OK && it != held_.end() &&
          it->second.token == leases[i].lease_token)
        completed.emplace_back(it->second.queue, it->second.granted);
      settle_locked(leases[i]);
    }
  }
  for (const auto& [queue, granted] : completed) succeeded_(queue, granted);
  return results(leases, statuses, "completion");
}

RemoteWorkers::FailOutcome RemoteWorkers::fail(const conveyor_lease& lease, std::string_view error,
                                               std::chrono::milliseconds retry_after,
                                               bool permanent, bool backpressure,
                                               std::optional<std::chrono::milliseconds> max_hold) {
  check_leases(std::span<const conveyor_lease>(&lease, 1));
  if (retry_after < std::chrono::milliseconds(0))
    throw ValidationError("retryAfterSeconds", "retryAfterSeconds: must be 0 or more");
  if (backpressure && permanent)
    throw ValidationError("permanent",
                          "permanent: a backpressure fail gives the job back to run later; it "
                          "cannot also fail it for good");
  int32_t attempt = 0, max_attempts = 0;
  std::string queue, key;
  SteadyTime granted_at = clock_.steady_now();
  bool known = false;
  {
    MutexLock lock(mu_);
    if (auto it = held_.find(lease.job_id);
        it != held_.end() && it->second.token == lease.lease_token) {
      attempt = it->second.attempt;
      max_attempts = it->second.max_attempts;
      queue = it->second.queue;
      key = it->second.key;
      granted_at = it->second.granted;
      known = true;
    } else if (std::optional<std::string> timed_out = timed_out_locked(lease)) {
      throw StorageError(CONVEYOR_E_LEASE_LOST,
                         timed_out_message(lease.job_id, *timed_out, "failure"));
    }
  }
  if (!known) {
    // Granted by an earlier server process: storage has the attempts.
    std::optional<Job> job = storage_.get_job(lease.job_id, clock_.wall_now_us());
    if (!job || job->state != JobState::kRunning || job->lease_token != lease.lease_token)
      throw StorageError(CONVEYOR_E_LEASE_LOST, lost_message(lease.job_id, "failure"));
    attempt = job->attempt;
    max_attempts = job->max_attempts;
    queue = job->queue;
    key = job->key;
  }
  const int64_t now = clock_.wall_now_us();
  if (backpressure) {
    // Not a failure: the job goes back unspent, and its queue waits.
    const conveyor_status status =
        storage_.release(std::span<const conveyor_lease>(&lease, 1), now).at(0);
    settle(std::span<const conveyor_lease>(&lease, 1));
    if (status == CONVEYOR_E_LEASE_LOST)
      throw StorageError(CONVEYOR_E_LEASE_LOST, lost_message(lease.job_id, "failure"));
    // The answer says when the hold in force ends: the job waits for it.
    int64_t until = now;
    if (backpressure_)
      until =
          std::max(now, backpressure_(queue, key, retry_after, std::string(error.substr(0, 200)),
                                      lease.job_id, granted_at, max_hold));
    return FailOutcome{true, until};
  }
  int64_t retry_at = -1;
  if (!permanent && attempt < max_attempts)
    retry_at = retry_after.count() > 0
                   ? now + micros(retry_after).count()
                   : next_attempt_at_us(attempt, max_attempts, config_.engine, now);
  const std::string_view text = error.substr(0, kMaxErrorBytes);
  const conveyor_status status = storage_.fail(lease, text, retry_at, now);
  settle(std::span<const conveyor_lease>(&lease, 1));
  if (status == CONVEYOR_E_LEASE_LOST)
    throw StorageError(CONVEYOR_E_LEASE_LOST, lost_message(lease.job_id, "failure"));
  // Storage does not notify a retry: this process claims it when it is due.
  if (retry_at >= 0) dispatcher_.wake_at(queue, retry_at);
  return FailOutcome{retry_at >= 0, retry_at};
}

std::optional<std::string> RemoteWorkers::queue_of(const conveyor_lease& lease) const {
  {
    MutexLock lock(mu_);
    if (auto it = held_.find(lease.job_id);
        it != held_.end() && it->second.token == lease.lease_token)
      return it->second.queue;
  }
  // Granted by an earlier server process: storage knows the job.
  std::optional<Job> job = storage_.get_job(lease.job_id, clock_.wall_now_us());
  if (!job || job->state != JobState::kRunning || job->lease_token != lease.lease_token)
    return std::nullopt;
  return job->queue;
}

std::vector<RemoteWorkers::Result> RemoteWorkers::heartbeat(std::span<const conveyor_lease> leases,
                                                            std::chrono::milliseconds lease,
                                                            int64_t* expires_us) {
  check_leases(leases);
  if (lease < std::chrono::milliseconds(0) || lease > kMaxLease ||
      (lease.count() > 0 && lease < std::chrono::seconds(1)))
    throw ValidationError("leaseSeconds", fmt::format("leaseSeconds: must be 0 (the server's "
                                                      "lease) or 1..{}",
                                                      kMaxLease.count()));
  const std::chrono::milliseconds length = lease_or_default(lease);
  time_out_due();  // a lease past its job's deadline is not extended: it times out now
  time_out_inherited(leases, length);
  const int64_t expires = clock_.wall_now_us() + micros(length).count();
  const std::vector<conveyor_status> statuses = storage_.extend_leases(leases, expires);
  const SteadyTime steady_expires = clock_.steady_now() + length;
  {
    MutexLock lock(mu_);
    for (size_t i = 0; i < leases.size(); ++i) {
      if (i < statuses.size() && statuses[i] == CONVEYOR_OK) {
        auto it = held_.find(leases[i].job_id);
        if (it != held_.end() && it->second.token == leases[i].lease_token)
          it->second.expires = steady_expires;
      } else {
        settle_locked(leases[i]);  // the job is no longer this worker's
      }
    }
  }
  if (expires_us) *expires_us = expires;
  return results(leases, statuses, "heartbeat");
}

std::vector<RemoteWorkers::Result> RemoteWorkers::release(std::span<const conveyor_lease> leases) {
  check_leases(leases);
  const std::vector<conveyor_status> statuses = storage_.release(leases, clock_.wall_now_us());
  settle(leases);
  return results(leases, statuses, "release");
}

void RemoteWorkers::close() {
  std::vector<std::weak_ptr<RemoteClaim>> waiting;
  {
    MutexLock lock(mu_);
    closed_ = true;
    waiting.swap(waiting_);
  }
  for (const auto& w : waiting)
    if (auto c = w.lock(); c && c->take()) c->deliver(nullptr, {});
}

void RemoteWorkers::sweep() {
  const SteadyTime now = clock_.steady_now();
  MutexLock lock(mu_);
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->second.expires > now) {
      ++it;
      continue;
    }
    spdlog::info(
        "job {}: the lease of remote worker {} expired without a result; the job runs "
        "again when rescued",
        it->first, it->second.worker);
    const conveyor_lease lease{it->first, it->second.token};
    ++it;
    settle_locked(lease);
  }
  std::erase_if(timed_out_, [&](const auto& entry) { return entry.second.forget_at <= now; });
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (it->second.held > 0 || now - it->second.last_seen < kWorkerTimeout) {
      ++it;
      continue;
    }
    spdlog::info("remote worker {} is gone (no claim for {} s)", it->first, kWorkerTimeout.count());
    for (const std::string& k : it->second.kinds) served_.remove(k);
    it = workers_.erase(it);
  }
}

size_t RemoteWorkers::connected_workers() const {
  MutexLock lock(mu_);
  return workers_.size();
}

size_t RemoteWorkers::jobs_held() const {
  MutexLock lock(mu_);
  return held_.size();
}

}  // namespace conveyor
