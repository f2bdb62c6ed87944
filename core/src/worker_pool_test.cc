// WorkerPool: everything submitted runs, within the thread cap, from many
// submitters; shutdown drops what has not started, waits for what has, and
// leaves a stuck task behind safely.
#include "worker_pool.hpp"

#include "testing/sync.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <latch>
#include <memory>
#include <mutex>
#include <thread>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::Gate;

// Counts tasks inside run() and the most there ever were at once.
struct Occupancy {
  std::atomic<int> now{0}, peak{0};
  void enter() {
    const int n = now.fetch_add(1) + 1;
    int p = peak.load();
    while (n > p && !peak.compare_exchange_weak(p, n)) {
    }
  }
  void leave() { now.fetch_sub(1); }
  void wait_for(int n) const {
    while (now.load() < n) std::this_thread::yield();
  }
};

TEST(WorkerPoolTest, RunsEverythingSubmitted) {
  WorkerPool pool(4);
  constexpr int kSingles = 1000, kBatches = 100, kPerBatch = 50;
  std::atomic<int> ran{0};
  std::latch all(kSingles + kBatches * kPerBatch);
  auto task = [&] {
    return WorkerPool::Task{[&] {
                              ran.fetch_add(1);
                              all.count_down();
                            },
                            [] { ADD_FAILURE() << "a task was dropped"; }};
  };
  for (int i = 0; i < kSingles; ++i) pool.submit(task());
  for (int b = 0; b < kBatches; ++b) {
    std::vector<WorkerPool::Task> batch;
    for (int i = 0; i < kPerBatch; ++i) batch.push_back(task());
    pool.submit(std::move(batch));
  }
  all.wait();
  EXPECT_EQ(ran.load(), kSingles + kBatches * kPerBatch);
  EXPECT_LE(pool.threads(), 4u);
  EXPECT_GE(pool.threads(), 1u);
  EXPECT_EQ(pool.shutdown(Clock::now() + 10s), 0u);
}

TEST(WorkerPoolTest, NeverRunsMoreThanMaxThreadsAtOnce) {
  WorkerPool pool(3);
  Occupancy occ;
  Gate gate;
  std::latch all(10);
  std::vector<WorkerPool::Task> tasks;
  for (int i = 0; i < 10; ++i)
    tasks.push_back({[&] {
                       occ.enter();
                       gate.pass();
                       occ.leave();
                       all.count_down();
                     },
                     {}});
  pool.submit(std::move(tasks));
  occ.wait_for(3);  // the cap is reached; the other seven are queued
  EXPECT_EQ(pool.threads(), 3u);
  gate.open();
  all.wait();
  EXPECT_EQ(occ.peak.load(), 3);
  EXPECT_EQ(pool.threads(), 3u);
}

TEST(WorkerPoolTest, ShutdownDropsQueuedTasksAndWaitsForRunningOnes) {
  WorkerPool pool(1);
  Occupancy occ;
  Gate gate;
  std::atomic<bool> first_returned{false};
  std::atomic<int> dropped{0}, ran_queued{0};
  pool.submit({[&] {
                 occ.enter();
                 gate.pass();
                 first_returned = true;
               },
               [] { ADD_FAILURE() << "the running task was dropped"; }});
  occ.wait_for(1);
  std::vector<WorkerPool::Task> queued;
  for (int i = 0; i < 5; ++i)
    queued.push_back({[&] { ran_queued.fetch_add(1); },
                      [&, caller = std::this_thread::get_id()] {
                        EXPECT_EQ(std::this_thread::get_id(), caller);
                        // The running task may finish only once shutdown
                        // has begun: then nothing queued may start.
                        if (dropped.fetch_add(1) == 4) gate.open();
                      }});
  queued.push_back({[&] { ran_queued.fetch_add(1); }, {}});  // no drop: fine
  pool.submit(std::move(queued));
  EXPECT_EQ(pool.shutdown(Clock::time_point::max()), 0u);
  EXPECT_TRUE(first_returned.load());  // waited for
  EXPECT_EQ(dropped.load(), 5);
  EXPECT_EQ(ran_queued.load(), 0);
  // Idempotent, and later submits are dropped at once.
  EXPECT_EQ(pool.shutdown(Clock::now()), 0u);
  bool late_dropped = false;
  pool.submit({[] { ADD_FAILURE() << "ran after shutdown"; }, [&] { late_dropped = true; }});
  EXPECT_TRUE(late_dropped);
}

