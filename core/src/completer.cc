#include "completer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace conveyor {

Completer::Completer(Storage& storage, const Clock& clock,
                     std::function<void(const conveyor_lease&)> settled)
    : storage_(storage), clock_(clock), settled_(std::move(settled)) {}

namespace {
// Group commit: one storage transaction per batch of outcomes, not per job.
// The first outcome starts a short linger; a full batch ends it early.
constexpr size_t kGroupSize = 256;
constexpr auto kLinger = std::chrono::microseconds(1000);
}  // namespace

void Completer::push(Outcome outcome) {
  std::lock_guard lock(mu_);
  pending_.push_back(std::move(outcome));
  if (pending_.size() == 1 || pending_.size() == kGroupSize) cv_.notify_one();
}

size_t Completer::pending() const {
  std::lock_guard lock(mu_);
  return pending_.size();
}

void Completer::finish(std::chrono::steady_clock::time_point deadline) {
  std::lock_guard lock(mu_);
  finishing_ = true;
  deadline_ = deadline;
  cv_.notify_one();
}

namespace {

void refused(const Outcome& o, const char* what) {
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

bool Completer::record(std::vector<Outcome>& batch) {
  const int64_t now = clock_.wall_now_us();
  std::vector<conveyor_lease> ok;
  for (const Outcome& o : batch)
    if (o.succeeded) ok.push_back(o.lease);
  try {
    std::vector<conveyor_status> results = storage_.complete(ok, now);
    size_t i = 0;
    for (Outcome& o : batch) {
      if (!o.succeeded) continue;
      if (results[i++] == CONVEYOR_OK) {
        o.counters->completed.fetch_add(1, std::memory_order_relaxed);
      } else {
        refused(o, "finished");
      }
      o.succeeded = false;
      o.retry_at_us = -2;  // recorded: skip below
    }
    for (Outcome& o : batch) {
      if (o.retry_at_us == -2) continue;
      conveyor_status st = storage_.fail(o.lease, o.error, o.retry_at_us, now);
      if (st == CONVEYOR_OK) {
        (o.retry_at_us >= 0 ? o.counters->retried : o.counters->failed)
            .fetch_add(1, std::memory_order_relaxed);
      } else {
        refused(o, "failed");
      }
      o.retry_at_us = -2;
    }
  } catch (const StorageError& e) {
    // Keep what was not recorded; the caller retries later.
    std::erase_if(batch, [](const Outcome& o) { return o.retry_at_us == -2; });
    for (Outcome& o : batch) o.retried = true;
    if (e.transient()) {
      spdlog::warn("recording {} job outcomes failed, will retry: {}", batch.size(), e.what());
      return false;
    }
    spdlog::error(
        "recording {} job outcomes failed; their leases will expire and the jobs run "
        "again: {}",
        batch.size(), e.what());
    batch.clear();
    return true;
  }
  for (const Outcome& o : batch) settled_(o.lease);
  batch.clear();
  return true;
}

void Completer::run(std::stop_token stop) {
  std::vector<Outcome> batch;
  std::chrono::milliseconds backoff{0};
  for (;;) {
    {
      std::unique_lock lock(mu_);
      auto ready = [&] { return !pending_.empty() || finishing_ || stop.stop_requested(); };
      if (backoff.count() > 0) {
        cv_.wait_for(lock, backoff, [&] { return finishing_ || stop.stop_requested(); });
      } else if (batch.empty()) {
        cv_.wait(lock, ready);
        cv_.wait_for(lock, kLinger, [&] {
          return pending_.size() >= kGroupSize || finishing_ || stop.stop_requested();
        });
      }
      for (auto& o : pending_) batch.push_back(std::move(o));
      pending_.clear();
      const bool out_of_time = finishing_ && std::chrono::steady_clock::now() >= deadline_;
      if (batch.empty() && (finishing_ || stop.stop_requested())) return;
      if (out_of_time || (stop.stop_requested() && !finishing_)) {
        spdlog::error(
            "shutting down with {} job outcomes unrecorded; those jobs will run again "
            "after their leases expire",
            batch.size());
        return;
      }
    }
    if (batch.empty()) continue;
    if (record(batch)) {
      if (backoff.count() > 0) spdlog::info("recording job outcomes works again");
      backoff = std::chrono::milliseconds(0);
    } else {
      backoff = std::min(std::chrono::milliseconds(2000),
                         std::max(std::chrono::milliseconds(20), backoff * 2));
    }
  }
}

}  // namespace conveyor
