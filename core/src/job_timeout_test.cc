// Job timeouts (issue 41): [queues.NAME] job_timeout_s and a job's own
// timeout_ms. A real engine on the in-memory example plugin (the real
// loader) with a ManualClock: the deadline passes when the test moves the
// clock, and the engine's maintenance thread (which re-reads the clock at
// least every 50 ms) fails the attempt; the waits are bounded polls.
#include <conveyor/internal/engine_internals.hpp>
#include <conveyor/internal/remote_workers.hpp>
#include "testing/fault_injecting_storage.hpp"
#include "testing/sync.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::FaultInjectingStorage;
using testing::Gate;
using testing::StorageOp;

class JobTimeoutTest : public ::testing::Test {
 protected:
  JobTimeoutTest() {
    config.engine.poll_interval_ms = 20;
    config.engine.shutdown_timeout_ms = 2000;
    config.engine.lease_ms = 9000;  // heartbeats every 3 s of the manual clock
    config.engine.rescue_interval_ms = 3000;
    // A retry waits a minute of the manual clock: nothing runs again unless
    // the test moves it that far.
    config.engine.retry_backoff_base_ms = 60'000;
    config.engine.retry_backoff_max_ms = 60'000;
  }
  std::unique_ptr<Engine> make() { return EngineInternals::make(config, clock, storage); }
  static QueueCountersSnapshot counters(Engine& e, const std::string& queue) {
    for (auto& c : EngineInternals::metrics(e).snapshot())
      if (c.queue == queue) return c;
    return {};
  }
  // Moves the clock 3 s and waits until a whole round of maintenance ran at
  // that time or later: the rescue step (due every 3 s) ran, and then the
  // next round began (queue discovery, due 20 ms later), so the round with
  // the rescue, and the timeouts' step in it, is over.
  void wait_for_maintenance() {
    const uint64_t rescues = storage->calls(StorageOp::kRescueExpired);
    clock.advance(3s);
    ASSERT_TRUE(eventually([&] { return storage->calls(StorageOp::kRescueExpired) > rescues; }));
    const uint64_t discoveries = storage->calls(StorageOp::kListQueues);
    clock.advance(20ms);
    ASSERT_TRUE(eventually([&] { return storage->calls(StorageOp::kListQueues) > discoveries; }));
  }

  // Opens release when it goes out of scope: declared after the engine, it
  // lets a handler still waiting (a failed test) return before the engine
  // is destroyed.
  struct OpenAtExit {
    Gate& gate;
    ~OpenAtExit() { gate.open(); }
  };

  Gate release;  // outlives every engine of a test
  ManualClock clock{SystemClock::instance().wall_now_us()};
  std::shared_ptr<FaultInjectingStorage> storage =
      std::make_shared<FaultInjectingStorage>(testing::open_memory_storage());
  Config config;
};

