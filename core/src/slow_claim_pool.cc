#include "slow_claim_pool.hpp"

namespace conveyor {

SlowClaimPool::SlowClaimPool(std::function<void(LocalClaim&)> make, std::function<void()> made)
    : make_(std::move(make)), made_(std::move(made)) {}

SlowClaimPool::~SlowClaimPool() { stop(); }

void SlowClaimPool::submit(LocalClaim c) {
  MutexLock lock(mu_);
  requests_.push_back(std::move(c));
  if (requests_.size() > waiting_ && threads_.size() < kSlowClaimThreads)
    threads_.emplace_back([this] { run(); });
  cv_.notify_one();
}

std::list<LocalClaim> SlowClaimPool::take_done() {
  std::list<LocalClaim> done;
  MutexLock lock(mu_);
  done.swap(done_);
  return done;
}

void SlowClaimPool::run() {
  MutexLock lock(mu_);
  for (;;) {
    ++waiting_;
    while (!stop_ && requests_.empty()) cv_.wait(mu_);
    --waiting_;
    if (stop_) return;  // what is left, stop() returns
    std::list<LocalClaim> one;
    one.splice(one.begin(), requests_, requests_.begin());
    lock.unlock();
    make_(one.front());
    lock.lock();
    done_.splice(done_.end(), one);
    lock.unlock();
    made_();
    lock.lock();
  }
}

std::list<LocalClaim> SlowClaimPool::stop() {
  std::vector<std::thread> threads;
  {
    MutexLock lock(mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
  std::list<LocalClaim> left;
  MutexLock lock(mu_);
  left.splice(left.end(), requests_);  // never made
  left.splice(left.end(), done_);      // made, not taken
  return left;
}

}  // namespace conveyor
