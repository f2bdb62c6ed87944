// The dispatcher's poll path, driven by a ManualClock against the real
// in-memory plugin loaded through the real loader, behind a
// FaultInjectingStorage: permits, then tokens, then claim, refund of unused
// tokens, throttling, exact wake-up times, and what failed claims do.
#include "dispatcher.hpp"
#include "maintenance_steps.hpp"

#include "testing/fault_injecting_storage.hpp"

#include <conveyor/config.hpp>
#include <conveyor/internal/storage.hpp>

#include <gtest/gtest.h>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using testing::FaultInjectingStorage;
using testing::StorageOp;

class DispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage_ = std::make_shared<FaultInjectingStorage>(testing::open_memory_storage());
  }
  void TearDown() override {
    dispatcher_.reset();
    storage_.reset();
  }

  void make(EngineConfig engine = {}, Dispatcher::Options options = {}) {
    resolver_ = std::make_unique<LimitResolver>(engine, std::map<std::string, QueueConfig>{});
    dispatcher_ = std::make_unique<Dispatcher>(*storage_, *resolver_, clock_, metrics_, options,
                                               [this](QueueRunner& r, std::vector<Job>&& jobs) {
                                                 if (on_claim_) return on_claim_(r, jobs);
                                                 runner_ = &r;
                                                 for (Job& j : jobs)
                                                   claimed_.push_back(std::move(j));
                                               });
  }

  void enqueue(const std::string& queue, int n) {
    std::vector<NewJob> jobs(n);
    for (auto& j : jobs) {
      j.queue = queue;
      j.kind = "noop";
      j.run_at_us = clock_.wall_now_us();
    }
    storage_->enqueue(jobs, clock_.wall_now_us());
  }

  // Finishes every claimed job (frees permits), as workers would.
  void finish_all() {
    for (size_t i = 0; i < claimed_.size(); ++i) dispatcher_->job_finished(*runner_);
    claimed_.clear();
  }

  std::shared_ptr<FaultInjectingStorage> storage_;
  ManualClock clock_;
  Metrics metrics_;
  std::unique_ptr<LimitResolver> resolver_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::vector<Job> claimed_;
  QueueRunner* runner_ = nullptr;
  // When set, receives each claimed batch instead of claimed_.
  std::function<void(QueueRunner&, const std::vector<Job>&)> on_claim_;
};

TEST_F(DispatcherTest, UnlimitedQueueClaimsUpToFreePermitsThenParks) {
  make();
  enqueue("bulk", 50);
  dispatcher_->add_queue("bulk", 20);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 20u);
  // No permit free: the queue parks (no timer) until a job finishes.
  EXPECT_EQ(dispatcher_->run_due(clock_.steady_now()), SteadyTime::max());
  EXPECT_EQ(claimed_.size(), 20u);
  dispatcher_->job_finished(*runner_);
  // One permit back on a busy queue: it waits the coalescing window for more.
  SteadyTime next = dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 20u);
  EXPECT_EQ(next - clock_.steady_now(), std::chrono::microseconds(1000));
  dispatcher_->job_finished(*runner_);
  clock_.advance(std::chrono::microseconds(1000));
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 22u);  // both freed permits, in one claim
}

TEST_F(DispatcherTest, BatchIsCappedByClaimBatchMax) {
  Dispatcher::Options o;
  o.claim_batch_max = 7;
  make({}, o);
  enqueue("bulk", 50);
  dispatcher_->add_queue("bulk", 100);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 7u);
}

TEST_F(DispatcherTest, LimitedQueueTakesBurstThenWakesExactlyWhenTheNextTokenIsDue) {
  make();
  resolver_->set_overrides({RateLimitOverride{"email", RateLimit{50, 10}, 0}});
  enqueue("email", 100);
  dispatcher_->add_queue("email", 50);
  SteadyTime next = dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 10u);       // the burst
  EXPECT_EQ(next, clock_.steady_now());  // a full batch: come back at once
  next = dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 10u);
  EXPECT_EQ(next - clock_.steady_now(), 20ms);  // 1/50 s, not a poll interval
  EXPECT_EQ(metrics_.queue("email").throttled.load(), 1u);
  clock_.advance(20ms);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 11u);
}

