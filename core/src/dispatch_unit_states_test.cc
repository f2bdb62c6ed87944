// The dispatch unit's state machine (dispatch_unit.hpp), driven on a
// ManualClock against the real in-memory plugin behind a
// FaultInjectingStorage: every (state, event) pair that can occur, as a
// table, and randomized event sequences that check the two rules every
// path must keep: a unit with ready work is never left where nothing wakes
// it, and a limited unit never starts more than burst + rate * t jobs.
#include "dispatcher.hpp"

#include "testing/fault_injecting_storage.hpp"

#include <conveyor/config.hpp>

#include <gtest/gtest.h>

#include <future>
#include <map>
#include <random>
#include <thread>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using testing::FaultInjectingStorage;
using testing::StorageOp;

constexpr const char* kQueue = "q";

const char* name_of(UnitState s) {
  switch (s) {
    case UnitState::kPolling:
      return "Polling";
    case UnitState::kScheduled:
      return "Scheduled";
    case UnitState::kParked:
      return "Parked";
    case UnitState::kWaitingForSlot:
      return "WaitingForSlot";
    case UnitState::kClaimInFlight:
      return "ClaimInFlight";
  }
  return "?";
}

const char* name_of(WaitReason w) {
  switch (w) {
    case WaitReason::kNone:
      return "None";
    case WaitReason::kMoreReady:
      return "MoreReady";
    case WaitReason::kCoalescing:
      return "Coalescing";
    case WaitReason::kTokens:
      return "Tokens";
    case WaitReason::kHeld:
      return "Held";
    case WaitReason::kDrained:
      return "Drained";
    case WaitReason::kLocalIdle:
      return "LocalIdle";
    case WaitReason::kBackingOff:
      return "BackingOff";
    case WaitReason::kBacklogged:
      return "Backlogged";
    case WaitReason::kNoConsumer:
      return "NoConsumer";
    case WaitReason::kKeyLimits:
      return "KeyLimits";
  }
  return "?";
}

// One dispatcher with one unit, "q", and the jobs it handed out.
class Harness {
 public:
  explicit Harness(Dispatcher::Options options = {}) {
    storage_ = std::make_shared<FaultInjectingStorage>(testing::open_memory_storage());
    resolver_ =
        std::make_unique<LimitResolver>(EngineConfig{}, std::map<std::string, QueueConfig>{});
    dispatcher_ = std::make_unique<Dispatcher>(*storage_, *resolver_, clock_, metrics_, options,
                                               [this](QueueRunner& r, std::vector<Job>&& jobs) {
                                                 runner_[r.name] = &r;
                                                 for (Job& j : jobs)
                                                   running_[r.name].push_back(std::move(j));
                                               });
  }
  ~Harness() { dispatcher_.reset(); }

  void enqueue(int n, const std::string& queue = kQueue) {
    std::vector<NewJob> jobs(n);
    for (auto& j : jobs) {
      j.queue = queue;
      j.kind = "noop";
      j.run_at_us = clock_.wall_now_us();
    }
    storage_->enqueue(jobs, clock_.wall_now_us());
    enqueued_[queue] += n;
  }
  // Finishes up to n running jobs of queue, as workers would.
  void finish(size_t n, const std::string& queue = kQueue) {
    auto& running = running_[queue];
    for (; n > 0 && !running.empty(); --n) {
      running.pop_back();
      ++finished_[queue];
      dispatcher_->job_finished(*runner_[queue]);
    }
  }
  SteadyTime pass() { return next_ = dispatcher_->run_due(clock_.steady_now()); }
  // Moves the clock to the next due time (at most cap ahead) and runs a pass.
  void advance_to_next(std::chrono::nanoseconds cap = 10s) {
    const SteadyTime now = clock_.steady_now();
    if (next_ > now) clock_.advance(std::min<std::chrono::nanoseconds>(next_ - now, cap));
    pass();
  }
  std::pair<UnitState, WaitReason> state(const std::string& queue = kQueue) const {
    return *dispatcher_->unit_state(queue);
  }
  size_t started(const std::string& queue = kQueue) {
    return running_[queue].size() + finished_[queue];
  }

