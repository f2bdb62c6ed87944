#include "completer.hpp"

#include <conveyor/internal/log.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>

namespace conveyor {

Completer::Completer(Storage& storage, const Clock& clock,
                     std::function<void(const conveyor_lease&)> settled, Metrics* metrics,
                     RetryRecorded retry_recorded)
    : storage_(storage),
      clock_(clock),
      settled_(std::move(settled)),
      metrics_(metrics),
      retry_recorded_(std::move(retry_recorded)),
      failure_log_(clock, {}) {}

void Completer::count_storage_error() {
  if (metrics_)
    metrics_->storage_errors("recording_outcomes").fetch_add(1, std::memory_order_relaxed);
}

namespace {
// Group commit: one storage transaction per batch of outcomes, not per job.
// The first outcome starts a short linger; a full batch ends it early.
constexpr size_t kGroupSize = 256;
constexpr auto kLinger = std::chrono::microseconds(1000);
constexpr auto kMinBackoff = std::chrono::milliseconds(20);
constexpr auto kMaxBackoff = std::chrono::milliseconds(2000);

// A StorageError that says so may succeed later; anything else will not.
bool transient(const std::exception& e) {
  const auto* se = dynamic_cast<const StorageError*>(&e);
  return se != nullptr && se->transient();
}

// Logs a refusal; one that is proof of a lost lease (not a retry whose
// first try may have been committed) counts in the queue's leases_lost.
void refused(const Outcome& o, const char* what) {
  if (!o.retried && o.counters) o.counters->leases_lost.fetch_add(1, std::memory_order_relaxed);
  LogFields fields{{"queue", *o.queue}, {"job_id", o.lease.job_id}, {"kind", o.kind}};
  if (o.retried)
    spdlog::info(
        "queue {}: job {} {}; recording it again was refused: it was recorded before "
        "the storage's reply was lost, or its lease was lost meanwhile",
        *o.queue, o.lease.job_id, what);
  else
    spdlog::info("queue {}: job {} {} after its lease was lost; result discarded", *o.queue,
                 o.lease.job_id, what);
}

}  // namespace

void Completer::push(Outcome outcome) {
  MutexLock lock(mu_);
  if (closed_) {
    // run() has returned: nobody will record it.
    lock.unlock();
    std::vector<Outcome> late;
    late.push_back(std::move(outcome));
    abandon(late, "it finished after the completer stopped");
    return;
  }
  unsaved_jobs_.fetch_add(1, std::memory_order_relaxed);
  unsaved_bytes_.fetch_add(outcome.error.size(), std::memory_order_relaxed);
  pending_.push_back(std::move(outcome));
  if (pending_.size() == 1 || pending_.size() == kGroupSize) cv_.notify_one();
  lock.unlock();
  if (unsaved_jobs_.load(std::memory_order_relaxed) >= kMaxUnsavedJobs ||
      unsaved_bytes_.load(std::memory_order_relaxed) >= kMaxUnsavedBytes)
    update_backlogged();
}

void Completer::update_backlogged() {
  MutexLock lock(backlogged_mu_);
  const size_t jobs = unsaved_jobs_.load(std::memory_order_relaxed);
  const size_t bytes = unsaved_bytes_.load(std::memory_order_relaxed);
  const bool over = jobs >= kMaxUnsavedJobs || bytes >= kMaxUnsavedBytes;
  // Back under half the bound before claiming again, so it does not flap.
  const bool under = jobs < kMaxUnsavedJobs / 2 && bytes < kMaxUnsavedBytes / 2;
  const bool was = backlogged_.load(std::memory_order_relaxed);
  if (!was && over) {
    backlogged_.store(true, std::memory_order_release);
    spdlog::warn(
        "{} job outcomes ({} bytes) wait to be recorded in storage (at most {} jobs or {} "
        "bytes): no new claims until they are",
        jobs, bytes, kMaxUnsavedJobs, kMaxUnsavedBytes);
  } else if (was && under) {
    backlogged_.store(false, std::memory_order_release);
    spdlog::info("job outcomes are being recorded again ({} wait): claiming resumes", jobs);
  }
}

size_t Completer::pending() const {
  MutexLock lock(mu_);
  return pending_.size();
}

Completer::Stats Completer::stats() const {
  return Stats{recorded_.load(), refused_.load(), abandoned_.load()};
}

void Completer::finish(std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(mu_);
  finishing_ = true;
  ++finish_calls_;
  deadline_ = deadline;
  cv_.notify_one();
}

void Completer::settle(const Outcome& o, std::atomic<uint64_t>& how) {
  how.fetch_add(1, std::memory_order_relaxed);
  unsaved_jobs_.fetch_sub(1, std::memory_order_relaxed);
  unsaved_bytes_.fetch_sub(o.error.size(), std::memory_order_relaxed);
  settled_(o.lease);
}

void Completer::abandon(std::vector<Outcome>& batch, const char* why) {
  if (batch.empty()) return;
  spdlog::error(
      "{} job outcomes not recorded ({}); those jobs will run again after their leases "
      "expire",
      batch.size(), why);
  for (const Outcome& o : batch) settle(o, abandoned_);
  batch.clear();
}

bool Completer::record(std::vector<Outcome>& batch) {
  const int64_t now = clock_.wall_now_us();
  std::vector<bool> done(batch.size(), false);   // settled in this attempt
  std::vector<bool> tried(batch.size(), false);  // met a transient error
  bool unavailable = false;
  // A non-transient error: retrying would fail the same way.
  auto give_up = [&](const std::vector<size_t>& at, const std::exception& e) {
    std::vector<Outcome> abandoned;
    for (size_t i : at) {
      abandoned.push_back(std::move(batch[i]));
      done[i] = true;
    }
    abandon(abandoned, e.what());
  };

  std::vector<conveyor_lease> ok;
  std::vector<size_t> ok_at;
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch[i].succeeded) {
      ok.push_back(batch[i].lease);
      ok_at.push_back(i);
    }
  if (!ok.empty()) {
    try {
      std::vector<conveyor_status> results = storage_.complete(ok, now);
      for (size_t j = 0; j < ok_at.size(); ++j) {
        Outcome& o = batch[ok_at[j]];
        if (results.at(j) == CONVEYOR_OK) {
          o.counters->completed.fetch_add(1, std::memory_order_relaxed);
          settle(o, recorded_);
        } else {
          refused(o, "finished");
          settle(o, refused_);
        }
        done[ok_at[j]] = true;
      }
    } catch (const std::exception& e) {
      count_storage_error();
      if (transient(e)) {
        spdlog::warn("recording {} job outcomes failed, will retry: {}", batch.size(), e.what());
        for (size_t i : ok_at) tried[i] = true;
        unavailable = true;
      } else {
        give_up(ok_at, e);
      }
    }
  }
  for (size_t i = 0; i < batch.size() && !unavailable; ++i) {
    Outcome& o = batch[i];
    if (done[i] || o.succeeded) continue;
    try {
      if (o.released) {
        if (storage_.release(std::span<const conveyor_lease>(&o.lease, 1), now).at(0) ==
            CONVEYOR_OK) {
          settle(o, recorded_);
        } else {
          refused(o, "given back");
          settle(o, refused_);
        }
      } else if (storage_.fail(o.lease, o.error, o.retry_at_us, now) == CONVEYOR_OK) {
        (o.retry_at_us >= 0 ? o.counters->retried : o.counters->failed)
            .fetch_add(1, std::memory_order_relaxed);
        failure_log_.failed(
            {*o.queue, o.lease.job_id, o.kind, o.attempt, o.max_attempts, o.error, o.retry_at_us});
        if (o.retry_at_us >= 0 && retry_recorded_ && o.queue)
          retry_recorded_(*o.queue, o.retry_at_us);
        settle(o, recorded_);
      } else {
        refused(o, "failed");
        settle(o, refused_);
      }
      done[i] = true;
    } catch (const std::exception& e) {
      count_storage_error();
      if (transient(e)) {
        spdlog::warn("recording a job failure failed, will retry: {}", e.what());
        tried[i] = true;
        unavailable = true;
      } else {
        give_up({i}, e);
      }
    }
  }
  // Keep the rest for the retry. What met a transient error may have been
  // committed with only the reply lost: a refusal then is no proof of a
  // lost lease.
  size_t kept = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (done[i]) continue;
    if (tried[i]) batch[i].retried = true;
    if (kept != i) batch[kept] = std::move(batch[i]);
    ++kept;
  }
  batch.resize(kept);
  return !unavailable;
}