TEST_F(DispatcherTest, UnusedTokensAreRefundedWhenFewerJobsAreReady) {
  make();
  resolver_->set_overrides({RateLimitOverride{"email", RateLimit{1, 10}, 0}});
  enqueue("email", 3);
  dispatcher_->add_queue("email", 50);
  dispatcher_->run_due(clock_.steady_now());
  ASSERT_EQ(claimed_.size(), 3u);
  // Seven tokens were taken but not used: they are back, with no time passing.
  enqueue("email", 20);
  dispatcher_->wake("email");
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 10u);
}

// Over 10 simulated seconds with a deep backlog, dispatch never exceeds
// burst + rate * t at any instant, and reaches it to within one job.
TEST_F(DispatcherTest, ThrottledBacklogDrainsAtTheConfiguredRate) {
  for (RateLimit limit : {RateLimit{50, 10}, RateLimit{5000, 500}}) {
    SCOPED_TRACE(limit.rate_per_sec);
    TearDown();
    SetUp();
    claimed_.clear();
    Dispatcher::Options o;
    o.claim_batch_max = 1000;
    o.max_in_flight = 1'000'000;  // jobs are never finished here
    make({}, o);
    resolver_->set_overrides({RateLimitOverride{"q", limit, 0}});
    const int backlog = static_cast<int>(limit.burst + limit.rate_per_sec * 10) + 200;
    enqueue("q", backlog);
    dispatcher_->add_queue("q", 100000);
    const SteadyTime start = clock_.steady_now();
    for (;;) {
      SteadyTime next = dispatcher_->run_due(clock_.steady_now());
      const double t = std::chrono::duration<double>(clock_.steady_now() - start).count();
      ASSERT_LE(static_cast<double>(claimed_.size()), limit.burst + limit.rate_per_sec * t + 1e-9);
      if (next > start + 10s) break;
      if (next > clock_.steady_now()) clock_.advance(next - clock_.steady_now());
    }
    EXPECT_NEAR(static_cast<double>(claimed_.size()), limit.burst + limit.rate_per_sec * 10, 1.0);
  }
}

// A 5,000/s queue beside an unlimited one whose claims are slow (25 ms per
// batch of 100: PostgreSQL with a big table on a busy machine). With one
// claim per queue per pass, the limited queue got at most claim_batch_max
// (100) jobs per 26 ms pass: 3,846/s. A limited queue a whole batch behind
// claims again before the unlimited queue's next turn, so it keeps its rate,
// and the unlimited queue still gets the rest of the time.
TEST_F(DispatcherTest, SlowUnlimitedClaimsDoNotStarveALimitedQueue) {
  make();  // claim_batch_max 100, 256 in flight engine-wide
  resolver_->set_overrides({RateLimitOverride{"fast", RateLimit{5000, 500}, 0}});
  enqueue("fast", 40000);  // more than 6 s of its rate: backlogged throughout
  enqueue("bulk", 30000);
  std::map<std::string, size_t> claimed;
  on_claim_ = [&](QueueRunner& r, const std::vector<Job>& jobs) {
    claimed[r.name] += jobs.size();
    clock_.advance(r.name == "bulk" ? 25ms : 1ms);                          // the claim's duration
    for (size_t i = 0; i < jobs.size(); ++i) dispatcher_->job_finished(r);  // instant jobs
  };
  dispatcher_->add_queue("fast", 100);
  dispatcher_->add_queue("bulk", 100);
  const SteadyTime start = clock_.steady_now();
  double t = 0;
  double t1 = 0;  // past the burst, as the soak measures: the rate from 1 s on
  size_t at_t1 = 0;
  while (t < 6.0) {
    SteadyTime next = dispatcher_->run_due(clock_.steady_now());
    if (next > clock_.steady_now()) clock_.advance(next - clock_.steady_now());
    t = std::chrono::duration<double>(clock_.steady_now() - start).count();
    ASSERT_LE(static_cast<double>(claimed["fast"]), 500 + 5000 * t + 1e-9);
    if (t1 == 0 && t >= 1.0) t1 = t, at_t1 = claimed["fast"];
  }
  const double rate = static_cast<double>(claimed["fast"] - at_t1) / (t - t1);
  EXPECT_NEAR(rate, 5000, 0.005 * 5000);
  // The limited queue's claims take about 5% of the time; bulk gets the rest.
  EXPECT_GE(static_cast<double>(claimed["bulk"]), 0.9 * 100 * t / 0.025);
}