  std::shared_ptr<FaultInjectingStorage> storage_;
  ManualClock clock_;
  Metrics metrics_;
  std::unique_ptr<LimitResolver> resolver_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::map<std::string, QueueRunner*> runner_;
  std::map<std::string, std::vector<Job>> running_;
  std::map<std::string, size_t> finished_, enqueued_;
  SteadyTime next_{};
};

// --- Every (state, event) pair, as a table ---

struct Row {
  const char* name;
  Dispatcher::Options options;
  std::function<void(Harness&)> into;   // brings q into the state
  std::pair<UnitState, WaitReason> in;  // the state it is in then
  std::function<void(Harness&)> event;  // then one event and a pass
  std::pair<UnitState, WaitReason> out;
};

Dispatcher::Options small(uint32_t max_in_flight = 256) {
  Dispatcher::Options o;
  o.claim_batch_max = 10;
  o.max_in_flight = max_in_flight;
  return o;
}

// States, each reached the way a running engine reaches it.
void drained(Harness& h) {
  h.dispatcher_->add_queue(kQueue, 10);
  h.pass();  // nothing ready: the claim comes back short
}
void more_ready(Harness& h) {
  h.enqueue(30);
  h.dispatcher_->add_queue(kQueue, 10);
  h.pass();  // a full batch of 10
}
void parked(Harness& h) {
  more_ready(h);
  h.pass();  // its 10 permits are taken
}
void waiting_for_slot(Harness& h) {  // with max_in_flight 5: the engine is full
  h.enqueue(30);
  h.dispatcher_->add_queue(kQueue, 10);
  h.pass();  // 5 jobs: a short batch of the engine's slots
  h.dispatcher_->wake(kQueue);
  h.pass();
}
void coalescing(Harness& h) {
  parked(h);
  h.finish(1);
  h.pass();  // one permit back on a busy unit: it waits for a batch
}
void throttled(Harness& h) {
  h.resolver_->set_overrides({RateLimitOverride{kQueue, RateLimit{50, 10}, 0}});
  h.enqueue(100);
  h.dispatcher_->add_queue(kQueue, 50);
  h.pass();  // the burst of 10
  h.pass();  // no token until 20 ms
}
void held(Harness& h) {
  more_ready(h);
  h.finish(10);
  h.dispatcher_->hold(kQueue, h.clock_.steady_now() + 500ms);
  h.pass();
}
void backing_off(Harness& h) {
  h.enqueue(5);
  h.storage_->fail_next(StorageOp::kClaim);
  h.dispatcher_->add_queue(kQueue, 10);
  h.pass();
}

// Events.
void timer(Harness& h) { h.advance_to_next(); }
void wake(Harness& h) {
  h.dispatcher_->wake(kQueue);
  h.pass();
}
void new_jobs(Harness& h) {
  h.enqueue(3);
  wake(h);
}
void finish_all(Harness& h) {
  h.finish(100);
  h.pass();
}
void hold_1s(Harness& h) {
  h.dispatcher_->hold(kQueue, h.clock_.steady_now() + 1s);
  wake(h);
}
void clear_hold(Harness& h) {
  h.dispatcher_->clear_hold(kQueue);
  h.pass();
}
void claim_fails(Harness& h) {
  h.storage_->fail_next(StorageOp::kClaim);
  h.finish(100);
  wake(h);
}

using S = UnitState;
using W = WaitReason;
const std::pair<S, W> kDrained{S::kScheduled, W::kDrained};
const std::pair<S, W> kMoreReady{S::kScheduled, W::kMoreReady};
const std::pair<S, W> kParked{S::kParked, W::kMoreReady};
const std::pair<S, W> kTokens{S::kScheduled, W::kTokens};
const std::pair<S, W> kHeld{S::kScheduled, W::kHeld};
const std::pair<S, W> kBackingOff{S::kScheduled, W::kBackingOff};
const std::pair<S, W> kCoalescing{S::kScheduled, W::kCoalescing};
const std::pair<S, W> kWaitingForSlot{S::kWaitingForSlot, W::kMoreReady};

