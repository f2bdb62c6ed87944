#include "unit_scheduler.hpp"

namespace conveyor {

void UnitScheduler::wake(QueueRunner& r) {
  MutexLock lock(mu_);
  woken_.push_back(&r);
  interrupted_ = true;
  cv_.notify_one();
}

void UnitScheduler::due_at(QueueRunner& r, int64_t at_us) {
  MutexLock lock(mu_);
  due_inbox_.emplace_back(&r, at_us);
  interrupted_ = true;
  cv_.notify_one();
}

void UnitScheduler::interrupt() {
  MutexLock lock(mu_);
  interrupted_ = true;
  cv_.notify_one();
}

void UnitScheduler::wait_for_slot(QueueRunner& r, const std::function<bool()>& slot_free) {
  MutexLock lock(mu_);
  waiting_slot_.push_back(&r);
  has_slot_waiters_.store(true);  // seq_cst: ordered before the re-check
  if (slot_free()) wake_slot_waiters();
}

void UnitScheduler::slot_freed() {
  // seq_cst, paired with wait_for_slot's store then re-check.
  if (!has_slot_waiters_.load()) return;
  MutexLock lock(mu_);
  if (waiting_slot_.empty()) return;
  wake_slot_waiters();
  interrupted_ = true;
  cv_.notify_one();
}

void UnitScheduler::wake_slot_waiters() {
  woken_.insert(woken_.end(), waiting_slot_.begin(), waiting_slot_.end());
  waiting_slot_.clear();
  has_slot_waiters_.store(false, std::memory_order_release);
}

void UnitScheduler::schedule(QueueRunner& r, SteadyTime at) {
  if (r.scheduled) timers_.erase({r.due, &r});
  r.due = at;
  r.scheduled = true;
  timers_.insert({at, &r});
}

void UnitScheduler::schedule_by(QueueRunner& r, SteadyTime at, WaitReason why) {
  MutexLock lock(mu_);
  if (r.scheduled && r.due <= at) return;
  schedule(r, at);
  r.why = why;
}

bool UnitScheduler::take_if_due(QueueRunner& r, SteadyTime now) {
  MutexLock lock(mu_);
  if (!r.scheduled || r.due > now) return false;
  timers_.erase({r.due, &r});
  r.scheduled = false;
  return true;
}

std::vector<std::pair<QueueRunner*, int64_t>> UnitScheduler::begin_pass(
    SteadyTime now, const std::function<void(QueueRunner&)>& woken) {
  std::vector<std::pair<QueueRunner*, int64_t>> due_at;
  MutexLock lock(mu_);
  for (QueueRunner* r : woken_) {
    schedule(*r, now);
    woken(*r);
  }
  woken_.clear();
  due_at.swap(due_inbox_);
  interrupted_ = false;
  return due_at;
}

std::vector<QueueRunner*> UnitScheduler::take_due(SteadyTime now) {
  std::vector<QueueRunner*> due;
  MutexLock lock(mu_);
  while (!timers_.empty() && timers_.begin()->first <= now) {
    QueueRunner* r = timers_.begin()->second;
    timers_.erase(timers_.begin());
    r->scheduled = false;
    due.push_back(r);
  }
  return due;
}

SteadyTime UnitScheduler::next_due(SteadyTime now) {
  MutexLock lock(mu_);
  if (!woken_.empty()) return now;
  return timers_.empty() ? SteadyTime::max() : timers_.begin()->first;
}

void UnitScheduler::wait(SteadyTime until, std::stop_token stop) {
  MutexLock lock(mu_);
  const auto done = [&] {
    mu_.AssertHeld();  // the waits run the predicate with mu_ held
    return interrupted_ || stop.stop_requested();
  };
  if (done()) return;
  if (until == SteadyTime::max())
    cv_.wait(mu_, done);
  else
    cv_.wait_until(mu_, until, done);
}

}  // namespace conveyor
