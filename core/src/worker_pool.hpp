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
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace conveyor {

class WorkerPool {
 public:
  using Task = std::function<void()>;

  explicit WorkerPool(uint32_t max_threads);
  // Runs the tasks already submitted, then joins every thread.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues tasks; never blocks on a running task. Thread-safe. Tasks must
  // not throw.
  void submit(Task task);
  void submit(std::vector<Task>&& tasks);
  uint32_t threads() const;

 private:
  void loop();
  void wake_one_locked();  // mu_ held: wakes a sleeper or starts a thread

  const uint32_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;        // mu_
  uint32_t sleeping_ = 0;         // mu_: threads blocked on cv_
  uint32_t wakes_pending_ = 0;    // mu_: notified, not yet running
  bool stop_ = false;             // mu_
  std::vector<std::thread> threads_;  // mu_
  std::atomic<uint32_t> searching_{0};  // threads looking for work, not asleep
  std::atomic<size_t> queued_{0};       // tasks_.size(), readable without mu_
};

}  // namespace conveyor