void Completer::run(std::stop_token stop) {
  std::vector<Outcome> batch;
  std::chrono::milliseconds backoff{0};
  for (;;) {
    MutexLock lock(mu_);
    if (backoff.count() > 0) {
      // Retry after the backoff, or stop trying at the finish deadline if
      // that comes first (finish() may move it while we wait).
      const auto retry_at = std::chrono::steady_clock::now() + backoff;
      for (;;) {
        const auto until = finishing_ ? std::min(retry_at, deadline_) : retry_at;
        const uint64_t calls = finish_calls_;
        // The predicates run with mu_ held, which the analysis cannot see
        // inside a lambda: hence the AssertHeld()s.
        if (!cv_.wait_until(mu_, stop, until, [&] {
              mu_.AssertHeld();
              return finish_calls_ != calls;
            }))
          break;
      }
    } else if (batch.empty()) {
      cv_.wait(mu_, stop, [&] {
        mu_.AssertHeld();
        return !pending_.empty() || finishing_;
      });
      cv_.wait_for(mu_, stop, kLinger, [&] {
        mu_.AssertHeld();
        return pending_.size() >= kGroupSize || finishing_;
      });
    }
    for (auto& o : pending_) batch.push_back(std::move(o));
    pending_.clear();
    const bool out_of_time = finishing_ && std::chrono::steady_clock::now() >= deadline_;
    const bool stopping = finishing_ || stop.stop_requested();
    if ((batch.empty() && stopping) || out_of_time || (stop.stop_requested() && !finishing_)) {
      closed_ = true;
      lock.unlock();
      abandon(batch, "shutting down with them unrecorded");
      return;
    }
    lock.unlock();
    if (batch.empty()) continue;
    if (record_some(batch)) {
      if (backoff.count() > 0) spdlog::info("recording job outcomes works again");
      backoff = std::chrono::milliseconds(0);
    } else {
      backoff = std::min(kMaxBackoff, std::max(kMinBackoff, backoff * 2));
    }
    if (backlogged()) update_backlogged();
  }
}