TEST_F(DispatcherTest, RemovingTheOverrideLiftsTheLimitAtOnce) {
  make();
  resolver_->set_overrides({RateLimitOverride{"email", RateLimit{1, 1}, 0}});
  enqueue("email", 30);
  dispatcher_->add_queue("email", 100);
  dispatcher_->run_due(clock_.steady_now());
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 1u);
  resolver_->set_overrides({});
  dispatcher_->wake("email");
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 30u);
}

// Regression: a pass sorts its limited queues again after polling them, and
// a poll that lifted a limit destroyed that queue's bucket (visiting it
// threw bad_variant_access and ended `conveyor serve`).
TEST_F(DispatcherTest, LimitsLiftedDuringAPassLeaveTheCatchUpRounds) {
  make();
  resolver_->set_overrides(
      {RateLimitOverride{"a", RateLimit{1, 1}, 0}, RateLimitOverride{"b", RateLimit{1, 1}, 0}});
  enqueue("a", 10);
  enqueue("b", 10);
  dispatcher_->add_queue("a", 100);
  dispatcher_->add_queue("b", 100);
  dispatcher_->run_due(clock_.steady_now());
  ASSERT_EQ(claimed_.size(), 2u);  // one token each
  resolver_->set_overrides({});
  dispatcher_->wake_all();
  EXPECT_NO_THROW(dispatcher_->run_due(clock_.steady_now()));
  EXPECT_EQ(claimed_.size(), 20u);
}

TEST_F(DispatcherTest, KillSwitchIgnoresOverrides) {
  EngineConfig e;
  e.rate_limit_enabled = false;
  make(e);
  resolver_->set_overrides({RateLimitOverride{"email", RateLimit{1, 1}, 0}});
  enqueue("email", 30);
  dispatcher_->add_queue("email", 100);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 30u);
  EXPECT_EQ(metrics_.queue("email").throttled.load(), 0u);
}

TEST_F(DispatcherTest, EmptyQueueIsPolledAgainAfterThePollInterval) {
  Dispatcher::Options o;
  o.poll_interval = 1000ms;
  make({}, o);
  dispatcher_->add_queue("idle", 10);
  SteadyTime next = dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(next - clock_.steady_now(), 1000ms);
  EXPECT_TRUE(claimed_.empty());
}

TEST_F(DispatcherTest, EngineWideCapLimitsClaimsAcrossQueues) {
  Dispatcher::Options o;
  o.max_in_flight = 8;
  make({}, o);
  enqueue("a", 10);
  enqueue("b", 10);
  dispatcher_->add_queue("a", 10);
  dispatcher_->add_queue("b", 10);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 8u);
  EXPECT_EQ(dispatcher_->total_in_flight(), 8u);
}

// ---- storage faults ----

