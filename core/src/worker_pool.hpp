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
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace conveyor {

//
// Shutdown drops what has not started (each task's drop runs instead of it)
// and waits for running tasks up to a deadline; a task still running then is
// left to finish on its detached thread, which only touches state it shares
// with the pool by ownership, so the pool can be destroyed meanwhile.
class WorkerPool {
 public:
  struct Task {
    std::function<void()> run;   // must not throw
    std::function<void()> drop;  // runs instead of run at shutdown; may be empty
  };

  explicit WorkerPool(uint32_t max_threads);
  // shutdown() with no deadline, unless it ran already.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues tasks; never blocks on a running task. Thread-safe. After
  // shutdown() a submitted task is dropped at once.
  void submit(Task task);
  void submit(std::vector<Task>&& tasks);
  uint32_t threads() const;

  // No task starts any more; every queued task is dropped (its drop runs on
  // this thread); then waits until running tasks return or deadline passes.
  // Returns how many were still running then: their threads are detached.
  // Idempotent (a second call returns 0).
  uint32_t shutdown(std::chrono::steady_clock::time_point deadline);

 private:
  // What the threads use: shared with them, so a detached thread outlives
  // the pool safely.
  struct State {
    explicit State(uint32_t max) : max_threads(max) {}
    const uint32_t max_threads;
    std::mutex mu;
    std::condition_variable cv;          // work or stop
    std::condition_variable idle_cv;     // a task returned (shutdown waits)
    std::deque<Task> tasks;              // mu
    uint32_t sleeping = 0;               // mu: threads blocked on cv
    uint32_t wakes_pending = 0;          // mu: notified, not yet running
    uint32_t running = 0;                // mu: tasks inside run()
    uint32_t alive = 0;                  // mu: threads not yet returned from loop()
    bool stop = false;                   // mu
    std::vector<std::thread> threads;    // mu
    std::atomic<uint32_t> searching{0};  // threads looking for work, not asleep
    std::atomic<size_t> queued{0};       // tasks.size(), readable without mu
  };
  static void loop(const std::shared_ptr<State>& s);
  static void wake_one_locked(const std::shared_ptr<State>& s);  // mu held

  const std::shared_ptr<State> state_;
  bool shut_down_ = false;  // owner only
};

}  // namespace conveyor
