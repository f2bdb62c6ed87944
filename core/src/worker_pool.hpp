// WorkerPool: runs job handlers on threads started on demand, up to a cap.
// An idle engine has no worker threads; a busy one has at most max_threads,
// however many queues it serves.
//
// Waking a sleeping thread costs a system call and a context switch, more
// than a short job itself. So a thread that runs out of work looks for more
// for a few microseconds before it sleeps, a submit wakes a sleeper only when
// nobody is looking, and a thread that takes a task while more are queued
// and nobody else is looking wakes one successor first. Short jobs then flow
// through one or two hot threads; long jobs still fan out to many.
//
// Shutdown starts no queued task: each one's drop runs instead, so its owner
// can give back what the task held (a job's lease). Running tasks get until
// a deadline; threads still running one then are detached and finish later,
// touching only state they share with the pool (kept alive by them).
#pragma once

#include <conveyor/internal/mutex.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace conveyor {

class WorkerPool {
 public:
  struct Task {
    std::function<void()> run;
    // Runs instead of run when the pool shuts down before the task started
    // (on the thread calling shutdown, or submit after it). May be empty.
    std::function<void()> drop;
  };

  explicit WorkerPool(uint32_t max_threads);
  // shutdown() with no deadline, unless it was called.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues tasks; never blocks on a running task. Thread-safe. Tasks must
  // not throw. After shutdown, each task's drop runs at once instead.
  void submit(Task task);
  void submit(std::vector<Task>&& tasks);

  // No queued task starts any more: each one's drop runs, on this thread.
  // Then waits until every running task returned or deadline passed, and
  // returns how many were still running then; their threads are detached.
  // Thread-safe and idempotent: a later call waits for those again, up to
  // its own deadline.
  uint32_t shutdown(std::chrono::steady_clock::time_point deadline) EXCLUDES(shutdown_mu_);
  uint32_t threads() const;  // threads started so far

 private:
  // Shared with the threads: they may outlive the pool. Its wake_one_locked()
  // is declared with it (its annotation names State's mutex).
  struct State;
  static void loop(const std::shared_ptr<State>& s, size_t slot);

  // Constant after construction (its data: state_->mu).
  std::shared_ptr<State> state_;

  // Guarded by shutdown_mu_ (taken before state_->mu).
  Mutex shutdown_mu_;
  bool shut_down_ GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace conveyor
