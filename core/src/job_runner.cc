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
                     Answers answers, QueueTimeout queue_timeout)
    : handlers_(handlers),
      leases_(leases),
      completer_(completer),
      clock_(clock),
      config_(config),
      permits_(std::move(permits)),
      answers_(std::move(answers)),
      queue_timeout_(std::move(queue_timeout)),
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

namespace {

// The synchronous attempt this thread runs (job_time_limit, job_timed_out).
thread_local const SyncAttempt* t_attempt = nullptr;

Job without_payload(const Job& job) {
  Job out;
  out.id = job.id;
  out.queue = job.queue;
  out.kind = job.kind;
  out.attempt = job.attempt;
  out.max_attempts = job.max_attempts;
  out.lease_token = job.lease_token;
  out.key = job.key;
  out.timeout_ms = job.timeout_ms;
  return out;
}

}  // namespace

std::optional<TimeLimit> job_time_limit() {
  if (t_attempt == nullptr || !t_attempt->deadline) return std::nullopt;
  return t_attempt->deadline->limit();
}

bool job_timed_out() {
  return t_attempt != nullptr && t_attempt->timed_out.load(std::memory_order_acquire);
}

TimeLimit AttemptDeadline::limit() const {
  const auto left =
      std::max(std::chrono::duration_cast<std::chrono::milliseconds>(at - clock->steady_now()),
               std::chrono::milliseconds(0));
  return TimeLimit{timeout.length, left, timeout.error};
}

std::optional<AttemptDeadline> JobRunner::deadline_of(const Job& job, SteadyTime started) const {
  std::optional<AttemptTimeout> t =
      attempt_timeout(job, queue_timeout_ ? queue_timeout_(job.queue) : 0);
  if (!t) return std::nullopt;
  return AttemptDeadline{started + t->length, std::move(*t), &clock_};
}

void JobRunner::add_timed(Timed timed) {
  const std::pair<int64_t, int64_t> key{timed.job.id, timed.job.lease_token};
  MutexLock lock(timed_mu_);
  timed_.insert_or_assign(key, std::move(timed));
}

void JobRunner::remove_timed(const conveyor_lease& lease) {
  MutexLock lock(timed_mu_);
  timed_.erase({lease.job_id, lease.lease_token});
}

size_t JobRunner::timed_attempts() const {
  MutexLock lock(timed_mu_);
  return timed_.size();
}

void JobRunner::timed_out(QueueRunner& runner, const Job& job, const AttemptDeadline& d,
                          bool sync) const {
  runner.counters.timed_out.fetch_add(1, std::memory_order_relaxed);
  if (!sync) return;  // the failure's own log line says it; nothing is left running
  LogFields fields{
      {"queue", runner.name}, {"job_id", job.id}, {"kind", job.kind}, {"attempt", job.attempt}};
  spdlog::warn(
      "queue {}: job {} (kind {}) attempt {} {}: its handler still runs and keeps its "
      "max_workers permit and worker thread until it returns; what it returns is ignored",
      runner.name, job.id, job.kind, job.attempt, d.timeout.error);
}

size_t JobRunner::time_out_due(SteadyTime now) {
  std::vector<Timed> due;
  {
    MutexLock lock(timed_mu_);
    for (auto it = timed_.begin(); it != timed_.end();) {
      if (it->second.deadline.at > now) {
        ++it;
        continue;
      }
      due.push_back(std::move(it->second));
      it = timed_.erase(it);
    }
  }
  size_t n = 0;
  for (Timed& t : due) {
    if (t.sync) {
      if (t.sync->reported.exchange(true, std::memory_order_acq_rel)) continue;  // it returned
      t.sync->timed_out.store(true, std::memory_order_release);
      ReaderMutexLock lock(gate_->mu);
      if (!gate_->open) continue;
      timed_out(*t.runner, t.job, t.deadline, /*sync=*/true);
      finish(*t.runner, t.job, {HandlerResult::Kind::kFailed, t.deadline.timeout.error, {}},
             t.started, Release::kNothing);
      ++n;
    } else if (std::shared_ptr<JobResult::Sink> sink = t.async.lock(); sink && sink->time_out()) {
      ++n;
    }
  }
  return n;
}