std::vector<Row> rows() {
  return {
      // Drained: only new work, a hold or a failure changes it.
      {"drained+timer", small(), drained, kDrained, timer, kDrained},
      {"drained+new jobs", small(), drained, kDrained, new_jobs, kDrained},  // 3 < batch
      {"drained+hold", small(), drained, kDrained, hold_1s, kHeld},
      {"drained+claim fails", small(), drained, kDrained, claim_fails, kBackingOff},
      // A full batch: polled again at once; then out of permits.
      {"more ready+timer", small(), more_ready, kMoreReady, timer, kParked},
      {"more ready+all finished", small(), more_ready, kMoreReady, finish_all, kMoreReady},
      {"more ready+hold", small(), more_ready, kMoreReady, hold_1s, kHeld},
      // Parked: a freed permit is the way out.
      {"parked+timer", small(), parked, kParked, timer, kParked},
      {"parked+wake", small(), parked, kParked, wake, kParked},
      {"parked+all finished", small(), parked, kParked, finish_all, kMoreReady},
      {"parked+one finished", small(), parked, kParked,
       [](Harness& h) {
         h.finish(1);
         h.pass();
       },
       kCoalescing},
      {"parked+claim fails", small(), parked, kParked, claim_fails, kBackingOff},
      // Coalescing: its timer, or a batch of permits back, claims.
      {"coalescing+timer", small(), coalescing, kCoalescing, timer, kMoreReady},  // the 1 free
      {"coalescing+all finished", small(), coalescing, kCoalescing, finish_all, kMoreReady},
      // Waiting for an engine-wide slot: a freed slot is the way out.
      {"waiting for slot+timer", small(5), waiting_for_slot, kWaitingForSlot, timer,
       kWaitingForSlot},
      {"waiting for slot+wake", small(5), waiting_for_slot, kWaitingForSlot, wake, kWaitingForSlot},
      {"waiting for slot+all finished", small(5), waiting_for_slot, kWaitingForSlot, finish_all,
       // 5 slots: a short batch of the 10 asked for, and 25 jobs left.
       kMoreReady},
      // Throttled: its timer is exactly when the tokens are due.
      {"tokens+timer", small(), throttled, kTokens, timer, kMoreReady},  // the 1 token due
      {"tokens+wake", small(), throttled, kTokens, wake, kTokens},
      {"tokens+hold", small(), throttled, kTokens, hold_1s, kHeld},
      // Held: until the hold ends; the operator may end it.
      {"held+wake", small(), held, kHeld, wake, kHeld},
      {"held+new jobs", small(), held, kHeld, new_jobs, kHeld},
      {"held+timer", small(), held, kHeld, timer, kMoreReady},
      {"held+clear", small(), held, kHeld, clear_hold, kMoreReady},
      {"held+longer hold", small(), held, kHeld, hold_1s, kHeld},
      // Backing off: the timer retries; the backoff grows while it fails.
      {"backing off+timer", small(), backing_off, kBackingOff, timer, kDrained},
      {"backing off+fails again", small(), backing_off, kBackingOff,
       [](Harness& h) {
         h.storage_->fail_next(StorageOp::kClaim);
         h.advance_to_next();
       },
       kBackingOff},
      {"backing off+wake", small(), backing_off, kBackingOff, wake, kDrained},
  };
}

TEST(DispatchUnitStates, EveryStateAndEventEndsInTheStateTheTableSays) {
  for (const Row& row : rows()) {
    SCOPED_TRACE(row.name);
    Harness h(row.options);
    row.into(h);
    const auto in = h.state();
    ASSERT_EQ(in, row.in) << "in " << name_of(in.first) << "(" << name_of(in.second) << ")";
    row.event(h);
    const auto out = h.state();
    EXPECT_EQ(out, row.out) << "ended in " << name_of(out.first) << "(" << name_of(out.second)
                            << "), expected " << name_of(row.out.first) << "("
                            << name_of(row.out.second) << ")";
  }
}

// The held unit's timer is the hold's end, and the throttled unit's the
// next token: exact times, not a poll interval.
TEST(DispatchUnitStates, TimedStatesWakeAtTheirTime) {
  Harness h(small());
  throttled(h);
  EXPECT_EQ(h.next_ - h.clock_.steady_now(), 20ms);
  Harness g(small());
  held(g);
  EXPECT_EQ(g.next_ - g.clock_.steady_now(), 500ms);
}