TEST_F(JobTimeoutTest, AHungSyncHandlerFailsItsAttemptAtTheDeadlineButKeepsItsPermit) {
  config.queues["q"].job_timeout_s = 30;
  config.queues["q"].max_workers = 1;
  std::atomic<bool> started{false}, saw_timed_out{false}, hung_returned{false},
      next_ran_after_return{false};
  std::optional<TimeLimit> limit_at_start;
  auto engine = make();
  OpenAtExit open_at_exit{release};
  engine->register_handler("hang", [&](const Job&) {
    limit_at_start = job_time_limit();
    started = true;
    // A cooperative handler polls (as long as a test may wait); this one
    // then hangs on regardless.
    for (int i = 0; i < 20'000 && !job_timed_out(); ++i) std::this_thread::sleep_for(1ms);
    saw_timed_out = job_timed_out();
    release.pass();
    hung_returned = true;
  });
  engine->register_handler("k", [&](const Job&) { next_ran_after_return = hung_returned.load(); });
  const int64_t hung = engine->enqueue("q", "hang");
  const int64_t next = engine->enqueue("q", "k");
  engine->start();
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  ASSERT_TRUE(limit_at_start.has_value());
  EXPECT_EQ(limit_at_start->timeout, 30s);
  EXPECT_EQ(limit_at_start->left, 30s);  // the manual clock has not moved
  EXPECT_EQ(limit_at_start->error, "timed out after 30 s (job_timeout_s)");
  for (int i = 0; i < 9; ++i) wait_for_maintenance();  // 27.18 s: not yet
  EXPECT_EQ(engine->get_job(hung)->state, JobState::kRunning);
  EXPECT_FALSE(saw_timed_out.load());
  EXPECT_EQ(counters(*engine, "q").timed_out, 0u);

  clock.advance(2820ms);  // 30 s: the deadline
  ASSERT_TRUE(eventually([&] { return engine->get_job(hung)->state == JobState::kScheduled; }));
  const Job failed = *engine->get_job(hung);
  EXPECT_EQ(failed.last_error, "timed out after 30 s (job_timeout_s)");
  EXPECT_EQ(failed.attempt, 1);
  EXPECT_TRUE(eventually([&] { return saw_timed_out.load(); })) << "job_timed_out() never said so";
  EXPECT_EQ(counters(*engine, "q").timed_out, 1u);
  EXPECT_EQ(counters(*engine, "q").retried, 1u) << "a failed attempt, retried with backoff";
  // No heartbeat extends the failed lease any more, and its permit is still
  // held by the thread that hangs: the queue's other job waits.
  wait_for_maintenance();
  EXPECT_EQ(engine->get_job(next)->state, JobState::kAvailable);

  release.open();
  ASSERT_TRUE(eventually([&] { return engine->get_job(next)->state == JobState::kCompleted; }));
  EXPECT_TRUE(next_ran_after_return.load()) << "max_workers = 1 let a second job run beside "
                                               "the hung handler";
  // The hung handler returned normally, late: ignored, not a completion.
  const Job after = *engine->get_job(hung);
  EXPECT_EQ(after.state, JobState::kScheduled);
  EXPECT_EQ(after.last_error, "timed out after 30 s (job_timeout_s)");
  EXPECT_EQ(counters(*engine, "q").completed, 1u);
}

TEST_F(JobTimeoutTest, AnAsyncJobsDeadlineReportsTheFailureAndFreesItsPermit) {
  config.engine.job_timeout_s = 10;  // the default of queues without their own
  config.queues["q"].max_workers = 1;
  std::mutex mu;
  std::vector<JobResult> held;
  auto engine = make();
  engine->register_async_handler("later", [&](const Job&, JobResult result) {
    std::lock_guard lock(mu);
    held.push_back(std::move(result));
  });
  auto held_count = [&] {
    std::lock_guard lock(mu);
    return held.size();
  };
  const int64_t first = engine->enqueue("q", "later");
  const int64_t second = engine->enqueue("q", "later");
  engine->start();
  ASSERT_TRUE(eventually([&] { return held_count() == 1; }));
  std::optional<JobResult> result;
  {
    std::lock_guard lock(mu);
    result = held.front();
  }
  ASSERT_TRUE(result->time_limit().has_value());
  EXPECT_EQ(result->time_limit()->left, 10s);
  EXPECT_FALSE(result->timed_out());

  clock.advance(10s);
  ASSERT_TRUE(eventually([&] { return engine->get_job(first)->state == JobState::kScheduled; }));
  EXPECT_EQ(engine->get_job(first)->last_error, "timed out after 10 s (job_timeout_s)");
  EXPECT_TRUE(result->timed_out());
  EXPECT_TRUE(result->reported());
  EXPECT_EQ(result->time_limit()->left, 0ms);
  // Its permit went back at the deadline: the second job starts while the
  // first one's result was never reported.
  ASSERT_TRUE(eventually([&] { return held_count() == 2; }));
  EXPECT_EQ(engine->get_job(second)->state, JobState::kRunning);
  // A late report is ignored.
  result->complete();
  {
    std::lock_guard lock(mu);
    held.back().complete();
  }
  ASSERT_TRUE(eventually([&] { return engine->get_job(second)->state == JobState::kCompleted; }));
  EXPECT_EQ(engine->get_job(first)->state, JobState::kScheduled);
  EXPECT_EQ(counters(*engine, "q").timed_out, 1u);
  EXPECT_EQ(EngineInternals::async_outstanding(*engine), 0u);
}

TEST_F(JobTimeoutTest, AJobsOwnTimeoutWinsOverItsQueues) {
  config.queues["q"].job_timeout_s = 3600;
  std::atomic<bool> started{false};
  std::optional<TimeLimit> limit;
  auto engine = make();
  OpenAtExit open_at_exit{release};
  engine->register_handler("hang", [&](const Job&) {
    limit = job_time_limit();
    started = true;
    release.pass();
  });
  NewJob job;
  job.queue = "q";
  job.kind = "hang";
  job.payload = "{}";
  job.timeout_ms = 1500;
  const int64_t id = engine->enqueue_batch({job}).front();
  engine->start();
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->timeout, 1500ms);
  clock.advance(1500ms);
  ASSERT_TRUE(eventually([&] { return engine->get_job(id)->state == JobState::kScheduled; }));
  EXPECT_EQ(engine->get_job(id)->last_error, "timed out after 1.5 s (the job's timeout_ms = 1500)");
}

