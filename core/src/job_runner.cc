#include "job_runner.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/internal/log.hpp>

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
                     const Clock& clock, const EngineConfig& config, Permits permits,
                     Answers answers)
    : handlers_(handlers),
      leases_(leases),
      completer_(completer),
      clock_(clock),
      config_(config),
      permits_(std::move(permits)),
      answers_(std::move(answers)),
      pool_(config.worker_threads) {}

void JobRunner::execute(QueueRunner& runner, std::vector<Job>&& jobs) {
  leases_.add(jobs);
  std::vector<WorkerPool::Task> tasks;
  tasks.reserve(jobs.size());
  for (Job& job : jobs) {
    const conveyor_lease lease = lease_of(job);
    // The task keeps the gate alive: it may outlive this runner (abandoned).
    tasks.push_back(WorkerPool::Task{
        [this, &runner, gate = gate_, job = std::move(job)] { run(runner, job, gate); },
        [this, &runner, lease] { drop(runner, lease); }});
  }
  pool_.submit(std::move(tasks));
}

namespace {

// The result of the exception being handled (call inside a catch block).
HandlerResult result_of_current_exception() {
  using Kind = HandlerResult::Kind;
  try {
    throw;
  } catch (const PermanentError& e) {
    return {Kind::kPermanent, e.what()};
  } catch (const RetryAfter& e) {
    return {Kind::kBackpressure, e.what(), e.delay()};
  } catch (const std::exception& e) {
    return {Kind::kFailed, e.what()};
  } catch (...) {
    return {Kind::kFailed, "handler threw a non-standard exception"};
  }
}

}  // namespace

void JobRunner::run(QueueRunner& runner, const Job& job, const std::shared_ptr<Gate>& gate) {
  {
    ReaderMutexLock lock(gate->mu);
    if (!gate->open) return;  // shutdown began before this job started
  }
  const auto started = clock_.steady_now();
  const RegisteredHandler handler = handlers_.find(job.kind);
  if (handler.start) return start_async(runner, job, handler.start, started);
  HandlerResult result;
  try {
    if (!handler) unknown_kind(runner, job);
    handler.run(job);
  } catch (...) {
    result = result_of_current_exception();
  }
  // Abandoned at shutdown: the lease was released and the engine may be
  // gone; nothing but the gate may be touched.
  ReaderMutexLock lock(gate->mu);
  if (!gate->open) return;
  finish(runner, job, std::move(result), started, /*holds_slot=*/true);
}

void JobRunner::start_async(QueueRunner& runner, const Job& job, const AsyncHandler& handler,
                            std::chrono::steady_clock::time_point started) {
  {
    MutexLock lock(async_mu_);
    ++async_outstanding_;
  }
  // Waiting for its report takes no thread: the worker slot goes back now
  // (before the handler runs, so the report cannot overtake it).
  permits_.left_slot();
  auto sink = std::make_shared<JobResult::Sink>(*this, gate_, runner, job, started);
  try {
    handler(job, JobResult(sink));
  } catch (...) {
    sink->report(result_of_current_exception());  // ignored if it reported first
  }
}

void JobRunner::finish(QueueRunner& runner, const Job& job, HandlerResult&& result,
                       std::chrono::steady_clock::time_point started, bool holds_slot) {
  using Kind = HandlerResult::Kind;
  Outcome o;
  o.lease = lease_of(job);
  o.counters = &runner.counters;
  o.queue = &runner.name;
  o.kind = job.kind;
  o.attempt = job.attempt;
  o.max_attempts = job.max_attempts;
  o.succeeded = result.kind == Kind::kSucceeded;
  o.released = result.kind == Kind::kBackpressure;
  o.error = std::move(result.error);
  if (result.kind == Kind::kFailed) o.retry_at_us = retry_at(job);
  if (result.kind == Kind::kBackpressure && answers_.backpressure)
    answers_.backpressure(runner, job, result.delay, o.error, started);
  else if (o.succeeded && answers_.succeeded)
    answers_.succeeded(runner, started);
  runner.counters.duration.observe(
      std::chrono::duration<double>(clock_.steady_now() - started).count());
  leases_.mark_handler_done(o.lease);
  completer_.push(std::move(o));
  if (holds_slot)
    permits_.finished(runner, job.id);
  else
    permits_.finished_without_slot(runner, job.id);
}

size_t JobRunner::async_outstanding() const {
  MutexLock lock(async_mu_);
  return async_outstanding_;
}

// ---- JobResult ----------------------------------------------------------------

JobResult::Sink::Sink(JobRunner& runner, std::shared_ptr<RunnerGate> gate, QueueRunner& queue,
                      Job job, std::chrono::steady_clock::time_point started)
    : runner_(runner),
      gate_(std::move(gate)),
      queue_(queue),
      job_(std::move(job)),
      started_(started) {}

JobResult::Sink::~Sink() {
  if (reported()) return;
  try {
    report({HandlerResult::Kind::kFailed,
            "the handler dropped the job's result without reporting it (every JobResult copy "
            "was destroyed before complete, fail, fail_permanently or retry_after)"});
  } catch (...) {
    // Out of memory while failing it: the lease expires and the job is rescued.
  }
}

void JobResult::Sink::report(HandlerResult result) {
  if (reported_.exchange(true, std::memory_order_acq_rel)) return;
  // The gate outlives the runner; closed, the runner may be gone.
  ReaderMutexLock lock(gate_->mu);
  if (!gate_->open) return;
  runner_.finish(queue_, job_, std::move(result), started_, /*holds_slot=*/false);
  {
    MutexLock count(runner_.async_mu_);
    if (--runner_.async_outstanding_ == 0) runner_.async_cv_.notify_all();
  }
}

JobResult::JobResult(std::shared_ptr<Sink> sink) : sink_(std::move(sink)) {}
void JobResult::complete() { sink_->report({HandlerResult::Kind::kSucceeded, {}}); }
void JobResult::fail(std::string error) {
  sink_->report({HandlerResult::Kind::kFailed, std::move(error)});
}
void JobResult::fail_permanently(std::string error) {
  sink_->report({HandlerResult::Kind::kPermanent, std::move(error)});
}
void JobResult::retry_after(std::chrono::milliseconds delay, std::string why) {
  sink_->report({HandlerResult::Kind::kBackpressure, std::move(why), delay});
}
bool JobResult::reported() const { return sink_->reported(); }

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
    MutexLock lock(dropped_mu_);
    dropped_.push_back(lease);
  }
  permits_.finished(runner, lease.job_id);
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
    // Asynchronous jobs get the same grace as running handlers.
    MutexLock lock(async_mu_);
    // The predicate runs with async_mu_ held; the analysis cannot see so
    // inside a lambda.
    async_cv_.wait_until(async_mu_, deadline, [&] {
      async_mu_.AssertHeld();
      return async_outstanding_ == 0;
    });
  }
  {
    WriterMutexLock lock(gate_->mu);  // waits for handlers recording their outcome
    gate_->open = false;
  }
  Stopped out;
  out.abandoned = leases_.running_jobs();
  for (const auto& a : out.abandoned) leases_.settle(a.lease);
  MutexLock lock(dropped_mu_);
  out.dropped = std::move(dropped_);
  return out;
}

}  // namespace conveyor