// A queue whose claims fail waits 50, 100, 200 ms... between tries, gives
// back the tokens each failed try took, and claims normally once storage
// answers again (the backoff then starts over).
TEST_F(DispatcherTest, FailedClaimsBackOffRefundTheirTokensAndRecover) {
  make();
  // Ten tokens, refilled so slowly that none come back during the test:
  // every token the claim gets was refunded by a failed try.
  resolver_->set_overrides({RateLimitOverride{"email", RateLimit{0.001, 10}, 0}});
  enqueue("email", 30);
  storage_->fail_next(StorageOp::kClaim, 2);                       // UNAVAILABLE
  storage_->fail_next(StorageOp::kClaim, 1, CONVEYOR_E_INTERNAL);  // and a non-transient one
  dispatcher_->add_queue("email", 50);
  SteadyTime next = dispatcher_->run_due(clock_.steady_now());
  for (auto backoff : {50ms, 100ms, 200ms}) {
    EXPECT_EQ(next - clock_.steady_now(), backoff);
    // Not polled again before then.
    clock_.advance(backoff - 1ms);
    const uint64_t calls = storage_->calls(StorageOp::kClaim);
    EXPECT_EQ(dispatcher_->run_due(clock_.steady_now()), next);
    EXPECT_EQ(storage_->calls(StorageOp::kClaim), calls);
    clock_.advance(1ms);
    next = dispatcher_->run_due(clock_.steady_now());
  }
  EXPECT_EQ(storage_->calls(StorageOp::kClaim), 4u);
  EXPECT_EQ(claimed_.size(), 10u);  // the whole burst: no token was lost
  EXPECT_EQ(dispatcher_->total_in_flight(), 10u);
  EXPECT_EQ(metrics_.queue("email").dispatched.load(), 10u);
  EXPECT_EQ(metrics_.queue("email").throttled.load(), 0u);
  // Recovered: the next failure backs off from the start again.
  finish_all();
  resolver_->set_overrides({});
  storage_->fail_next(StorageOp::kClaim);
  dispatcher_->wake("email");
  next = dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(next - clock_.steady_now(), 50ms);
  clock_.advance(50ms);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 20u);
}

// Failed claims take no permits, and their backoff is capped.
TEST_F(DispatcherTest, FailingClaimsTakeNoPermits) {
  Dispatcher::Options o;
  o.max_in_flight = 10;
  make({}, o);
  enqueue("a", 10);
  storage_->fail_next(StorageOp::kClaim, 1'000'000);
  dispatcher_->add_queue("a", 10);
  for (int i = 0; i < 20; ++i) {
    SteadyTime next = dispatcher_->run_due(clock_.steady_now());
    ASSERT_NE(next, SteadyTime::max());
    clock_.advance(next - clock_.steady_now());
  }
  EXPECT_EQ(dispatcher_->total_in_flight(), 0u);
  EXPECT_EQ(claimed_.size(), 0u);
  // The backoff is capped: at most 5 s between tries.
  SteadyTime next = dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(next - clock_.steady_now(), 5000ms);
  storage_->clear_faults();
  clock_.advance(5000ms);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 10u);  // the engine-wide cap was never used up
}

// A claim applied by storage whose reply was lost: the dispatcher never saw
// those jobs, so it runs none of them and holds no permit or token for them.
// Nothing reports LEASE_LOST; the leases simply expire, and rescue makes the
// jobs claimable again, so none is lost.
TEST_F(DispatcherTest, ClaimWhoseReplyWasLostLeavesTheJobsToLeaseExpiry) {
  Dispatcher::Options o;
  o.lease = 1000ms;
  make({}, o);
  resolver_->set_overrides({RateLimitOverride{"q", RateLimit{0.001, 5}, 0}});
  enqueue("q", 5);
  storage_->drop_reply_next(StorageOp::kClaim);
  dispatcher_->add_queue("q", 10);
  SteadyTime next = dispatcher_->run_due(clock_.steady_now());
  EXPECT_TRUE(claimed_.empty());
  EXPECT_EQ(dispatcher_->total_in_flight(), 0u);
  EXPECT_EQ(storage_->inner().queue_stats(clock_.wall_now_us()).at(0).running, 5);
  // The retry finds nothing: the jobs are leased to the lost reply.
  clock_.advance(next - clock_.steady_now());
  next = dispatcher_->run_due(clock_.steady_now());
  EXPECT_TRUE(claimed_.empty());
  EXPECT_EQ(next - clock_.steady_now(), 1000ms);  // drained: the poll interval
  // The leases expire; rescue returns the jobs; the tokens were refunded.
  clock_.advance(1001ms);
  EXPECT_EQ(storage_->rescue_expired(clock_.wall_now_us(), 100).count, 5u);
  dispatcher_->wake("q");
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 5u);
  EXPECT_EQ(metrics_.queue("q").throttled.load(), 0u);
}

