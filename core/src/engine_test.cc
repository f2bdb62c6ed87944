// The engine's wiring under storage faults: an engine built on a
// FaultInjectingStorage over the in-memory example plugin (loaded through the
// real loader; no database). Real time, with short leases and intervals and
// generous bounds: these check what happens, not how fast.
#include <conveyor/internal/engine_internals.hpp>
#include "testing/fault_injecting_storage.hpp"
#include "testing/sync.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::FaultInjectingStorage;
using testing::Gate;
using testing::StorageOp;

class EngineFaultTest : public ::testing::Test {
 protected:
  EngineFaultTest() {
    config.engine.poll_interval_ms = 20;
    config.engine.lease_ms = 900;  // heartbeats every 300 ms
    config.engine.shutdown_timeout_ms = 200;
    config.engine.retry_backoff_base_ms = 10;
  }
  std::unique_ptr<Engine> make() {
    return EngineInternals::make(config, SystemClock::instance(), storage);
  }
  JobState state_of(Engine& e, int64_t id) { return e.get_job(id).value().state; }

  std::shared_ptr<FaultInjectingStorage> storage =
      std::make_shared<FaultInjectingStorage>(testing::open_memory_storage());
  Config config;
};

TEST_F(EngineFaultTest, HeartbeatFailuresDoNotLoseARunningJob) {
  auto engine = make();
  Gate release;
  std::atomic<int> runs{0};
  engine->register_handler("slow", [&](const Job&) {
    ++runs;
    release.pass();
  });
  storage->fail_next(StorageOp::kExtendLeases, 1);
  const int64_t id = engine->enqueue("q", "slow");
  engine->start();
  // One heartbeat fails, the next ones extend the lease before it expires.
  ASSERT_TRUE(eventually([&] { return storage->calls(StorageOp::kExtendLeases) >= 3; }));
  EXPECT_EQ(storage->faults(StorageOp::kExtendLeases), 1u);
  release.open();
  ASSERT_TRUE(eventually([&] { return state_of(*engine, id) == JobState::kCompleted; }));
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(engine->get_job(id)->attempt, 1);
  EXPECT_FALSE(engine->storage_failure());
}

TEST_F(EngineFaultTest, RescueRunsTheJobOfAWorkerThatDied) {
  config.engine.rescue_interval_ms = 50;
  auto engine = make();
  std::atomic<int> runs{0};
  engine->register_handler("k", [&](const Job&) { ++runs; });
  const int64_t id = engine->enqueue("q", "k");
  // Another worker claims it and dies: its lease simply expires.
  const int64_t now = SystemClock::instance().wall_now_us();
  ASSERT_EQ(storage->inner().claim("q", 1, 42, now, now + 100'000).size(), 1u);
  engine->start();
  ASSERT_TRUE(eventually([&] { return state_of(*engine, id) == JobState::kCompleted; }));
  EXPECT_EQ(runs.load(), 1);
  EXPECT_GE(storage->calls(StorageOp::kRescueExpired), 1u);
}

// Storage down for longer than a lease while finished jobs' outcomes wait:
// when it is back, the outcomes are recorded and nothing is rescued and run
// again (the rescue step extends this process's leases, finished ones too,
// before it rescues). Before, finished jobs' leases were not extended, so a
// rescue that came before the completer's next try ran them again.
TEST_F(EngineFaultTest, AnOutageLongerThanALeaseRunsNoFinishedJobAgain) {
  config.engine.lease_ms = 300;
  config.engine.rescue_interval_ms = 20;
  auto engine = make();
  std::atomic<bool> down{false};
  const auto outage = [&] {
    if (down) throw StorageError(CONVEYOR_E_UNAVAILABLE, "storage is down (test)");
  };
  for (StorageOp op : {StorageOp::kComplete, StorageOp::kExtendLeases, StorageOp::kRescueExpired,
                       StorageOp::kClaim})
    storage->set_hook(op, outage);
  std::mutex mu;
  std::map<int64_t, int> runs;
  engine->register_handler("k", [&](const Job& job) {
    std::lock_guard lock(mu);
    ++runs[job.id];
    down = true;  // the first job's outcome meets the outage
  });
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(engine->enqueue("q", "k"));
  engine->start();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mu);
    return !runs.empty();
  }));
  // Three leases long: every lease taken before the outage has expired.
  std::this_thread::sleep_for(900ms);
  down = false;
  ASSERT_TRUE(eventually([&] {
    for (int64_t id : ids)
      if (state_of(*engine, id) != JobState::kCompleted) return false;
    return true;
  }));
  engine->stop();
  std::lock_guard lock(mu);
  for (int64_t id : ids) EXPECT_EQ(runs[id], 1) << "job " << id << " ran again";
}

TEST_F(EngineFaultTest, AReplyLostAfterCommitRecordsTheOutcomeOnce) {
  auto engine = make();
  std::atomic<int> runs{0};
  engine->register_handler("k", [&](const Job&) { ++runs; });
  storage->drop_reply_next(StorageOp::kComplete, 1);
  const int64_t id = engine->enqueue("q", "k");
  engine->start();
  ASSERT_TRUE(eventually([&] { return state_of(*engine, id) == JobState::kCompleted; }));
  // The retry of the lost reply was refused, not applied twice, and the job
  // never ran again.
  ASSERT_TRUE(eventually([&] { return storage->calls(StorageOp::kComplete) >= 2; }));
  engine->stop();
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(engine->get_job(id)->attempt, 1);
}

