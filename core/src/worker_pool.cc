#include "worker_pool.hpp"

namespace conveyor {

WorkerPool::WorkerPool(uint32_t max_threads) : max_threads_(max_threads == 0 ? 1 : max_threads) {}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::submit(std::function<void()> task) {
  std::unique_lock lock(mu_);
  tasks_.push_back(std::move(task));
  if (idle_ < tasks_.size() && threads_.size() < max_threads_) {
    threads_.emplace_back([this] { loop(); });
  }
  lock.unlock();
  cv_.notify_one();
}

uint32_t WorkerPool::threads() const {
  std::lock_guard lock(mu_);
  return static_cast<uint32_t>(threads_.size());
}

void WorkerPool::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
    --idle_;
    if (tasks_.empty()) return;  // stopping and drained
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace conveyor
