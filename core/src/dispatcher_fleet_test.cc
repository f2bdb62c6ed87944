// The dispatcher with a fleet-scoped limit and with job costs, against the
// real SQLite plugin: two dispatchers on two handles of one database file
// stand for two processes. A ManualClock drives both.
#include "dispatcher.hpp"

#include <conveyor/config.hpp>
#include <conveyor/host/plugin_loader.hpp>
#include <conveyor/internal/storage.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

struct Process {
  std::shared_ptr<Storage> storage;
  LimitResolver limits{EngineConfig{}, {}};
  Metrics metrics;
  std::unique_ptr<Dispatcher> dispatcher;
  std::vector<Job> claimed;
};

class DispatcherFleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("conveyor-dispatcher-fleet-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    processes_.clear();
    fs::remove_all(dir_);
  }

  Process& start_process(const RateLimit& limit) {
    static const auto plugin =
        load_plugin(fs::path(CONVEYOR_TEST_PLUGIN_DIR) / "libconveyor-sqlite.so");
    auto p = std::make_unique<Process>();
    p->storage = Storage::open(plugin, {{"path", (dir_ / "fleet.db").string()}});
    p->limits.set_overrides({RateLimitOverride{"q", limit, 0}});
    Dispatcher::Options o;
    o.claim_batch_max = 1000;
    o.max_in_flight = 1'000'000;  // jobs are never finished here
    Process* raw = p.get();
    p->dispatcher = std::make_unique<Dispatcher>(*p->storage, p->limits, clock_, p->metrics, o,
                                                 [raw](QueueRunner&, std::vector<Job>&& jobs) {
                                                   for (Job& j : jobs)
                                                     raw->claimed.push_back(std::move(j));
                                                 });
    p->dispatcher->add_queue("q", 100000);
    processes_.push_back(std::move(p));
    return *processes_.back();
  }

  void enqueue(int n, int32_t cost = 1) {
    std::vector<NewJob> jobs(n);
    for (auto& j : jobs) {
      j.queue = "q";
      j.kind = "noop";
      j.cost = cost;
      j.run_at_us = clock_.wall_now_us();
    }
    processes_.front()->storage->enqueue(jobs, clock_.wall_now_us());
  }

  size_t claimed() const {
    size_t n = 0;
    for (const auto& p : processes_) n += p->claimed.size();
    return n;
  }

  // Runs every process's dispatcher, in turn, for seconds of simulated
  // time; checks after each pass that the fleet's claims stay within
  // burst + rate * t (bound_rate, bound_burst in jobs).
  void run_for(double seconds, double bound_rate, double bound_burst) {
    const SteadyTime start = clock_.steady_now();
    const SteadyTime end = start + std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9));
    std::vector<size_t> order(processes_.size());
    std::iota(order.begin(), order.end(), 0);
    std::mt19937 rng(11);
    while (clock_.steady_now() < end) {
      SteadyTime next = SteadyTime::max();
      // Who polls first in an instant varies, as it does between real processes.
      std::shuffle(order.begin(), order.end(), rng);
      for (size_t i : order)
        next = std::min(next, processes_[i]->dispatcher->run_due(clock_.steady_now()));
      const double t = std::chrono::duration<double>(clock_.steady_now() - start).count();
      ASSERT_LE(static_cast<double>(claimed()), bound_burst + bound_rate * t + 1e-9)
          << "at t = " << t << " s";
      // Processes poll at their own times: never all in the same instant.
      clock_.advance(std::max<std::chrono::nanoseconds>(
          std::min<std::chrono::nanoseconds>(next - clock_.steady_now(), 50ms), 700us));
    }
  }

  fs::path dir_;
  ManualClock clock_;
  std::vector<std::unique_ptr<Process>> processes_;
};

TEST_F(DispatcherFleetTest, TwoProcessesWithAFleetLimitClaimAtTheLimitTogether) {
  const RateLimit limit{50, 10, LimitScope::kFleet};
  start_process(limit);
  start_process(limit);
  enqueue(2000);
  run_for(10, 50, 10);
  EXPECT_GE(static_cast<double>(claimed()), 10 + 50 * 10 - 3.0);
  EXPECT_GT(processes_[0]->claimed.size(), 50u) << "both processes got a share";
  EXPECT_GT(processes_[1]->claimed.size(), 50u);
  const QueueCounters& c = processes_[0]->metrics.queue("q");
  EXPECT_GT(c.fleet_swaps.load(), 0u);
  EXPECT_LE(c.fleet_swaps.load(), 3 * c.claims.load() + 3) << "a few calls per claim, not per job";
}

TEST_F(DispatcherFleetTest, WithScopeProcessEachProcessHasItsOwnBucket) {
  const RateLimit limit{50, 10, LimitScope::kProcess};
  start_process(limit);
  start_process(limit);
  enqueue(2000);
  run_for(10, 100, 20);
  EXPECT_GE(static_cast<double>(claimed()), 20 + 100 * 10 - 3.0) << "twice the limit";
  EXPECT_EQ(processes_[0]->metrics.queue("q").fleet_swaps.load(), 0u);
}

TEST_F(DispatcherFleetTest, JobsOfCostFiveOnAFiftyPerSecondLimitStartAtTenPerSecond) {
  for (LimitScope scope : {LimitScope::kProcess, LimitScope::kFleet}) {
    SCOPED_TRACE(to_string(scope));
    TearDown();
    SetUp();
    start_process(RateLimit{50, 10, scope});
    enqueue(500, 5);
    run_for(10, 10, 2);
    EXPECT_GE(static_cast<double>(claimed()), 2 + 10 * 10 - 1.0);
    for (const Job& j : processes_[0]->claimed) ASSERT_EQ(j.cost, 5);
  }
}