TEST_F(DispatcherTest, AHeldQueueClaimsNothingUntilTheHoldEndsAndStartsWithAnEmptyBucket) {
  EngineConfig engine;
  engine.rate_limit_rate_per_sec = 10;  // a token per 100 ms
  engine.rate_limit_burst = 5;
  make(engine);
  enqueue("api", 50);
  dispatcher_->add_queue("api", 100);
  dispatcher_->run_due(clock_.steady_now());
  ASSERT_EQ(claimed_.size(), 5u);  // the burst
  finish_all();
  // The downstream asks to wait 2 s.
  dispatcher_->hold("api", clock_.steady_now() + 2s);
  clock_.advance(1s);  // 10 tokens' worth of time, but held
  SteadyTime next = dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 0u);
  EXPECT_EQ(next, clock_.steady_now() + 1s) << "due exactly when the hold ends";
  clock_.advance(1s);
  dispatcher_->run_due(clock_.steady_now());
  // Held empty: nothing banked during the hold, so no burst at its end.
  EXPECT_EQ(claimed_.size(), 0u);
  clock_.advance(100ms);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 1u);
  // Resumed at half the rate it was refused at (its limit, 10/s): the next
  // job 200 ms later, not with the bucket's next token.
  finish_all();
  clock_.advance(100ms);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 0u);
  clock_.advance(100ms);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 1u);
}

// After a hold the queue resumes at a fraction of the rate it was refused
// at and climbs back, instead of sending every free worker at once into the
// downstream that refused it (a limiter that counts refusals never empties).
TEST_F(DispatcherTest, AnUnlimitedQueueResumesAtHalfWhatItWasSendingAndClimbsBack) {
  make();
  enqueue("api", 500);
  dispatcher_->add_queue("api", 50);
  dispatcher_->run_due(clock_.steady_now());
  ASSERT_EQ(claimed_.size(), 50u);  // 50 jobs/s over the last second
  finish_all();
  dispatcher_->hold("api", clock_.steady_now() + 1s);
  clock_.advance(1s);
  // Not every free worker at once: 25 jobs/s, a tenth of a second's worth.
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 2u);
  size_t claimed = claimed_.size();
  finish_all();
  for (int ms = 10; ms < 1000; ms += 10) {
    clock_.advance(10ms);
    dispatcher_->run_due(clock_.steady_now());
    claimed += claimed_.size();
    finish_all();
  }
  // 25 jobs/s doubling to 45 (90% of 50) in 0.85 s, then 0.5 more each
  // second: about 29 jobs in the first second, and the pace's burst (a tenth
  // of a second's worth) as it grows.
  EXPECT_GE(claimed, 28u);
  EXPECT_LE(claimed, 40u);
}

TEST_F(DispatcherTest, ARefusalWhileClimbingBackResumesFromHalfTheRateReached) {
  EngineConfig engine;
  engine.rate_limit_rate_per_sec = 100;
  engine.rate_limit_burst = 10;
  make(engine);
  enqueue("api", 500);
  dispatcher_->add_queue("api", 50);
  dispatcher_->run_due(clock_.steady_now());
  finish_all();
  dispatcher_->hold("api", clock_.steady_now() + 1s);
  clock_.advance(1s);
  dispatcher_->run_due(clock_.steady_now());  // resumes at 50/s
  finish_all();
  // Refused again at once: the next ramp starts at 25/s.
  dispatcher_->hold("api", clock_.steady_now() + 1s);
  clock_.advance(1s);
  size_t claimed = 0;
  for (int ms = 0; ms < 200; ms += 5) {
    dispatcher_->run_due(clock_.steady_now());
    claimed += claimed_.size();
    finish_all();
    clock_.advance(5ms);
  }
  // 200 ms at 25/s growing by 2^t: 2 at once and about 5.4 more (from 50/s
  // it would be 5 and 10.8 more).
  EXPECT_GE(claimed, 6u);
  EXPECT_LE(claimed, 9u);
}