TEST_F(EngineFaultTest, StopReleasesTheLeasesOfHandlersThatIgnoreTheTimeout) {
  config.engine.max_workers = 3;
  auto engine = make();
  Gate release;
  std::atomic<int> started{0};
  std::atomic<int> returned{0};
  engine->register_handler("stuck", [&](const Job&) {
    ++started;
    release.pass();
    ++returned;
  });
  std::vector<int64_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(engine->enqueue("q", "stuck"));
  engine->start();
  ASSERT_TRUE(eventually([&] { return started.load() == 3; }));
  // Every handler ignores the timeout: the three leases go back, and no
  // thread of the engine outlives stop() but the stuck handlers'.
  EXPECT_EQ(engine->stop(), 3u);
  for (int64_t id : ids) EXPECT_EQ(state_of(*engine, id), JobState::kAvailable) << id;
  // The engine is gone before the abandoned handlers return: they must touch
  // nothing of it (AddressSanitizer reports it if it does).
  engine.reset();
  release.open();
  ASSERT_TRUE(eventually([&] { return returned.load() == 3; }));
  EXPECT_EQ(storage->calls(StorageOp::kComplete), 0u);
}

TEST_F(EngineFaultTest, StopReturnsWhenOutcomesCannotBeRecordedAndTheJobRunsAgainLater) {
  config.engine.rescue_interval_ms = 50;
  auto engine = make();
  std::atomic<int> runs{0};
  engine->register_handler("k", [&](const Job&) { ++runs; });
  storage->fail_next(StorageOp::kComplete, 1'000'000);
  const int64_t id = engine->enqueue("q", "k");
  engine->start();
  ASSERT_TRUE(eventually([&] { return runs.load() == 1; }));
  const auto before = std::chrono::steady_clock::now();
  engine->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - before, 10s);
  // Not recorded: the job is not completed (its lease runs out, or has).
  EXPECT_NE(state_of(*engine, id), JobState::kCompleted);
  engine.reset();
  // Storage recovers; another engine rescues the job once the lease expires.
  storage->clear_faults();
  auto second = make();
  second->register_handler("k", [&](const Job&) { ++runs; });
  second->start();
  ASSERT_TRUE(eventually([&] { return state_of(*second, id) == JobState::kCompleted; }));
  EXPECT_EQ(runs.load(), 2);
}

TEST_F(EngineFaultTest, StorageThatKeepsFailingForGoodIsDeclaredBroken) {
  auto engine = make();
  for (StorageOp op : {StorageOp::kClaim, StorageOp::kChangeMarker, StorageOp::kListQueues,
                       StorageOp::kRescueExpired, StorageOp::kPurgeFinished})
    storage->fail_next(op, 1'000'000, CONVEYOR_E_INTERNAL);
  engine->enqueue("q", "k");
  engine->start();
  ASSERT_TRUE(eventually([&] { return engine->storage_failure().has_value(); }, 30s));
  EXPECT_NE(engine->storage_failure()->find("retrying cannot fix"), std::string::npos);
}

TEST_F(EngineFaultTest, AStorageOutageIsWaitedOutNotDeclaredBroken) {
  config.engine.rescue_interval_ms = 50;
  auto engine = make();
  std::atomic<int> runs{0};
  engine->register_handler("k", [&](const Job&) { ++runs; });
  // UNAVAILABLE, as from a database restarting, for longer than the storage
  // health's budget of errors that retrying cannot fix (10 in a row, 5 s).
  storage->fail_next(StorageOp::kClaim, 5);
  storage->fail_next(StorageOp::kChangeMarker, 30);  // every 250 ms: 7.5 s
  const int64_t id = engine->enqueue("q", "k");
  engine->start();
  ASSERT_TRUE(eventually([&] { return state_of(*engine, id) == JobState::kCompleted; }, 60s));
  ASSERT_TRUE(eventually([&] { return storage->faults(StorageOp::kChangeMarker) == 30; }, 60s));
  EXPECT_EQ(runs.load(), 1);
  EXPECT_FALSE(engine->storage_failure());
}

// A queue whose claims are slow: its first claim takes longer than the
// engine's slow-claim threshold (20 ms), every later one is held in storage
// until the test opens the gate.
class SlowClaimTest : public EngineFaultTest {
 protected:
  SlowClaimTest() {
    // Claim order across keys: one storage call per claim, the one the hook
    // holds (a keyed claim may list the keys first).
    config.queues["slow"].fairness = Fairness::kFifo;
    storage->set_claim_hook([this](std::string_view queue) {
      if (queue != "slow") return;
      if (slow_claims.fetch_add(1) == 0) {
        std::this_thread::sleep_for(50ms);  // the claim that is slow
        return;
      }
      held.pass();
    });
  }
  ~SlowClaimTest() override { held.open(); }

