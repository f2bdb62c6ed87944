#include "maintenance.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace conveyor {
namespace {
// The thread re-checks the clock at least this often (a ManualClock moves
// without waking it).
constexpr auto kMaxWait = std::chrono::milliseconds(50);
constexpr auto kReminderEvery = std::chrono::seconds(30);
}  // namespace

Maintenance::Maintenance(const Clock& clock, StorageHealth& health, std::vector<Step> steps)
    : clock_(clock), health_(health) {
  const SteadyTime now = clock_.steady_now();
  for (Step& s : steps) steps_.push_back(Scheduled{std::move(s), now, 0, {}});
}

Maintenance::~Maintenance() { stop(); }

void Maintenance::run_step(Scheduled& s, SteadyTime now) {
  try {
    s.step.run();
    if (s.failures > 0) spdlog::info("{} works again after {} failures", s.step.name, s.failures);
    s.failures = 0;
    if (s.step.proves_storage) health_.succeeded();
    return;
  } catch (const StorageError& e) {
    health_.failed(s.step.name, e);
    if (++s.failures == 1 || now >= s.next_log) {
      if (s.failures == 1)
        spdlog::warn("{} failed: {}", s.step.name, e.what());
      else
        spdlog::warn("{} still failing ({} times): {}", s.step.name, s.failures, e.what());
      s.next_log = now + kReminderEvery;
    }
  } catch (const std::exception& e) {
    if (++s.failures == 1 || now >= s.next_log) {
      spdlog::warn("{} failed ({} times): {}", s.step.name, s.failures, e.what());
      s.next_log = now + kReminderEvery;
    }
  }
}

SteadyTime Maintenance::run_due(SteadyTime now) {
  SteadyTime next = SteadyTime::max();
  for (Scheduled& s : steps_) {
    bool due;
    {
      MutexLock lock(mu_);
      due = s.due <= now;
      if (due) s.due = now + s.step.period;
    }
    if (due) run_step(s, now);
    MutexLock lock(mu_);
    next = std::min(next, s.due);
  }
  return next;
}

void Maintenance::run_soon(const std::string& name) {
  MutexLock lock(mu_);
  for (Scheduled& s : steps_)
    if (s.step.name == name) s.due = SteadyTime::min();
  woken_ = true;
  cv_.notify_one();
}

uint64_t Maintenance::failures(const std::string& name) const {
  for (const Scheduled& s : steps_)
    if (s.step.name == name) return s.failures;
  return 0;
}

void Maintenance::start() {
  thread_ = std::thread([this] {
    MutexLock lock(mu_);
    while (!stop_requested_) {
      lock.unlock();
      const SteadyTime now = clock_.steady_now();
      const SteadyTime next = run_due(now);
      lock.lock();
      // run_soon() may have set a step due at SteadyTime::min() meanwhile;
      // compare before subtracting so that `next - now` cannot overflow.
      const SteadyTime::duration wait = next <= now
                                            ? SteadyTime::duration::zero()
                                            : std::min<SteadyTime::duration>(next - now, kMaxWait);
      // The predicate runs with mu_ held; the analysis cannot see so inside
      // a lambda.
      cv_.wait_for(mu_, wait, [this] {
        mu_.AssertHeld();
        return stop_requested_ || woken_;
      });
      woken_ = false;
    }
  });
}

void Maintenance::stop() {
  {
    MutexLock lock(mu_);
    stop_requested_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace conveyor
