// Small synchronisation helpers for tests that need real threads.
#pragma once

#include <conveyor/internal/mutex.hpp>

#include <chrono>
#include <functional>
#include <thread>

namespace conveyor::testing {

// A door threads wait at (pass) until the test opens it.
class Gate {
 public:
  void open() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void pass() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    while (!open_) cv_.wait(mu_);
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool open_ GUARDED_BY(mu_) = false;
};

// Polls cond until it holds (true) or bound passes (false): a bounded wait
// for what another thread does, not a sleep that hopes it is done.
inline bool eventually(const std::function<bool()>& cond,
                       std::chrono::milliseconds bound = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace conveyor::testing
