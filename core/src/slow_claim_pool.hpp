// Local claims made off the dispatcher thread, for units whose claims are
// slow (Dispatcher::Options::slow_claim), so their storage calls never hold
// up the other units' dispatch. Up to kSlowClaimThreads claims run at once,
// a thread each, started when every thread already started is busy: a few
// slow queues do not wait for each other, and a storage that is slow for
// every queue does not get a thread per queue.
#pragma once

#include <conveyor/internal/mutex.hpp>
#include <conveyor/job.hpp>

#include "key_turns.hpp"
#include "token_settlement.hpp"

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <list>
#include <string>
#include <thread>
#include <vector>

namespace conveyor {

struct QueueRunner;

// One local claim: what to claim, and (once made) what it returned.
struct LocalClaim {
  QueueRunner* runner = nullptr;
  Grant grant;
  bool filtered = false;           // claim_kinds with kinds, else claim
  std::vector<std::string> kinds;  // when filtered
  int64_t wall_us = 0, expires_us = 0;
  uint32_t reserved = 0;  // permits held for it while it is made off the dispatcher thread
  std::vector<Job> jobs;
  // A keyed unit: why keys with ready jobs got fewer than the claim could take.
  KeyTurns::Blocked keys_blocked;
  std::exception_ptr error;
  std::chrono::steady_clock::duration took{};
};

class SlowClaimPool {
 public:
  static constexpr size_t kSlowClaimThreads = 4;
  // make: the storage call of a claim (any thread; sets error, never
  // throws). made: called on the pool's thread after each claim is done
  // (the dispatcher is woken to deliver it).
  SlowClaimPool(std::function<void(LocalClaim&)> make, std::function<void()> made);
  // Stops (see stop()); what was left is dropped: call stop() first.
  ~SlowClaimPool();

  // Queues c to be made. Any thread.
  void submit(LocalClaim c) EXCLUDES(mu_);
  // The claims made since the last call. Any thread.
  std::list<LocalClaim> take_done() EXCLUDES(mu_);
  // Joins the threads; returns the claims never made and those made but not
  // taken, for their jobs, tokens and permits to be given back. Not
  // concurrently with submit.
  std::list<LocalClaim> stop() EXCLUDES(mu_);

 private:
  void run() EXCLUDES(mu_);

  const std::function<void(LocalClaim&)> make_;
  const std::function<void()> made_;
  Mutex mu_;
  CondVar cv_;
  std::list<LocalClaim> requests_ GUARDED_BY(mu_);
  std::list<LocalClaim> done_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  uint32_t waiting_ GUARDED_BY(mu_) = 0;  // threads waiting for a claim
  std::vector<std::thread> threads_ GUARDED_BY(mu_);
};

}  // namespace conveyor
