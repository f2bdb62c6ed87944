// JobRunner: runs claimed jobs on the worker pool. For each job it finds the
// kind's handler and runs it, turns what happened into an Outcome (success,
// a retry after backoff, a final failure, backpressure), hands that to the
// completer and frees the job's permit. An asynchronous handler only starts
// its job on the pool; the permit is freed when its JobResult reports.
//
// Timeouts (job_timeouts.hpp): an attempt with a time limit is listed with
// its deadline; time_out_due() fails those past it through the same
// first-report-wins path as the handler's own outcome. An asynchronous job's
// permit is freed then; a synchronous handler keeps its permit and worker
// slot until it returns (a thread cannot be stopped), and what it returns is
// ignored. handler.hpp says what handlers see.
//
// shutdown(deadline): no job starts any more; jobs not yet started are
// dropped (their leases are returned for release); handlers still running at
// the deadline, and asynchronous jobs not yet reported, are abandoned: when one returns it touches
// nothing of the engine (its lease was released and another process runs the job again), so the
// engine can be destroyed and the process exit while it runs.
//
// Thread-safety: execute() from the dispatcher thread; shutdown() once, from
// the engine's owner; the rest from any thread.
#pragma once

#include "completer.hpp"
#include "dispatcher.hpp"
#include "handler_registry.hpp"
#include "job_timeouts.hpp"
#include "lease_table.hpp"
#include "worker_pool.hpp"

#include <conveyor/clock.hpp>
#include <conveyor/config.hpp>
#include <conveyor/internal/mutex.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

namespace conveyor {

// When a job whose attempt failed runs again ([engine] retry backoff with
// jitter), or -1 when it has no attempts left. Shared by local handlers and
// remote workers.
int64_t next_attempt_at_us(int32_t attempt, int32_t max_attempts, const EngineConfig& config,
                           int64_t now_us);

// What a handler's run came to, before the runner turns it into an Outcome.
struct HandlerResult {
  enum class Kind { kSucceeded, kFailed, kPermanent, kBackpressure };
  Kind kind = Kind::kSucceeded;
  std::string error;
  std::chrono::milliseconds delay{0};  // kBackpressure: RetryAfter's
};

class JobRunner;

// An attempt's time limit, fixed when it starts.
struct AttemptDeadline {
  SteadyTime at{};
  AttemptTimeout timeout;
  const Clock* clock = nullptr;
  TimeLimit limit() const;  // what is left now
};

// A synchronous handler's attempt: the handler returning and the deadline
// passing race to report it; the first wins.
struct SyncAttempt {
  std::atomic<bool> reported{false};
  std::atomic<bool> timed_out{false};
  std::optional<AttemptDeadline> deadline;  // constant after the start
};

// Closed by JobRunner::shutdown(): a handler returning, or a JobResult
// reporting, after that records nothing.
struct RunnerGate {
  SharedMutex mu;
  bool open GUARDED_BY(mu) = true;
};

// Where an asynchronous handler's JobResult reports: one per job started.
// The first report is recorded (if the runner's gate is still open); the
// destructor reports a failure when none came.
class JobResult::Sink {
 public:
  Sink(JobRunner& runner, std::shared_ptr<RunnerGate> gate, QueueRunner& queue, Job job,
       std::chrono::steady_clock::time_point started, std::optional<AttemptDeadline> deadline);
  ~Sink();
  Sink(const Sink&) = delete;
  Sink& operator=(const Sink&) = delete;

  // True when this report was the first (and so recorded, gate permitting).
  bool report(HandlerResult result);
  bool reported() const { return reported_.load(std::memory_order_acquire); }
  // Fails the attempt as timed out (with error, else the deadline's) unless
  // it reported first; counted in its queue's timed_out.
  bool time_out(std::optional<std::string> error = std::nullopt);
  bool timed_out() const { return timed_out_.load(std::memory_order_acquire); }
  const std::optional<AttemptDeadline>& deadline() const { return deadline_; }

 private:
  void record(HandlerResult result);

  JobRunner& runner_;  // valid while the gate is open
  const std::shared_ptr<RunnerGate> gate_;
  QueueRunner& queue_;
  const Job job_;
  const std::chrono::steady_clock::time_point started_;
  const std::optional<AttemptDeadline> deadline_;
  std::atomic<bool> reported_{false};
  std::atomic<bool> timed_out_{false};
};

class JobRunner {
 public:
  // How the runner gives back what a job holds (the dispatcher's permits):
  // a synchronous job holds its queue's permit and an engine-wide worker
  // slot until it finishes; an asynchronous one gives its slot back once
  // started (left_slot) and its permit when it reports (finished_without_slot).
  struct Permits {
    // With the job's id (for its key's running count).
    std::function<void(QueueRunner&, int64_t job_id)> finished;
    std::function<void()> left_slot;
    std::function<void(QueueRunner&, int64_t job_id)> finished_without_slot;
  };
  // What the downstream answered, for the queue's backpressure holds
  // (backoffs.hpp): backpressure runs when a handler threw RetryAfter
  // (before the job is given back), succeeded when a job completed; both
  // with when the job started (its request cannot have been sent earlier).
  struct Answers {
    std::function<void(const QueueRunner&, const Job&, std::chrono::milliseconds delay,
                       const std::string& why, SteadyTime started)>
        backpressure;
    std::function<void(const QueueRunner&, SteadyTime started)> succeeded;
  };
  // A queue's job_timeout_s in milliseconds (Config::job_timeout_ms_for); 0: none.
  using QueueTimeout = std::function<int64_t(const std::string& queue)>;
  JobRunner(const HandlerRegistry& handlers, LeaseTable& leases, Completer& completer,
            const Clock& clock, const EngineConfig& config, Permits permits, Answers answers = {},
            QueueTimeout queue_timeout = {});

