// JobRunner: runs claimed jobs on the worker pool. For each job it finds the
// kind's handler and runs it, turns what happened into an Outcome (success,
// a retry after backoff, a final failure, backpressure), hands that to the
// completer and frees the job's permit. An asynchronous handler only starts
// its job on the pool; the permit is freed when its JobResult reports.
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
#include "lease_table.hpp"
#include "worker_pool.hpp"

#include <conveyor/clock.hpp>
#include <conveyor/config.hpp>
#include <conveyor/internal/mutex.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
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
       std::chrono::steady_clock::time_point started);
  ~Sink();
  Sink(const Sink&) = delete;
  Sink& operator=(const Sink&) = delete;

  void report(HandlerResult result);
  bool reported() const { return reported_.load(std::memory_order_acquire); }

 private:
  JobRunner& runner_;  // valid while the gate is open
  const std::shared_ptr<RunnerGate> gate_;
  QueueRunner& queue_;
  const Job job_;
  const std::chrono::steady_clock::time_point started_;
  std::atomic<bool> reported_{false};
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
  JobRunner(const HandlerRegistry& handlers, LeaseTable& leases, Completer& completer,
            const Clock& clock, const EngineConfig& config, Permits permits, Answers answers = {});

  // Queues the jobs of a claimed batch for the workers. Never blocks on them.
  void execute(QueueRunner& runner, std::vector<Job>&& jobs);

  struct Stopped {
    std::vector<conveyor_lease> dropped;         // claimed, never started
    std::vector<LeaseTable::Running> abandoned;  // still running at the deadline
  };
  // See the class comment. The deadline is on the steady clock.
  Stopped shutdown(std::chrono::steady_clock::time_point deadline) EXCLUDES(async_mu_, dropped_mu_);

  // Worker threads started so far.
  uint32_t threads() const { return pool_.threads(); }
  // Jobs of asynchronous handlers started and not yet reported.
  size_t async_outstanding() const EXCLUDES(async_mu_);

 private:
  friend class JobResult::Sink;
  using Gate = RunnerGate;
  void run(QueueRunner& runner, const Job& job, const std::shared_ptr<Gate>& gate);
  void start_async(QueueRunner& runner, const Job& job, const AsyncHandler& handler,
                   std::chrono::steady_clock::time_point started) EXCLUDES(async_mu_);
  // Records a finished handler's result; the caller holds the gate open
  // (a reader of gate->mu: not REQUIRES, as the analysis cannot tell the
  // caller's gate pointer is gate_).
  void finish(QueueRunner& runner, const Job& job, HandlerResult&& result,
              std::chrono::steady_clock::time_point started, bool holds_slot);
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