TEST_F(DispatcherFleetTest, MixedCostsKeepTheTokenBoundAndGiveBackWhatDoesNotFit) {
  Process& p = start_process(RateLimit{100, 20, LimitScope::kProcess});
  enqueue(50, 1);
  enqueue(50, 10);
  enqueue(50, 1);
  // The first claim takes 20 tokens for 20 jobs of cost 1; later claims
  // find the costly ones and wait for their tokens.
  uint64_t tokens = 0;
  const SteadyTime start = clock_.steady_now();
  size_t seen = 0;
  while (clock_.steady_now() < start + 20s) {
    p.dispatcher->run_due(clock_.steady_now());
    for (; seen < p.claimed.size(); ++seen) tokens += static_cast<uint64_t>(p.claimed[seen].cost);
    const double t = std::chrono::duration<double>(clock_.steady_now() - start).count();
    ASSERT_LE(static_cast<double>(tokens), 20 + 100 * t + 1e-9) << "at t = " << t;
    clock_.advance(5ms);
  }
  EXPECT_EQ(p.claimed.size(), 150u) << "every job ran, none lost to a give-back";
  // Claim order is kept: the give-back returns a job to its place.
  for (size_t i = 1; i < p.claimed.size(); ++i) ASSERT_LT(p.claimed[i - 1].id, p.claimed[i].id);
}

// The defect this guards against: a burst lowered below the cost of jobs
// already enqueued (2 < 5 on a 10/s limit) made each job take a full bucket
// (2 tokens), so jobs of cost 5 started at 5/s: 25 units/s. A job dearer than
// the burst waits for a full bucket and takes its whole cost, leaving the
// bucket in debt: 2 jobs/s, and units taken in any window of t seconds from
// the change stay within max(burst, cost) + rate * t = 5 + 10 * t.
TEST_F(DispatcherFleetTest, JobsDearerThanALoweredBurstPayTheirWholeCost) {
  for (LimitScope scope : {LimitScope::kProcess, LimitScope::kFleet}) {
    SCOPED_TRACE(to_string(scope));
    TearDown();
    SetUp();
    Process& p = start_process(RateLimit{10, 10, scope});
    enqueue(200, 5);  // cost 5 <= burst 10: enqueue takes them
    p.dispatcher->run_due(clock_.steady_now());
    const size_t before = p.claimed.size();
    ASSERT_EQ(before, 2u) << "the full bucket of 10: two jobs of 5";
    p.limits.set_overrides({RateLimitOverride{"q", RateLimit{10, 2, scope}, 0}});
    p.dispatcher->wake("q");
    const SteadyTime start = clock_.steady_now();
    const SteadyTime end = start + 30s;
    std::vector<int> per_second(30, 0);
    size_t seen = before;
    uint64_t units = 0;
    while (clock_.steady_now() < end) {
      const SteadyTime next = p.dispatcher->run_due(clock_.steady_now());
      const double t = std::chrono::duration<double>(clock_.steady_now() - start).count();
      for (; seen < p.claimed.size(); ++seen) {
        units += static_cast<uint64_t>(p.claimed[seen].cost);
        ++per_second.at(static_cast<size_t>(t));
      }
      ASSERT_LE(static_cast<double>(units), 5 + 10 * t + 1e-9) << "at t = " << t;
      clock_.advance(std::max<std::chrono::nanoseconds>(
          std::min<std::chrono::nanoseconds>(next - clock_.steady_now(), 50ms), 700us));
    }
    const size_t jobs = p.claimed.size() - before;
    EXPECT_GE(jobs, 2u * 30 - 2) << "not starved: about rate / cost = 2 jobs a second";
    EXPECT_LE(jobs, 1u + 2 * 30);
    for (size_t s = 1; s < per_second.size(); ++s) {
      EXPECT_GE(per_second[s], 1) << "second " << s;
      EXPECT_LE(per_second[s], 3) << "second " << s;
    }
  }
}

// A job dearer than the burst among cheap ones (the burst lowered after it
// was enqueued) is not starved by them: it goes back once, keeping its place,
// the unit's next take waits for a full bucket and takes its whole cost, and
// it starts in claim order; the units taken stay within
// max(burst, cost) + rate * t.
TEST_F(DispatcherFleetTest, AJobDearerThanTheBurstStartsInItsTurnAmongCheapOnes) {
  for (LimitScope scope : {LimitScope::kProcess, LimitScope::kFleet}) {
    SCOPED_TRACE(to_string(scope));
    TearDown();
    SetUp();
    Process& p = start_process(RateLimit{10, 2, scope});
    enqueue(30, 1);
    enqueue(1, 7);
    enqueue(30, 1);
    uint64_t units = 0;
    const SteadyTime start = clock_.steady_now();
    size_t seen = 0;
    while (clock_.steady_now() < start + 20s) {
      p.dispatcher->run_due(clock_.steady_now());
      for (; seen < p.claimed.size(); ++seen) units += static_cast<uint64_t>(p.claimed[seen].cost);
      const double t = std::chrono::duration<double>(clock_.steady_now() - start).count();
      ASSERT_LE(static_cast<double>(units), 7 + 10 * t + 1e-9) << "at t = " << t;
      clock_.advance(5ms);
    }
    ASSERT_EQ(p.claimed.size(), 61u) << "every job ran, the costly one too";
    for (size_t i = 1; i < p.claimed.size(); ++i) ASSERT_LT(p.claimed[i - 1].id, p.claimed[i].id);
  }
}

}  // namespace
}  // namespace conveyor