// A claim in the slow-claim pool: events wait for its delivery. A wake for
// new jobs while it was made (after its storage call read the queue) is
// kept: the unit is polled again at once instead of waiting a poll
// interval as a drained unit would, and no second claim runs meanwhile.
TEST(DispatchUnitStates, EventsDuringASlowClaimAreKeptForItsDelivery) {
  Dispatcher::Options o = small();
  o.slow_claim = 1ms;
  Harness h(o);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> claims{0};
  std::promise<void> second_made;
  h.storage_->set_claim_hook([&](std::string_view) {
    if (++claims != 1) return;
    // The first claim is slow (real time, as the dispatcher measures it).
    const auto until = std::chrono::steady_clock::now() + 2ms;
    while (std::chrono::steady_clock::now() < until) {
    }
  });
  h.storage_->set_after_hook(StorageOp::kClaim, [&] {
    if (claims.load() != 2) return;
    second_made.set_value();
    released.wait();  // held in the pool until the test has sent its events
  });
  h.enqueue(15);
  h.dispatcher_->add_queue(kQueue, 10);
  h.pass();  // slow: from now on its claims go to the pool
  ASSERT_EQ(h.started(), 10u);
  h.finish(10);
  h.pass();  // the second claim, in the pool: it finds the 5 left
  second_made.get_future().wait();
  EXPECT_EQ(h.state().first, S::kClaimInFlight);
  h.enqueue(10);
  h.dispatcher_->wake(kQueue);
  h.pass();
  EXPECT_EQ(h.state().first, S::kClaimInFlight);
  EXPECT_EQ(claims.load(), 2);
  release.set_value();
  // Delivered at the first pass after the pool made it (a generous bound
  // for the pool's thread to get there).
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (h.started() < 15 && std::chrono::steady_clock::now() < deadline) {
    h.pass();
    std::this_thread::yield();
  }
  ASSERT_EQ(h.started(), 15u);
  // Short of its batch, yet due at once for the wake it kept.
  EXPECT_EQ(h.state(), kMoreReady);
  EXPECT_EQ(h.next_, h.clock_.steady_now());
}

// A remote worker's claim arriving while the unit's local claim is in the
// slow-claim pool is tried outside any poll (RemoteClaimMatcher::start) and
// finds every permit reserved for that claim: Dispatcher::enter keeps that
// for the delivery, so the worker is served as soon as the local claim frees
// the permits it did not fill, not a poll interval (or its whole wait) later.
TEST(DispatchUnitStates, RemoteClaimDuringASlowClaimIsServedAtItsDelivery) {
  Dispatcher::Options o = small();
  o.slow_claim = 1ms;
  Harness h(o);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> local_claims{0};  // plain claims: the remote worker's are claim_kinds
  std::promise<void> second_made;
  h.storage_->set_hook(StorageOp::kClaim, [&] {
    if (++local_claims != 1) return;
    // The first claim is slow (real time, as the dispatcher measures it).
    const auto until = std::chrono::steady_clock::now() + 2ms;
    while (std::chrono::steady_clock::now() < until) {
    }
  });
  h.storage_->set_after_hook(StorageOp::kClaim, [&] {
    if (local_claims.load() != 2) return;
    second_made.set_value();
    released.wait();  // held in the pool until the remote claim was tried
  });
  h.enqueue(15);
  h.dispatcher_->add_queue(kQueue, 10);
  h.pass();  // slow: from now on its claims go to the pool
  ASSERT_EQ(h.started(), 10u);
  h.finish(10);
  h.pass();  // the second claim, in the pool, holding all 10 permits: it finds the 5 left
  second_made.get_future().wait();
  ASSERT_EQ(h.state().first, S::kClaimInFlight);

  // A remote worker's job (after the local claim read the queue), and its
  // claim, which would wait 30 s of the manual clock.
  const int64_t wall = h.clock_.wall_now_us();
  std::vector<NewJob> remote_job(1);
  remote_job[0].queue = kQueue;
  remote_job[0].kind = "remote";
  remote_job[0].run_at_us = wall;
  h.storage_->enqueue(remote_job, wall);
  bool answered = false;
  std::vector<Job> granted;
  auto claim = std::make_shared<RemoteClaim>();
  claim->queues = {RemoteClaim::Source{kQueue, 1, 10}};
  claim->kinds = {"remote"};
  claim->max_jobs = 5;
  claim->deadline = h.clock_.steady_now() + 30s;
  claim->lease = 30s;
  claim->deliver = [&](QueueRunner*, std::vector<Job>&& jobs) {
    answered = true;
    granted = std::move(jobs);
  };
  h.dispatcher_->submit_remote(claim);
  h.pass();  // tried at once: no permit is free while the local claim is in flight
  EXPECT_FALSE(answered);
  EXPECT_EQ(h.state().first, S::kClaimInFlight);

  release.set_value();
  // Delivered at the first pass after the pool made it (a generous bound
  // for the pool's thread to get there).
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (h.started() < 15 && std::chrono::steady_clock::now() < deadline) {
    h.pass();
    std::this_thread::yield();
  }
  ASSERT_EQ(h.started(), 15u);
  // Short of its batch, yet the unit is polled again at once for the remote
  // claim it kept: served without the clock moving.
  for (int i = 0; i < 3 && !answered; ++i) h.pass();
  ASSERT_TRUE(answered) << "the remote claim waits for the unit's next poll ("
                        << name_of(h.state().first) << "(" << name_of(h.state().second) << "), in "
                        << std::chrono::duration_cast<std::chrono::milliseconds>(
                               h.next_ - h.clock_.steady_now())
                               .count()
                        << " ms)";
  ASSERT_EQ(granted.size(), 1u);
  EXPECT_EQ(granted[0].kind, "remote");
}

