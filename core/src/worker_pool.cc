#include "worker_pool.hpp"

namespace conveyor {
namespace {
// How long an out-of-work thread keeps looking before it sleeps.
constexpr auto kSearchFor = std::chrono::microseconds(50);
}  // namespace

WorkerPool::WorkerPool(uint32_t max_threads)
    : state_(std::make_shared<State>(max_threads == 0 ? 1 : max_threads)) {}

WorkerPool::~WorkerPool() {
  if (!shut_down_) shutdown(std::chrono::steady_clock::time_point::max());
}

void WorkerPool::wake_one_locked(const std::shared_ptr<State>& s) {
  if (s->sleeping > s->wakes_pending) {
    ++s->wakes_pending;
    s->cv.notify_one();
  } else if (s->threads.size() < s->max_threads) {
    s->searching.fetch_add(1, std::memory_order_acq_rel);  // it starts out looking
    ++s->alive;
    s->threads.emplace_back([s] { loop(s); });
  }
}

void WorkerPool::submit(Task task) {
  std::vector<Task> one;
  one.push_back(std::move(task));
  submit(std::move(one));
}

void WorkerPool::submit(std::vector<Task>&& tasks) {
  if (tasks.empty()) return;
  State& s = *state_;
  {
    std::lock_guard lock(s.mu);
    if (!s.stop) {
      for (auto& t : tasks) s.tasks.push_back(std::move(t));
      s.queued.store(s.tasks.size(), std::memory_order_release);
      if (s.searching.load(std::memory_order_acquire) == 0) wake_one_locked(state_);
      return;
    }
  }
  for (auto& t : tasks)
    if (t.drop) t.drop();
}

uint32_t WorkerPool::threads() const {
  std::lock_guard lock(state_->mu);
  return static_cast<uint32_t>(state_->threads.size());
}

uint32_t WorkerPool::shutdown(std::chrono::steady_clock::time_point deadline) {
  if (shut_down_) return 0;
  shut_down_ = true;
  State& s = *state_;
  std::deque<Task> unstarted;
  {
    std::lock_guard lock(s.mu);
    s.stop = true;
    unstarted.swap(s.tasks);
    s.queued.store(0, std::memory_order_release);
  }
  s.cv.notify_all();
  for (Task& t : unstarted)
    if (t.drop) t.drop();
  std::vector<std::thread> threads;
  uint32_t still_running;
  {
    std::unique_lock lock(s.mu);
    s.idle_cv.wait_until(lock, deadline, [&] { return s.running == 0; });
    still_running = s.running;
    // Threads with nothing to run exit at once: wait for that, so only
    // threads still inside a task outlive shutdown.
    s.idle_cv.wait(lock, [&] { return s.alive <= s.running; });
    threads.swap(s.threads);
  }
  for (auto& t : threads) {
    if (still_running == 0)
      t.join();
    else
      t.detach();  // those still in a task hold the shared state themselves
  }
  return still_running;
}

void WorkerPool::loop(const std::shared_ptr<State>& sp) {
  State& s = *sp;
  std::unique_lock lock(s.mu);
  for (;;) {
    if (s.tasks.empty()) {
      if (s.stop) break;
      // Look for work a little while before sleeping.
      lock.unlock();
      const auto until = std::chrono::steady_clock::now() + kSearchFor;
      while (s.queued.load(std::memory_order_acquire) == 0 &&
             std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
      lock.lock();
      if (s.tasks.empty()) {
        if (s.stop) break;
        s.searching.fetch_sub(1, std::memory_order_acq_rel);
        ++s.sleeping;
        s.cv.wait(lock, [&] {
          return s.stop || (!s.tasks.empty() && s.wakes_pending > 0) ||
                 (!s.tasks.empty() && s.searching == 0);
        });
        --s.sleeping;
        if (s.wakes_pending > 0) --s.wakes_pending;
        s.searching.fetch_add(1, std::memory_order_acq_rel);
        continue;
      }
    }
    Task task = std::move(s.tasks.front());
    s.tasks.pop_front();
    s.queued.store(s.tasks.size(), std::memory_order_release);
    ++s.running;
    // This thread stops looking; if work remains and nobody else is
    // looking, hand the search to a successor.
    const uint32_t still_searching = s.searching.fetch_sub(1, std::memory_order_acq_rel) - 1;
    if (!s.tasks.empty() && still_searching == 0) wake_one_locked(sp);
    lock.unlock();
    task.run();
    task = {};  // the task's captures go before the thread reports idle
    s.searching.fetch_add(1, std::memory_order_acq_rel);
    lock.lock();
    if (--s.running == 0 && s.stop) s.idle_cv.notify_all();
  }
  s.searching.fetch_sub(1, std::memory_order_acq_rel);
  --s.alive;
  s.idle_cv.notify_all();
}

}  // namespace conveyor