  std::atomic<int> slow_claims{0};
  Gate held;
};

TEST_F(SlowClaimTest, AClaimHeldInStorageDoesNotHoldUpOtherQueues) {
  auto engine = make();
  std::atomic<int> ran_a{0}, ran_b{0}, ran_fast{0};
  engine->register_handler("a", [&](const Job&) { ++ran_a; });
  engine->register_handler("b", [&](const Job&) { ++ran_b; });
  engine->register_handler("fast", [&](const Job&) { ++ran_fast; });
  const int64_t a = engine->enqueue("slow", "a");
  engine->start();
  // The first claim, on the dispatcher thread, took 50 ms: the queue's
  // claims run elsewhere from now on.
  ASSERT_TRUE(eventually([&] { return ran_a.load() == 1; }));
  const int64_t b = engine->enqueue("slow", "b");
  ASSERT_TRUE(eventually([&] { return slow_claims.load() >= 2; }))
      << "a second claim of the slow queue is held in storage";
  // While it is held, another queue's job is claimed and runs.
  const int64_t fast = engine->enqueue("other", "fast");
  ASSERT_TRUE(eventually([&] { return ran_fast.load() == 1; }))
      << "the other queue waited for the held claim";
  EXPECT_EQ(ran_b.load(), 0);
  held.open();
  ASSERT_TRUE(eventually([&] { return state_of(*engine, b) == JobState::kCompleted; }));
  EXPECT_EQ(state_of(*engine, a), JobState::kCompleted);
  EXPECT_EQ(state_of(*engine, fast), JobState::kCompleted);
  engine->stop();
  EXPECT_EQ(ran_a.load(), 1);
  EXPECT_EQ(ran_b.load(), 1);
  EXPECT_EQ(ran_fast.load(), 1);
  EXPECT_EQ(EngineInternals::slots_in_use(*engine), 0u) << "every reserved permit was freed";
}

// Two slow queues do not wait for each other: each claim held in storage
// has a slow-claim thread of its own, so both are held at the same time.
TEST_F(EngineFaultTest, TwoSlowQueuesClaimAtTheSameTime) {
  std::atomic<int> claims_a{0}, claims_b{0}, held_now{0};
  Gate both;
  // Claim order across keys: one storage call per claim (SlowClaimTest).
  for (const char* q : {"slow-a", "slow-b"}) config.queues[q].fairness = Fairness::kFifo;
  storage->set_claim_hook([&](std::string_view queue) {
    std::atomic<int>* claims = queue == "slow-a"   ? &claims_a
                               : queue == "slow-b" ? &claims_b
                                                   : nullptr;
    if (claims == nullptr) return;
    if (claims->fetch_add(1) == 0) {
      std::this_thread::sleep_for(50ms);  // the claim that makes the queue slow
      return;
    }
    ++held_now;
    both.pass();
  });
  auto engine = make();
  struct OpenAtExit {
    Gate& gate;
    ~OpenAtExit() { gate.open(); }
  } open_at_exit{both};  // before the engine stops, even when an assertion fails
  std::atomic<int> ran{0};
  engine->register_handler("k", [&](const Job&) { ++ran; });
  engine->enqueue("slow-a", "k");
  engine->enqueue("slow-b", "k");
  engine->start();
  ASSERT_TRUE(eventually([&] { return ran.load() == 2; }));
  const int64_t a = engine->enqueue("slow-a", "k");
  const int64_t b = engine->enqueue("slow-b", "k");
  ASSERT_TRUE(eventually([&] { return held_now.load() == 2; }))
      << "one slow queue's claim waited for the other's (" << held_now.load() << " held)";
  both.open();
  ASSERT_TRUE(eventually([&] { return state_of(*engine, a) == JobState::kCompleted; }));
  ASSERT_TRUE(eventually([&] { return state_of(*engine, b) == JobState::kCompleted; }));
  engine->stop();
  EXPECT_EQ(ran.load(), 4);
  EXPECT_EQ(EngineInternals::slots_in_use(*engine), 0u) << "every reserved permit was freed";
}

TEST_F(SlowClaimTest, StopWithAClaimHeldLeavesNoJobRunning) {
  auto engine = make();
  std::atomic<int> ran{0};
  engine->register_handler("a", [&](const Job&) { ++ran; });
  engine->enqueue("slow", "a");
  engine->start();
  ASSERT_TRUE(eventually([&] { return ran.load() == 1; }));
  const int64_t b = engine->enqueue("slow", "a");
  ASSERT_TRUE(eventually([&] { return slow_claims.load() >= 2; }));
  // Stop while the claim is held; it finishes once the gate opens, and the
  // job it took is either run or given back, never left under its lease.
  std::thread stopping([&] { engine->stop(); });
  held.open();
  stopping.join();
  const JobState s = storage->inner().get_job(b, SystemClock::instance().wall_now_us())->state;
  EXPECT_TRUE(s == JobState::kCompleted || s == JobState::kAvailable) << static_cast<int>(s);
  EXPECT_EQ(ran.load(), s == JobState::kCompleted ? 2 : 1);
}

}  // namespace
}  // namespace conveyor