void JobRunner::run(QueueRunner& runner, const Job& job, const std::shared_ptr<Gate>& gate) {
  {
    ReaderMutexLock lock(gate->mu);
    if (!gate->open) return;  // shutdown began before this job started
  }
  const auto started = clock_.steady_now();
  const RegisteredHandler handler = handlers_.find(job.kind);
  std::optional<AttemptDeadline> deadline = deadline_of(job, started);
  if (handler.start) return start_async(runner, job, handler.start, started, std::move(deadline));
  auto attempt = std::make_shared<SyncAttempt>();
  attempt->deadline = std::move(deadline);
  if (attempt->deadline)
    add_timed(Timed{&runner, without_payload(job), started, *attempt->deadline, attempt, {}});
  HandlerResult result;
  t_attempt = attempt.get();
  try {
    if (!handler) unknown_kind(runner, job);
    handler.run(job);
  } catch (...) {
    result = result_of_current_exception();
  }
  t_attempt = nullptr;
  // Abandoned at shutdown: the lease was released and the engine may be
  // gone; nothing but the gate may be touched.
  ReaderMutexLock lock(gate->mu);
  if (!gate->open) return;
  if (attempt->deadline) remove_timed(lease_of(job));
  if (attempt->reported.exchange(true, std::memory_order_acq_rel)) {
    // Timed out: the failure was recorded at the deadline. What the handler
    // came to is ignored; the permit and worker slot it kept go back now.
    LogFields fields{{"queue", runner.name}, {"job_id", job.id}, {"kind", job.kind}};
    spdlog::info("queue {}: job {} (kind {}): the handler returned {} ms after it {}; ignored",
                 runner.name, job.id, job.kind,
                 std::chrono::duration_cast<std::chrono::milliseconds>(clock_.steady_now() -
                                                                       attempt->deadline->at)
                     .count(),
                 attempt->deadline->timeout.error);
    permits_.finished(runner, job.id);
    return;
  }
  finish(runner, job, std::move(result), started, Release::kPermitAndSlot);
}

void JobRunner::start_async(QueueRunner& runner, const Job& job, const AsyncHandler& handler,
                            std::chrono::steady_clock::time_point started,
                            std::optional<AttemptDeadline> deadline) {
  {
    MutexLock lock(async_mu_);
    ++async_outstanding_;
  }
  // Waiting for its report takes no thread: the worker slot goes back now
  // (before the handler runs, so the report cannot overtake it).
  permits_.left_slot();
  auto sink = std::make_shared<JobResult::Sink>(*this, gate_, runner, job, started, deadline);
  // Listed before the handler runs: a report removes it.
  if (deadline) add_timed(Timed{&runner, without_payload(job), started, *deadline, nullptr, sink});
  try {
    handler(job, JobResult(sink));
  } catch (...) {
    sink->report(result_of_current_exception());  // ignored if it reported first
  }
}

void JobRunner::finish(QueueRunner& runner, const Job& job, HandlerResult&& result,
                       std::chrono::steady_clock::time_point started, Release release) {
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
  if (release == Release::kPermitAndSlot)
    permits_.finished(runner, job.id);
  else if (release == Release::kPermit)
    permits_.finished_without_slot(runner, job.id);
}

size_t JobRunner::async_outstanding() const {
  MutexLock lock(async_mu_);
  return async_outstanding_;
}

// ---- JobResult ----------------------------------------------------------------

JobResult::Sink::Sink(JobRunner& runner, std::shared_ptr<RunnerGate> gate, QueueRunner& queue,
                      Job job, std::chrono::steady_clock::time_point started,
                      std::optional<AttemptDeadline> deadline)
    : runner_(runner),
      gate_(std::move(gate)),
      queue_(queue),
      job_(std::move(job)),
      started_(started),
      deadline_(std::move(deadline)) {}

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

bool JobResult::Sink::report(HandlerResult result) {
  if (reported_.exchange(true, std::memory_order_acq_rel)) return false;
  record(std::move(result));
  return true;
}

bool JobResult::Sink::time_out(std::optional<std::string> error) {
  if (!deadline_ || reported_.exchange(true, std::memory_order_acq_rel)) return false;
  timed_out_.store(true, std::memory_order_release);
  {
    ReaderMutexLock lock(gate_->mu);
    if (gate_->open) runner_.timed_out(queue_, job_, *deadline_, /*sync=*/false);
  }
  record({HandlerResult::Kind::kFailed, error.value_or(deadline_->timeout.error), {}});
  return true;
}

void JobResult::Sink::record(HandlerResult result) {
  // The gate outlives the runner; closed, the runner may be gone.
  ReaderMutexLock lock(gate_->mu);
  if (!gate_->open) return;
  runner_.finish(queue_, job_, std::move(result), started_, JobRunner::Release::kPermit);
  if (deadline_) runner_.remove_timed(lease_of(job_));
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
bool JobResult::timed_out() const { return sink_->timed_out(); }
void JobResult::fail_timed_out(std::string error) {
  if (!sink_->deadline()) return fail(std::move(error));
  sink_->time_out(std::move(error));
}
std::optional<TimeLimit> JobResult::time_limit() const {
  if (!sink_->deadline()) return std::nullopt;
  return sink_->deadline()->limit();
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