TEST(WorkerPoolTest, DestructorShutsDownTheSameWay) {
  Gate gate;
  std::atomic<bool> first_returned{false};
  std::atomic<bool> second_ran{false}, second_dropped{false};
  {
    WorkerPool pool(1);
    Occupancy occ;
    pool.submit({[&] {
                   occ.enter();
                   gate.pass();
                   first_returned = true;
                 },
                 {}});
    occ.wait_for(1);
    pool.submit({[&] { second_ran = true; },
                 [&] {
                   second_dropped = true;
                   gate.open();
                 }});
  }
  EXPECT_TRUE(first_returned.load());
  EXPECT_TRUE(second_dropped.load());
  EXPECT_FALSE(second_ran.load());
}

TEST(WorkerPoolTest, ShutdownReturnsTheStuckCountAtTheDeadlineAndLeavesThemSafely) {
  // Shared with the stuck tasks, which outlive the pool.
  struct Stuck {
    Gate gate;
    Occupancy occ;
    std::latch finished{2};
  };
  auto stuck = std::make_shared<Stuck>();
  {
    WorkerPool pool(3);
    for (int i = 0; i < 2; ++i)
      pool.submit({[stuck] {
                     stuck->occ.enter();
                     stuck->gate.pass();
                     stuck->finished.count_down();
                   },
                   {}});
    std::latch quick(1);
    pool.submit({[&] { quick.count_down(); }, {}});
    quick.wait();
    stuck->occ.wait_for(2);
    const auto start = Clock::now();
    EXPECT_EQ(pool.shutdown(start + 50ms), 2u);
    EXPECT_GE(Clock::now() - start, 50ms);
    EXPECT_EQ(pool.shutdown(Clock::now() + 1ms), 2u);  // still stuck
  }  // the destructor does not wait for them again
  stuck->gate.open();
  stuck->finished.wait();  // they finish after the pool is gone
}

TEST(WorkerPoolTest, ProcessExitsCleanlyWithAStuckTask) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto gate = std::make_shared<Gate>();  // never opened
        auto occ = std::make_shared<Occupancy>();
        auto pool = std::make_unique<WorkerPool>(2);
        pool->submit({[gate, occ] {
                        occ->enter();
                        gate->pass();
                      },
                      {}});
        occ->wait_for(1);
        const uint32_t stuck = pool->shutdown(Clock::now() + 10ms);
        pool.reset();
        std::exit(stuck == 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(WorkerPoolTest, ManySubmittersConcurrently) {
  WorkerPool pool(4);
  constexpr int kSubmitters = 8, kEach = 5000;
  std::atomic<int> ran{0};
  std::latch all(kSubmitters * kEach);
  {
    std::vector<std::jthread> submitters;
    for (int t = 0; t < kSubmitters; ++t)
      submitters.emplace_back([&, t] {
        for (int i = 0; i < kEach;) {
          if (t % 2 == 0) {
            pool.submit({[&] {
                           ran.fetch_add(1);
                           all.count_down();
                         },
                         {}});
            ++i;
          } else {
            std::vector<WorkerPool::Task> batch;
            for (int k = 0; k < 10 && i < kEach; ++k, ++i)
              batch.push_back({[&] {
                                 ran.fetch_add(1);
                                 all.count_down();
                               },
                               {}});
            pool.submit(std::move(batch));
          }
        }
      });
  }
  all.wait();
  EXPECT_EQ(ran.load(), kSubmitters * kEach);
  EXPECT_LE(pool.threads(), 4u);
}

}  // namespace
}  // namespace conveyor