bool Completer::record_some(std::vector<Outcome>& backlog) {
  const size_t n = std::min(backlog.size(), batch_limit_);
  std::vector<Outcome> slice(std::make_move_iterator(backlog.begin()),
                             std::make_move_iterator(backlog.begin() + static_cast<ptrdiff_t>(n)));
  backlog.erase(backlog.begin(), backlog.begin() + static_cast<ptrdiff_t>(n));
  const bool ok = record(slice);
  // What was not recorded goes first next time, in order.
  backlog.insert(backlog.begin(), std::make_move_iterator(slice.begin()),
                 std::make_move_iterator(slice.end()));
  if (ok) {
    // Back up towards kMaxBatch: at once to the ceiling, and the ceiling
    // itself doubles after kBatchesBeforeGrowing recorded batches (the
    // database's limit may have been lifted).
    if (++recorded_batches_ >= kBatchesBeforeGrowing) {
      batch_ceiling_ = std::min(kMaxBatch, batch_ceiling_ * 2);
      recorded_batches_ = 0;
    }
    batch_limit_ = std::min(batch_limit_ * 2, batch_ceiling_);
  } else if (n > 1) {
    // Too large for the database's limits, perhaps: split it, and stay
    // under the size that failed.
    batch_limit_ = batch_ceiling_ = std::max<size_t>(1, n / 2);
    recorded_batches_ = 0;
    spdlog::info("recording job outcomes: next batches of at most {}", batch_limit_);
  }
  return ok;
}

}  // namespace conveyor