// --- Randomized: thousands of event sequences ---

// Checks after every pass: the unit is in a state something leaves, and a
// limited unit started at most burst + rate * t jobs since its limit was
// set. At the end, with faults and holds gone and jobs finished as they
// start, every job enqueued is started within a bounded number of passes.
TEST(DispatchUnitStates, RandomEventSequencesNeverStrandAUnitOrExceedItsLimit) {
  constexpr int kSequences = 5000;
  constexpr int kSteps = 40;
  const RateLimit limit{200, 20};
  for (int seed = 1; seed <= kSequences; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
    Dispatcher::Options o;
    o.claim_batch_max = 1 + static_cast<uint32_t>(pick(16));
    o.max_in_flight = 1 + static_cast<uint32_t>(pick(24));
    o.poll_interval = 100ms;
    Harness h(o);
    const bool limited = pick(2) == 0;
    if (limited) h.resolver_->set_overrides({RateLimitOverride{"lim", limit, 0}});
    const SteadyTime start = h.clock_.steady_now();
    const std::vector<std::string> queues{"lim", "free"};
    for (const auto& q : queues) h.dispatcher_->add_queue(q, 1 + static_cast<uint32_t>(pick(12)));
    h.pass();
    for (int step = 0; step < kSteps; ++step) {
      const std::string& q = queues[static_cast<size_t>(pick(2))];
      switch (pick(9)) {
        case 0:
          h.enqueue(1 + pick(12), q);
          break;
        case 1:
          h.enqueue(1 + pick(5), q);
          h.dispatcher_->wake(q);
          break;
        case 2:
          h.finish(static_cast<size_t>(1 + pick(10)), q);
          break;
        case 3:
          h.storage_->fail_next(StorageOp::kClaim, 1 + static_cast<uint32_t>(pick(3)));
          break;
        case 4:
          h.dispatcher_->hold(q, h.clock_.steady_now() + std::chrono::milliseconds(pick(500)));
          break;
        case 5:
          h.dispatcher_->clear_hold(q);
          break;
        case 6:
          h.clock_.advance(std::chrono::milliseconds(pick(50)));
          break;
        case 7:
          h.advance_to_next(200ms);
          continue;
        default:
          break;
      }
      h.pass();
      for (const auto& name : queues) {
        const auto [state, why] = h.state(name);
        ASSERT_NE(state, S::kPolling) << name;
        ASSERT_NE(state, S::kClaimInFlight) << name;  // no slow claims here
      }
      if (limited) {
        const double t = std::chrono::duration<double>(h.clock_.steady_now() - start).count();
        ASSERT_LE(static_cast<double>(h.started("lim")),
                  limit.burst + limit.rate_per_sec * t + 1e-9);
      }
    }
    // Liveness: faults and holds gone, jobs finished as they start.
    h.storage_->clear_faults();
    for (const auto& q : queues) h.dispatcher_->clear_hold(q);
    for (int i = 0; i < 5000; ++i) {
      for (const auto& q : queues) h.finish(1000, q);
      h.advance_to_next(1s);
      if (h.started("lim") == h.enqueued_["lim"] && h.started("free") == h.enqueued_["free"]) break;
    }
    for (const auto& q : queues)
      ASSERT_EQ(h.started(q), h.enqueued_[q]) << q << " left jobs behind";
  }
}

