#include "periodic_thread.hpp"

namespace conveyor::pgqueue {

PeriodicThread::PeriodicThread(std::chrono::milliseconds tick, std::function<void()> fn)
    : tick_(tick), fn_(std::move(fn)) {
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, tick_, [this] { return stop_; })) {
      lock.unlock();
      fn_();
      lock.lock();
    }
  });
}

PeriodicThread::~PeriodicThread() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

}  // namespace conveyor::pgqueue
