// Matches remote workers' claims (remote_claim.hpp) with units. A new claim
// tries its queues at once, in a weighted random order; one that got no job
// waits on each of its queues' units until its deadline, and each poll of a
// unit serves the claims waiting there, oldest first, from the unit's
// permits and bucket (the dispatcher's try_one makes each grant).
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/internal/mutex.hpp>

#include "dispatch_unit.hpp"
#include "remote_claim.hpp"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

namespace conveyor {

class RemoteClaimMatcher {
 public:
  // What one try to grant a claim jobs of a unit ended with; next: the
  // state the unit enters when the try found it unable to serve now.
  struct Try {
    enum Result { kGranted, kEmpty, kNoPermits, kThrottled, kFailed, kGone } result;
    std::optional<Next> next;
  };
  using TryOne = std::function<Try(QueueRunner&, RemoteClaim&)>;
  using UnitFor = std::function<QueueRunner&(const RemoteClaim::Source&)>;

  // Queues claim for the dispatcher's next pass; false when closed (then the
  // caller answers it). Any thread.
  bool submit(std::shared_ptr<RemoteClaim> claim) EXCLUDES(mu_);
  // The claims submitted since the last call. Dispatcher thread.
  std::vector<std::shared_ptr<RemoteClaim>> take_submitted() EXCLUDES(mu_);

  // Dispatcher thread: tries a submitted claim on its units at once; the
  // units it could not be served by enter try's next (through enter).
  void start(const std::shared_ptr<RemoteClaim>& claim, SteadyTime now, const UnitFor& unit_for,
             const TryOne& try_one, const std::function<void(QueueRunner&, Next)>& enter);
  // Dispatcher thread: serves r's waiting claims while it can; the state r
  // enters when a claim could not be served (none when all were, or none
  // found jobs).
  std::optional<Next> serve(QueueRunner& r, const TryOne& try_one);
  // Dispatcher thread: answers empty the claims whose wait ended by now.
  void expire(SteadyTime now);
  // When the next claim's wait ends (SteadyTime::max() when none).
  SteadyTime next_deadline() const;
  // Answers every waiting claim empty, and every later one at once. After
  // the dispatcher thread stopped; units lists every unit.
  void close(const std::vector<QueueRunner*>& units) EXCLUDES(mu_);

 private:
  Mutex mu_;
  std::vector<std::shared_ptr<RemoteClaim>> submitted_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
  // Owned by the dispatcher thread: every claim that waits, by its deadline.
  std::multimap<SteadyTime, std::shared_ptr<RemoteClaim>> deadlines_;
};

}  // namespace conveyor
