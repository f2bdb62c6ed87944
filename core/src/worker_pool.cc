#include "worker_pool.hpp"

namespace conveyor {
namespace {
// How long an out-of-work thread keeps looking before it sleeps.
constexpr auto kSearchFor = std::chrono::microseconds(50);
}  // namespace

struct WorkerPool::State {
  explicit State(uint32_t max) : max_threads(max) {}
  // Constant after construction.
  const uint32_t max_threads;

  // Guarded by mu.
  Mutex mu;
  CondVar cv;       // work for sleepers, or stop
  CondVar idle_cv;  // a thread exited
  std::deque<Task> tasks GUARDED_BY(mu);
  uint32_t sleeping GUARDED_BY(mu) = 0;       // threads blocked on cv
  uint32_t wakes_pending GUARDED_BY(mu) = 0;  // notified, not yet running
  uint32_t running GUARDED_BY(mu) = 0;        // tasks inside run()
  uint32_t live GUARDED_BY(mu) = 0;           // threads not yet out of loop()
  bool stop GUARDED_BY(mu) = false;
  std::vector<std::thread> threads GUARDED_BY(mu);
  std::vector<bool> exited GUARDED_BY(mu);  // per thread, out of loop()

  // Atomic: any thread.
  std::atomic<uint32_t> searching{0};  // threads looking for work, not asleep
  std::atomic<size_t> queued{0};       // tasks.size(), readable without mu

  // Wakes a sleeper, or starts a thread if below max_threads; self is this
  // (a started thread keeps it).
  void wake_one_locked(const std::shared_ptr<State>& self) REQUIRES(mu);
};

WorkerPool::WorkerPool(uint32_t max_threads)
    : state_(std::make_shared<State>(max_threads == 0 ? 1 : max_threads)) {}

WorkerPool::~WorkerPool() {
  bool done;
  {
    MutexLock lock(shutdown_mu_);
    done = shut_down_;
  }
  if (!done) shutdown(std::chrono::steady_clock::time_point::max());
}

void WorkerPool::State::wake_one_locked(const std::shared_ptr<State>& self) {
  if (sleeping > wakes_pending) {
    ++wakes_pending;
    cv.notify_one();
  } else if (threads.size() < max_threads) {
    searching.fetch_add(1, std::memory_order_acq_rel);  // it starts out looking
    const size_t slot = threads.size();
    exited.push_back(false);
    ++live;
    threads.emplace_back([self, slot] { loop(self, slot); });
  }
}

void WorkerPool::submit(Task task) {
  State& s = *state_;
  {
    MutexLock lock(s.mu);
    if (!s.stop) {
      s.tasks.push_back(std::move(task));
      s.queued.store(s.tasks.size(), std::memory_order_release);
      if (s.searching.load(std::memory_order_acquire) == 0) s.wake_one_locked(state_);
      return;
    }
  }
  if (task.drop) task.drop();
}

void WorkerPool::submit(std::vector<Task>&& tasks) {
  if (tasks.empty()) return;
  State& s = *state_;
  {
    MutexLock lock(s.mu);
    if (!s.stop) {
      for (auto& t : tasks) s.tasks.push_back(std::move(t));
      s.queued.store(s.tasks.size(), std::memory_order_release);
      if (s.searching.load(std::memory_order_acquire) == 0) s.wake_one_locked(state_);
      return;
    }
  }
  for (auto& t : tasks)
    if (t.drop) t.drop();
}

uint32_t WorkerPool::shutdown(std::chrono::steady_clock::time_point deadline) {
  State& s = *state_;
  std::deque<Task> dropped;
  {
    MutexLock lock(s.mu);
    s.stop = true;
    dropped.swap(s.tasks);
    s.queued.store(0, std::memory_order_release);
  }
  s.cv.notify_all();
  for (auto& t : dropped)
    if (t.drop) t.drop();

  MutexLock once(shutdown_mu_);
  MutexLock lock(s.mu);
  // The predicates run with s.mu held; the analysis cannot see so inside a
  // lambda.
  s.idle_cv.wait_until(s.mu, deadline, [&] {
    s.mu.AssertHeld();
    return s.live == 0;
  });
  const uint32_t still_running = s.running;
  if (shut_down_) return still_running;  // threads joined or detached before
  shut_down_ = true;
  std::vector<std::thread> threads;
  threads.swap(s.threads);
  const std::vector<bool> exited = s.exited;
  lock.unlock();
  for (size_t i = 0; i < threads.size(); ++i) {
    // Out of loop(): returns at once. The others hold the state themselves.
    if (exited[i])
      threads[i].join();
    else
      threads[i].detach();
  }
  return still_running;
}

uint32_t WorkerPool::threads() const {
  MutexLock lock(state_->mu);
  return static_cast<uint32_t>(state_->exited.size());
}

void WorkerPool::loop(const std::shared_ptr<State>& state, size_t slot) {
  State& s = *state;
  MutexLock lock(s.mu);
  for (;;) {
    if (s.stop) break;
    if (s.tasks.empty()) {
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
        s.cv.wait(s.mu, [&] {
          s.mu.AssertHeld();
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
    // This thread stops looking; if work remains and nobody else is
    // looking, hand the search to a successor.
    const uint32_t still_searching = s.searching.fetch_sub(1, std::memory_order_acq_rel) - 1;
    if (!s.tasks.empty() && still_searching == 0) s.wake_one_locked(state);
    ++s.running;
    lock.unlock();
    task.run();
    task = {};  // what it captured goes now, not at the next task
    s.searching.fetch_add(1, std::memory_order_acq_rel);
    lock.lock();
    --s.running;
  }
  s.searching.fetch_sub(1, std::memory_order_acq_rel);
  s.exited[slot] = true;
  --s.live;
  s.idle_cv.notify_all();
}

}  // namespace conveyor
