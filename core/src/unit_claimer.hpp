// The claims of a unit the dispatcher found free to claim: its tokens
// (TokenSettlement), the storage call (on the dispatcher thread, or in the
// SlowClaimPool for a unit whose claims are slow), the settling of costs and
// of kinds no consumer here serves, the counters, and the hand-over of the
// jobs (Execute for local handlers, the claim's deliver for a remote
// worker). Each returns the state the unit enters next. Dispatcher thread.
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/internal/storage.hpp>

#include "dispatch_unit.hpp"
#include "due_times.hpp"
#include "permits.hpp"
#include "remote_claim_matcher.hpp"
#include "slow_claim_pool.hpp"
#include "storage_health.hpp"
#include "token_settlement.hpp"

#include <chrono>
#include <exception>
#include <functional>
#include <list>
#include <string>
#include <vector>

namespace conveyor {

class UnitClaimer {
 public:
  struct Options {
    std::chrono::milliseconds lease{30000};
    uint32_t claim_batch_max = 100;
    // A unit whose claim takes this long claims in the SlowClaimPool from
    // then on, and back on the dispatcher thread once one takes under half
    // of it; 0: never.
    std::chrono::milliseconds slow_claim{0};
    StorageHealth* health = nullptr;     // may be null
    std::function<bool()> notified_due;  // see Dispatcher::Options
    DueTimes::Policy drained;
  };
  using Execute = std::function<void(QueueRunner&, std::vector<Job>&&)>;

  // made: called on a pool thread when a slow claim was made (the
  // dispatcher is woken to deliver it: take_made, finish).
  UnitClaimer(Storage& storage, const Clock& clock, Permits& permits, Options options,
              Execute execute, std::function<void()> made);

  // Claims up to batch jobs for r's local handlers (kinds: the served kinds,
  // or null for every kind), taking their tokens and permits.
  Next claim_local(QueueRunner& r, uint32_t batch, const std::vector<std::string>* kinds,
                   SteadyTime now);
  // The slow claims made since the last call, for finish.
  std::list<LocalClaim> take_made() { return slow_.take_done(); }
  // After c's storage call: hands its jobs on, settles tokens and permits.
  Next finish(LocalClaim& c, const std::vector<std::string>* kinds, SteadyTime now);
  // Claims up to permits jobs of claim's kinds for a remote worker.
  RemoteClaimMatcher::Try claim_remote(QueueRunner& r, RemoteClaim& claim, uint32_t permits,
                                       SteadyTime now);
  // Stops the pool: the jobs of claims not delivered go back to storage,
  // with their tokens and permits.
  void stop();

 private:
  // Makes the storage call of c (any thread; never throws: error is set).
  void make(LocalClaim& c);
  // A keyed unit's claim of up to permits jobs of kinds (empty: any): its
  // KeyTurns shares them between the ready keys (listing the keys first
  // when needed), then one claim_keys call. blocked (may be null) receives
  // why ready keys got fewer. Any thread; throws what storage throws.
  std::vector<Job> claim_by_keys(const QueueRunner& r, const std::vector<std::string>& kinds,
                                 uint32_t permits, int64_t wall_us, int64_t expires_us,
                                 KeyTurns::Blocked* blocked);
  // A claim failed: refund its tokens, health, log; r backs off.
  Next failed(QueueRunner& r, uint32_t tokens, const std::exception_ptr& error, const char* what,
              SteadyTime now);

  Storage& storage_;
  const Clock& clock_;
  Permits& permits_;
  const Options options_;
  const Execute execute_;
  TokenSettlement tokens_;
  SlowClaimPool slow_;
};

}  // namespace conveyor
