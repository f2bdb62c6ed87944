// WorkerPool: runs job handlers on threads started on demand, up to a cap.
// An idle engine has no worker threads; a busy one has at most max_threads,
// however many queues it serves.
#pragma once

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
  explicit WorkerPool(uint32_t max_threads);
  // Runs the tasks already submitted, then joins every thread.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues a task; starts a thread when none is idle and the cap allows.
  // Never blocks on a running task. Thread-safe. task must not throw.
  void submit(std::function<void()> task);
  uint32_t threads() const;

 private:
  void loop();

  const uint32_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  uint32_t idle_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace conveyor