TEST_F(JobTimeoutTest, EnqueueOptionsCarryTheJobsTimeout) {
  auto engine = make();
  EnqueueOptions options;
  options.timeout = 2500ms;
  const int64_t id = engine->enqueue("q", "k", "{}", options);
  EXPECT_EQ(engine->get_job(id)->timeout_ms, 2500);
  options.timeout = -1ms;
  EXPECT_THROW(engine->enqueue("q", "k", "{}", options), ValidationError);
}

TEST_F(JobTimeoutTest, AQueueWithoutATimeoutIsNeverTimedOut) {
  config.engine.job_timeout_s = 5;
  config.queues["free"].job_timeout_s = 0;  // turns the [engine] default off here
  std::atomic<bool> started{false};
  auto engine = make();
  OpenAtExit open_at_exit{release};
  engine->register_handler("k", [&](const Job&) {
    EXPECT_FALSE(job_time_limit().has_value());
    started = true;
    release.pass();
  });
  const int64_t id = engine->enqueue("free", "k");
  engine->start();
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  for (int i = 0; i < 4; ++i) wait_for_maintenance();  // 12.08 s
  EXPECT_EQ(engine->get_job(id)->state, JobState::kRunning);
  release.open();
  ASSERT_TRUE(eventually([&] { return engine->get_job(id)->state == JobState::kCompleted; }));
  EXPECT_EQ(counters(*engine, "free").timed_out, 0u);
}

TEST_F(JobTimeoutTest, ARemoteWorkersJobIsFailedAtItsDeadlineAndItsHeartbeatSaysSo) {
  config.queues["q"].job_timeout_s = 20;
  config.queues["q"].max_workers = 1;
  auto engine = make();
  engine->start();
  const int64_t id = engine->enqueue("q", "remote");
  RemoteWorkers& remote = EngineInternals::remote_workers(*engine);
  std::mutex mu;
  std::condition_variable cv;
  std::optional<RemoteWorkers::Claimed> claimed;
  RemoteWorkers::ClaimRequest request;
  request.queues = {{"q", 1}};
  request.kinds = {"remote"};
  request.max_jobs = 1;
  request.wait = 10s;
  request.worker_id = "py-1";
  request.lease = 60s;
  remote.claim(request, [&](RemoteWorkers::Claimed&& c) {
    std::lock_guard lock(mu);
    claimed = std::move(c);
    cv.notify_all();
  });
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return claimed.has_value(); }));
  }
  ASSERT_EQ(claimed->jobs.size(), 1u);
  const conveyor_lease lease = lease_of(claimed->jobs[0]);
  ASSERT_EQ(lease.job_id, id);
  int64_t expires = 0;
  clock.advance(19s);
  auto beat = remote.heartbeat({&lease, 1}, 0ms, &expires);
  EXPECT_EQ(beat.at(0).status, CONVEYOR_OK);
  EXPECT_FALSE(beat.at(0).timed_out);

  clock.advance(1s);  // the deadline: the server fails the attempt
  ASSERT_TRUE(eventually([&] { return engine->get_job(id)->state == JobState::kScheduled; }));
  EXPECT_EQ(engine->get_job(id)->last_error, "timed out after 20 s (job_timeout_s)");
  EXPECT_EQ(remote.jobs_held(), 0u) << "its permit is freed";
  EXPECT_EQ(counters(*engine, "q").timed_out, 1u);

  beat = remote.heartbeat({&lease, 1}, 0ms, &expires);
  EXPECT_EQ(beat.at(0).status, CONVEYOR_E_LEASE_LOST);
  EXPECT_TRUE(beat.at(0).timed_out);
  EXPECT_NE(beat.at(0).message.find("timed out after 20 s (job_timeout_s)"), std::string::npos)
      << beat.at(0).message;
  const auto done = remote.complete({&lease, 1});
  EXPECT_EQ(done.at(0).status, CONVEYOR_E_LEASE_LOST);
  EXPECT_NE(done.at(0).message.find("timed out"), std::string::npos) << done.at(0).message;
  try {
    remote.fail(lease, "late failure", 0ms, false);
    ADD_FAILURE() << "a failure of a timed-out lease was accepted";
  } catch (const StorageError& e) {
    EXPECT_EQ(e.code(), CONVEYOR_E_LEASE_LOST);
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
  }
  EXPECT_EQ(engine->get_job(id)->state, JobState::kScheduled);
  EXPECT_EQ(engine->get_job(id)->last_error, "timed out after 20 s (job_timeout_s)");
}