  // Queues the jobs of a claimed batch for the workers. Never blocks on them.
  void execute(QueueRunner& runner, std::vector<Job>&& jobs);

  struct Stopped {
    std::vector<conveyor_lease> dropped;         // claimed, never started
    std::vector<LeaseTable::Running> abandoned;  // still running at the deadline
  };
  // See the class comment. The deadline is on the steady clock.
  Stopped shutdown(std::chrono::steady_clock::time_point deadline) EXCLUDES(async_mu_, dropped_mu_);

  // Fails every attempt whose deadline is at or before now and that has not
  // reported (counted in its queue's timed_out, logged). Returns how many.
  // The engine's maintenance runs it often (kTimeoutCheckPeriod).
  size_t time_out_due(SteadyTime now) EXCLUDES(timed_mu_);
  static constexpr std::chrono::milliseconds kTimeoutCheckPeriod{100};
  // Attempts with a deadline not yet reported.
  size_t timed_attempts() const EXCLUDES(timed_mu_);

  // Worker threads started so far.
  uint32_t threads() const { return pool_.threads(); }
  // Jobs of asynchronous handlers started and not yet reported.
  size_t async_outstanding() const EXCLUDES(async_mu_);

 private:
  friend class JobResult::Sink;
  using Gate = RunnerGate;
  void run(QueueRunner& runner, const Job& job, const std::shared_ptr<Gate>& gate);
  void start_async(QueueRunner& runner, const Job& job, const AsyncHandler& handler,
                   std::chrono::steady_clock::time_point started,
                   std::optional<AttemptDeadline> deadline) EXCLUDES(async_mu_, timed_mu_);
  std::optional<AttemptDeadline> deadline_of(const Job& job, SteadyTime started) const;
  // A timed-out attempt: counted and logged.
  void timed_out(QueueRunner& runner, const Job& job, const AttemptDeadline& d, bool sync) const;
  // What finish() gives back: a synchronous job's permit and worker slot, an
  // asynchronous job's permit, or nothing (a synchronous handler that timed
  // out keeps both until it returns).
  enum class Release { kPermitAndSlot, kPermit, kNothing };
  // Records a finished handler's result; the caller holds the gate open
  // (a reader of gate->mu: not REQUIRES, as the analysis cannot tell the
  // caller's gate pointer is gate_).
  void finish(QueueRunner& runner, const Job& job, HandlerResult&& result,
              std::chrono::steady_clock::time_point started, Release release);
  void drop(QueueRunner& runner, const conveyor_lease& lease) EXCLUDES(dropped_mu_);
  int64_t retry_at(const Job& job) const;
  // Throws the failure of a claimed job with no handler ([engine] unknown_kind).
  [[noreturn]] void unknown_kind(const QueueRunner& runner, const Job& job) const;

  // Constant after construction.
  const HandlerRegistry& handlers_;
  LeaseTable& leases_;
  Completer& completer_;
  const Clock& clock_;
  const EngineConfig& config_;
  const Permits permits_;
  const Answers answers_;
  const std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();  // its data: gate_->mu

  // Attempts with a deadline, by (job id, lease token), until they report.
  struct Timed {
    QueueRunner* runner = nullptr;
    Job job;  // without its payload
    SteadyTime started{};
    AttemptDeadline deadline;
    std::shared_ptr<SyncAttempt> sync;     // a synchronous handler's
    std::weak_ptr<JobResult::Sink> async;  // or an asynchronous one's
  };
  void add_timed(Timed timed) EXCLUDES(timed_mu_);
  void remove_timed(const conveyor_lease& lease) EXCLUDES(timed_mu_);
  mutable Mutex timed_mu_;
  std::map<std::pair<int64_t, int64_t>, Timed> timed_ GUARDED_BY(timed_mu_);
  const QueueTimeout queue_timeout_;

  // Guarded by dropped_mu_.
  Mutex dropped_mu_;
  std::vector<conveyor_lease> dropped_ GUARDED_BY(dropped_mu_);

  // Guarded by async_mu_.
  mutable Mutex async_mu_;
  CondVar async_cv_;  // async_outstanding_ reached 0
  size_t async_outstanding_ GUARDED_BY(async_mu_) = 0;

  // Thread-safe itself. Last: its threads use the members above.
  WorkerPool pool_;
};

}  // namespace conveyor
