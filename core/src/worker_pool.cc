#include "worker_pool.hpp"

#include <chrono>

namespace conveyor {
namespace {
// How long an out-of-work thread keeps looking before it sleeps.
constexpr auto kSearchFor = std::chrono::microseconds(50);
}  // namespace

WorkerPool::WorkerPool(uint32_t max_threads) : max_threads_(max_threads == 0 ? 1 : max_threads) {}

WorkerPool::~WorkerPool() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  {
    std::lock_guard lock(mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

void WorkerPool::wake_one_locked() {
  if (sleeping_ > wakes_pending_) {
    ++wakes_pending_;
    cv_.notify_one();
  } else if (threads_.size() < max_threads_) {
    searching_.fetch_add(1, std::memory_order_acq_rel);  // it starts out looking
    threads_.emplace_back([this] { loop(); });
  }
}

void WorkerPool::submit(Task task) {
  std::lock_guard lock(mu_);
  tasks_.push_back(std::move(task));
  queued_.store(tasks_.size(), std::memory_order_release);
  if (searching_.load(std::memory_order_acquire) == 0) wake_one_locked();
}

void WorkerPool::submit(std::vector<Task>&& tasks) {
  if (tasks.empty()) return;
  std::lock_guard lock(mu_);
  for (auto& t : tasks) tasks_.push_back(std::move(t));
  queued_.store(tasks_.size(), std::memory_order_release);
  if (searching_.load(std::memory_order_acquire) == 0) wake_one_locked();
}

uint32_t WorkerPool::threads() const {
  std::lock_guard lock(mu_);
  return static_cast<uint32_t>(threads_.size());
}

void WorkerPool::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (tasks_.empty()) {
      // Look for work a little while before sleeping.
      lock.unlock();
      const auto until = std::chrono::steady_clock::now() + kSearchFor;
      while (queued_.load(std::memory_order_acquire) == 0 &&
             std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
      lock.lock();
      if (tasks_.empty()) {
        if (stop_) break;
        searching_.fetch_sub(1, std::memory_order_acq_rel);
        ++sleeping_;
        cv_.wait(lock, [this] { return stop_ || (!tasks_.empty() && wakes_pending_ > 0) || (!tasks_.empty() && searching_ == 0); });
        --sleeping_;
        if (wakes_pending_ > 0) --wakes_pending_;
        searching_.fetch_add(1, std::memory_order_acq_rel);
        continue;
      }
    }
    Task task = std::move(tasks_.front());
    tasks_.pop_front();
    queued_.store(tasks_.size(), std::memory_order_release);
    // This thread stops looking; if work remains and nobody else is
    // looking, hand the search to a successor.
    const uint32_t still_searching = searching_.fetch_sub(1, std::memory_order_acq_rel) - 1;
    if (!tasks_.empty() && still_searching == 0) wake_one_locked();
    lock.unlock();
    task();
    searching_.fetch_add(1, std::memory_order_acq_rel);
    lock.lock();
  }
  searching_.fetch_sub(1, std::memory_order_acq_rel);
}

}  // namespace conveyor