// A server restarted while a remote worker runs a job: the new process did
// not grant the lease, so it finds the deadline in storage (when the attempt
// started, ABI 1.6) at the worker's heartbeat. Engine "before" grants the
// lease with no timeout configured; engine "after" has the queue's 20 s.
TEST_F(JobTimeoutTest, ALeaseAnEarlierServerGrantedTimesOutAtAHeartbeat) {
  config.queues["q"].max_workers = 1;
  auto before = make();
  before->start();
  const int64_t id = before->enqueue("q", "remote");
  std::mutex mu;
  std::condition_variable cv;
  std::optional<RemoteWorkers::Claimed> claimed;
  RemoteWorkers::ClaimRequest request;
  request.queues = {{"q", 1}};
  request.kinds = {"remote"};
  request.max_jobs = 1;
  request.wait = 10s;
  request.worker_id = "py-1";
  request.lease = 60s;
  EngineInternals::remote_workers(*before).claim(request, [&](RemoteWorkers::Claimed&& c) {
    std::lock_guard lock(mu);
    claimed = std::move(c);
    cv.notify_all();
  });
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return claimed.has_value(); }));
  }
  ASSERT_EQ(claimed->jobs.size(), 1u);
  const conveyor_lease lease = lease_of(claimed->jobs[0]);

  config.queues["q"].job_timeout_s = 20;
  auto after = make();
  RemoteWorkers& remote = EngineInternals::remote_workers(*after);
  int64_t expires = 0;
  clock.advance(19s);
  auto beat = remote.heartbeat({&lease, 1}, 0ms, &expires);
  EXPECT_EQ(beat.at(0).status, CONVEYOR_OK) << "not yet due";
  EXPECT_FALSE(beat.at(0).timed_out);

  clock.advance(1s);
  beat = remote.heartbeat({&lease, 1}, 0ms, &expires);
  EXPECT_EQ(beat.at(0).status, CONVEYOR_E_LEASE_LOST);
  EXPECT_TRUE(beat.at(0).timed_out) << beat.at(0).message;
  EXPECT_EQ(after->get_job(id)->state, JobState::kScheduled);
  EXPECT_EQ(after->get_job(id)->last_error, "timed out after 20 s (job_timeout_s)");
  const auto done = remote.complete({&lease, 1});
  EXPECT_EQ(done.at(0).status, CONVEYOR_E_LEASE_LOST);
  EXPECT_NE(done.at(0).message.find("timed out"), std::string::npos) << done.at(0).message;
}

TEST(JobTimeoutConfig, QueuesAndTheEngineTakeSecondsAndRefuseNonsense) {
  Config c = parse_config(
      "[engine]\njob_timeout_s = 30\n[queues.a]\njob_timeout_s = 2.5\n[queues.b]\n"
      "job_timeout_s = 0\n[queues.c]\nmax_workers = 2\n",
      "t.toml");
  EXPECT_EQ(c.job_timeout_ms_for("a"), 2500);
  EXPECT_EQ(c.job_timeout_ms_for("b"), 0);
  EXPECT_EQ(c.job_timeout_ms_for("c"), 30000);
  EXPECT_EQ(c.job_timeout_ms_for("unconfigured"), 30000);
  EXPECT_EQ(parse_config("", "t.toml").job_timeout_ms_for("a"), 0) << "no timeout by default";
  for (const char* bad : {"-1", "\"30\"", "0.0001", "604801", "nan", "inf", "0x10", "true"}) {
    try {
      parse_config(std::string("[queues.q]\njob_timeout_s = ") + bad + "\n", "t.toml");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("t.toml:2: queues.q.job_timeout_s: must be"),
                std::string::npos)
          << bad << ": " << e.what();
    }
  }
  EXPECT_THROW(parse_config("[engine]\njob_timeout_s = -3\n", "t.toml"), ConfigError);
}

}  // namespace
}  // namespace conveyor
