#include "job_runner.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/log.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <optional>
#include <random>

namespace conveyor {
namespace {

double uniform01() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

}  // namespace

std::chrono::milliseconds retry_backoff(int32_t attempt, std::chrono::milliseconds base,
                                        std::chrono::milliseconds cap, double u) {
  const int exponent = std::clamp(attempt - 1, 0, 40);
  const double raw = static_cast<double>(base.count()) * std::ldexp(1.0, exponent);
  const double capped = std::min(raw, static_cast<double>(cap.count()));
  const double jittered = capped * (0.8 + 0.4 * std::clamp(u, 0.0, 1.0));
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(jittered)));
}

JobRunner::JobRunner(const HandlerRegistry& handlers, LeaseTable& leases, Completer& completer,
                     const Clock& clock, const EngineConfig& config,
                     std::function<void(QueueRunner&)> job_finished, Backpressure backpressure)
    : handlers_(handlers),
      leases_(leases),
      completer_(completer),
      clock_(clock),
      config_(config),
      job_finished_(std::move(job_finished)),
      backpressure_(std::move(backpressure)),
      pool_(config.worker_threads) {}

void JobRunner::execute(QueueRunner& runner, std::vector<Job>&& jobs) {
  leases_.add(jobs);
  std::vector<WorkerPool::Task> tasks;
  tasks.reserve(jobs.size());
  for (Job& job : jobs) {
    const conveyor_lease lease = job.lease();
    // The task keeps the gate alive: it may outlive this runner (abandoned).
    tasks.push_back(WorkerPool::Task{
        [this, &runner, gate = gate_, job = std::move(job)] { run(runner, job, *gate); },
        [this, &runner, lease] { drop(runner, lease); }});
  }
  pool_.submit(std::move(tasks));
}

void JobRunner::run(QueueRunner& runner, const Job& job, Gate& gate) {
  {
    std::shared_lock lock(gate.mu);
    if (!gate.open) return;  // shutdown began before this job started
  }
  Outcome o;
  o.lease = job.lease();
  o.counters = &runner.counters;
  o.queue = &runner.name;
  o.kind = job.kind;
  o.attempt = job.attempt;
  o.max_attempts = job.max_attempts;
  bool retry = false;
  std::optional<std::chrono::milliseconds> wait;  // RetryAfter's
  const auto started = clock_.steady_now();
  try {
    Handler handler = handlers_.find(job.kind);
    if (!handler) unknown_kind(runner, job);
    handler(job);
    o.succeeded = true;
  } catch (const PermanentError& e) {
    o.error = e.what();
  } catch (const RetryAfter& e) {
    o.released = true;
    o.error = e.what();
    wait = e.delay();
  } catch (const std::exception& e) {
    o.error = e.what();
    retry = true;
  } catch (...) {
    o.error = "handler threw a non-standard exception";
    retry = true;
  }
  // Abandoned at shutdown: the lease was released and the engine may be
  // gone; nothing but the gate may be touched.
  std::shared_lock lock(gate.mu);
  if (!gate.open) return;
  if (retry) o.retry_at_us = retry_at(job);
  if (wait && backpressure_) backpressure_(runner, job, *wait, o.error);
  runner.counters.duration.observe(
      std::chrono::duration<double>(clock_.steady_now() - started).count());
  leases_.mark_handler_done(o.lease);
  completer_.push(std::move(o));
  job_finished_(runner);
}

void JobRunner::unknown_kind(const QueueRunner& runner, const Job& job) const {
  // Claimed although no handler runs it: the plugin has no claim_kinds (ABI
  // 1.0), or the handler went away after the claim.
  std::string served;
  for (const std::string& k : handlers_.kinds()) served += (served.empty() ? "" : ", ") + k;
  const std::string error = fmt::format(
      "no handler for job kind '{}' in this process (it serves: {}); engine.unknown_kind = {}",
      job.kind, served.empty() ? "no kinds" : served,
      config_.unknown_kind == EngineConfig::UnknownKind::kFail ? "fail" : "retry");
  if (config_.unknown_kind == EngineConfig::UnknownKind::kFail) throw PermanentError(error);
  LogFields fields{{"queue", runner.name}, {"job_id", job.id}, {"kind", job.kind}};
  spdlog::warn("job {} (queue {}): {}: retried with backoff", job.id, runner.name, error);
  throw std::runtime_error(error);
}

void JobRunner::drop(QueueRunner& runner, const conveyor_lease& lease) {
  leases_.settle(lease);
  {
    std::lock_guard lock(dropped_mu_);
    dropped_.push_back(lease);
  }
  job_finished_(runner);
}

int64_t next_attempt_at_us(int32_t attempt, int32_t max_attempts, const EngineConfig& config,
                           int64_t now_us) {
  if (attempt >= max_attempts) return -1;
  auto delay = retry_backoff(attempt, std::chrono::milliseconds(config.retry_backoff_base_ms),
                             std::chrono::milliseconds(config.retry_backoff_max_ms), uniform01());
  return now_us + std::chrono::duration_cast<std::chrono::microseconds>(delay).count();
}

int64_t JobRunner::retry_at(const Job& job) const {
  return next_attempt_at_us(job.attempt, job.max_attempts, config_, clock_.wall_now_us());
}

JobRunner::Stopped JobRunner::shutdown(std::chrono::steady_clock::time_point deadline) {
  pool_.shutdown(deadline);
  {
    std::unique_lock lock(gate_->mu);  // waits for handlers recording their outcome
    gate_->open = false;
  }
  Stopped out;
  out.abandoned = leases_.running_jobs();
  for (const auto& a : out.abandoned) leases_.settle(a.lease);
  std::lock_guard lock(dropped_mu_);
  out.dropped = std::move(dropped_);
  return out;
}

}  // namespace conveyor