// A time asked for while a slow claim is in flight (wake_at: a retry or a
// delayed job due) is kept as the unit's timer, so the job runs at that time
// and not at the unit's next drained poll, a poll_interval later.
TEST(DispatchUnitStates, ADueTimeAskedForDuringASlowClaimIsKept) {
  Dispatcher::Options o = small();
  o.slow_claim = 1ms;
  o.poll_interval = 10s;
  Harness h(o);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> claims{0};
  std::promise<void> second_made;
  h.storage_->set_hook(StorageOp::kClaim, [&] {
    if (++claims != 1) return;
    // The first claim is slow (real time, as the dispatcher measures it).
    const auto until = std::chrono::steady_clock::now() + 2ms;
    while (std::chrono::steady_clock::now() < until) {
    }
  });
  h.storage_->set_after_hook(StorageOp::kClaim, [&] {
    if (claims.load() != 2) return;
    second_made.set_value();
    released.wait();  // held in the pool until the due time was asked for
  });
  h.enqueue(15);
  h.dispatcher_->add_queue(kQueue, 10);
  h.pass();  // slow: from now on its claims go to the pool
  ASSERT_EQ(h.started(), 10u);
  h.finish(10);
  h.pass();  // the second claim, in the pool: it finds the 5 left
  second_made.get_future().wait();
  ASSERT_EQ(h.state().first, S::kClaimInFlight);

  // A job due in 200 ms, and the wake-up for it, while the claim is out.
  const int64_t due = h.clock_.wall_now_us() + 200'000;
  std::vector<NewJob> later(1);
  later[0].queue = kQueue;
  later[0].kind = "noop";
  later[0].run_at_us = due;
  h.storage_->enqueue(later, h.clock_.wall_now_us());
  h.dispatcher_->wake_at(kQueue, due);
  h.pass();
  EXPECT_EQ(h.state().first, S::kClaimInFlight);

  release.set_value();
  auto pass_until_started = [&](size_t n) {
    // A generous bound for the pool's thread; the manual clock stays put.
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (h.started() < n && std::chrono::steady_clock::now() < deadline) {
      h.pass();
      std::this_thread::yield();
    }
    return h.started();
  };
  ASSERT_EQ(pass_until_started(15), 15u);
  h.finish(15);
  // Its claims found all there was: the unit waits, and not a poll_interval.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!(h.state().first == S::kScheduled && h.next_ > h.clock_.steady_now()) &&
         std::chrono::steady_clock::now() < deadline) {
    h.pass();
    std::this_thread::yield();
  }
  ASSERT_EQ(h.state().first, S::kScheduled);
  EXPECT_LE(h.next_ - h.clock_.steady_now(), 200ms)
      << "the job due at 200 ms waits for the unit's next poll (" << name_of(h.state().second)
      << ")";
  h.clock_.advance(200ms);
  EXPECT_EQ(pass_until_started(16), 16u)
      << "the job due at 200 ms waits for the unit's next poll (" << name_of(h.state().first) << "("
      << name_of(h.state().second) << "), in "
      << std::chrono::duration_cast<std::chrono::milliseconds>(h.next_ - h.clock_.steady_now())
             .count()
      << " ms)";
}

}  // namespace
}  // namespace conveyor