TEST_F(DispatcherTest, ClearingAHoldWakesTheQueueAtOnce) {
  make();
  enqueue("api", 3);
  dispatcher_->add_queue("api", 10);
  dispatcher_->hold("api", clock_.steady_now() + 1h);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 0u);
  dispatcher_->clear_hold("api");
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 3u);
}

// Storage that reports delayed jobs coming due (CONVEYOR_CAP_NOTIFY_DUE):
// a drained queue waits for a notification, not for the poll interval.
class NotifiedPollTest : public DispatcherTest {
 protected:
  void make_notified() {
    Dispatcher::Options o;
    o.poll_interval = 1s;
    o.notified_poll = 60s;
    o.notified_due = [this] { return notified_.load(); };
    make({}, o);
  }
  // The delay until the dispatcher's next poll.
  std::chrono::nanoseconds next_poll() {
    return dispatcher_->run_due(clock_.steady_now()) - clock_.steady_now();
  }
  // Polls through the short polls after a wake; the delay to the next poll
  // once they are over.
  std::chrono::nanoseconds settle() {
    std::chrono::nanoseconds next = next_poll();
    for (int i = 0; i < 5 && next == 1s; ++i) {
      clock_.advance(1s);
      next = next_poll();
    }
    return next;
  }
  void enqueue_at(const std::string& queue, int64_t run_at_us) {
    NewJob j;
    j.queue = queue;
    j.kind = "noop";
    j.run_at_us = run_at_us;
    storage_->enqueue(std::vector<NewJob>{j}, clock_.wall_now_us());
  }
  std::atomic<bool> notified_{true};
};

TEST_F(NotifiedPollTest, ADrainedQueueIsPolledRarelyWhileStorageReportsDueJobs) {
  make_notified();
  enqueue("mail", 3);
  dispatcher_->add_queue("mail", 10);
  // Woken (new): claimed, then twice more a poll interval apart, in case
  // storage did not show everything to the first claim.
  EXPECT_EQ(next_poll(), 1s);
  EXPECT_EQ(claimed_.size(), 3u);
  clock_.advance(1s);
  EXPECT_EQ(next_poll(), 1s);
  clock_.advance(1s);
  const auto next = next_poll();
  // Then the rare poll, jittered down to half so queues drained together
  // spread their polls.
  EXPECT_GE(next, 30s);
  EXPECT_LE(next, 60s);
  EXPECT_EQ(storage_->calls(StorageOp::kClaim), 3u);
  // A notification (new jobs) wakes it at once.
  enqueue("mail", 2);
  dispatcher_->wake("mail");
  EXPECT_EQ(next_poll(), 1s);
  EXPECT_EQ(claimed_.size(), 5u);
  EXPECT_GE(settle(), 30s);
  EXPECT_EQ(storage_->calls(StorageOp::kClaim), 6u);
}

// Under the engine's sweep (Options::swept) a drained queue has no poll of
// its own: one job_counts call for every queue wakes those with pending jobs
// that no notification announced, and only those.
TEST_F(NotifiedPollTest, UnderTheSweepADrainedQueueWaitsForTheSweep) {
  Dispatcher::Options o;
  o.poll_interval = 1s;
  o.notified_poll = 60s;
  o.notified_due = [this] { return notified_.load(); };
  o.swept = true;
  make({}, o);
  enqueue("mail", 3);
  dispatcher_->add_queue("mail", 10);
  dispatcher_->add_queue("sms", 10);
  EXPECT_GE(settle(), 1h) << "a drained queue polled on its own";
  EXPECT_EQ(claimed_.size(), 3u);
  const uint64_t claims = storage_->calls(StorageOp::kClaim);
  // Jobs made ready with no notification (one was lost): nothing claims them
  // however long the queue waits...
  enqueue("mail", 2);
  clock_.advance(2h);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 3u);
  // ...until the sweep, which wakes mail and leaves the empty sms alone.
  EXPECT_EQ(wake_queues_with_pending_jobs(*storage_, *dispatcher_, clock_), 1u);
  EXPECT_EQ(next_poll(), 1s);
  EXPECT_EQ(claimed_.size(), 5u);
  EXPECT_EQ(storage_->calls(StorageOp::kClaim), claims + 1) << "sms was claimed too";
  // A paused queue's pending jobs wake nothing.
  enqueue("sms", 1);
  storage_->set_queue_paused("sms", true, clock_.wall_now_us());
  EXPECT_EQ(wake_queues_with_pending_jobs(*storage_, *dispatcher_, clock_), 0u);
}

TEST_F(NotifiedPollTest, WithoutWorkingNotificationsADrainedQueueKeepsThePollInterval) {
  make_notified();
  notified_ = false;  // e.g. the listen connection failed a moment ago
  enqueue("mail", 3);
  dispatcher_->add_queue("mail", 10);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(next_poll(), 1s);
    clock_.advance(1s);
  }
  // Trusted again: after the short polls a wake owes, the rare poll.
  notified_ = true;
  EXPECT_GE(settle(), 30s);
}

TEST_F(NotifiedPollTest, ARetryThisProcessScheduledIsClaimedWhenDue) {
  make_notified();
  const int64_t retry_at = clock_.wall_now_us() + 10'000'000;
  enqueue_at("mail", retry_at);  // as fail() leaves a job that retries in 10 s
  dispatcher_->add_queue("mail", 10);
  EXPECT_GE(settle(), 30s);  // nothing ready; 2 s have passed
  dispatcher_->wake_at("mail", retry_at);
  EXPECT_EQ(next_poll(), 8s);
  clock_.advance(8s);
  // Claimed at its time; for one poll interval after it the queue keeps the
  // short poll (our clocks may disagree a little about when it is due).
  EXPECT_EQ(next_poll(), 1s);
  EXPECT_EQ(claimed_.size(), 1u);
  clock_.advance(1s);
  EXPECT_EQ(next_poll(), 1s);
  clock_.advance(1s);
  EXPECT_GE(next_poll(), 30s) << "the time is forgotten once a poll interval past";
}

TEST_F(NotifiedPollTest, TheEarliestOfSeveralDueTimesComesFirst) {
  make_notified();
  dispatcher_->add_queue("mail", 10);
  EXPECT_GE(settle(), 30s);
  const int64_t now = clock_.wall_now_us();
  dispatcher_->wake_at("mail", now + 20'000'000);
  dispatcher_->wake_at("mail", now + 3'000'000);
  EXPECT_EQ(next_poll(), 3s);
  clock_.advance(3s);
  EXPECT_EQ(next_poll(), 1s);
  clock_.advance(1100ms);
  // 3 s is forgotten; 20 s is still owed and nearer than the rare poll.
  EXPECT_EQ(next_poll(), 20s - 4100ms);
}

TEST_F(NotifiedPollTest, DueTimesPastTheBoundKeepTheShortPollUntilTheLastHasPassed) {
  make_notified();
  dispatcher_->add_queue("mail", 10);
  EXPECT_GE(settle(), 30s);
  const int64_t now = clock_.wall_now_us();
  // One more than the runner remembers, a millisecond apart from 10 s on:
  // 10.000 to 10.063 s are kept, 10.064 s is dropped.
  for (int i = 0; i <= 64; ++i) dispatcher_->wake_at("mail", now + 10'000'000 + i * 1000);
  EXPECT_EQ(next_poll(), 10s);
  clock_.advance(10s);
  EXPECT_EQ(next_poll(), 1s);
  // Every kept time is a poll interval past; the dropped one is not yet.
  clock_.advance(1063500us);
  EXPECT_EQ(next_poll(), 1s);
  clock_.advance(1s);
  EXPECT_GE(next_poll(), 30s);
}

}  // namespace
}  // namespace conveyor
