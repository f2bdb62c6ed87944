// Remote workers through the engine (RemoteWorkers over the dispatcher), on
// the in-memory example plugin loaded through the real loader. Real time with
// short intervals and generous bounds: these check what is granted, to whom
// and when it is given back, not how fast.
#include <conveyor/internal/engine_internals.hpp>
#include <conveyor/internal/remote_workers.hpp>
#include <conveyor/validation.hpp>
#include "testing/fault_injecting_storage.hpp"
#include "testing/sync.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using testing::eventually;

// The answer of one claim, when it comes.
class Answer {
 public:
  std::function<void(RemoteWorkers::Claimed&&)> sink() {
    return [this](RemoteWorkers::Claimed&& c) {
      std::lock_guard lock(mu_);
      EXPECT_FALSE(got_.has_value()) << "a claim was answered twice";
      got_ = std::move(c);
      ++answers_;
      cv_.notify_all();
    };
  }
  // Waits up to bound for the answer.
  std::optional<RemoteWorkers::Claimed> wait(std::chrono::milliseconds bound = 10s) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, bound, [&] { return got_.has_value(); });
    return got_;
  }
  bool answered() {
    std::lock_guard lock(mu_);
    return got_.has_value();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<RemoteWorkers::Claimed> got_;
  int answers_ = 0;
};

std::vector<conveyor_lease> leases_of(const std::vector<Job>& jobs) {
  std::vector<conveyor_lease> out;
  for (const Job& j : jobs) out.push_back(lease_of(j));
  return out;
}

class RemoteWorkersTest : public ::testing::Test {
 protected:
  RemoteWorkersTest() {
    config.engine.poll_interval_ms = 50;
    config.engine.lease_ms = 30'000;
    config.engine.retry_backoff_base_ms = 10;
  }
  void start() {
    engine = EngineInternals::make(config, SystemClock::instance(), storage);
    engine->register_handler("local", [this](const Job& j) {
      std::lock_guard lock(mu);
      local_ran.insert(j.id);
    });
    engine->start();
  }
  RemoteWorkers& remote() { return EngineInternals::remote_workers(*engine); }
  static RemoteWorkers::ClaimRequest request(std::vector<std::string> kinds, uint32_t max_jobs,
                                             std::chrono::milliseconds wait,
                                             std::string queue = "q") {
    RemoteWorkers::ClaimRequest r;
    r.queues = {{std::move(queue), 1}};
    r.kinds = std::move(kinds);
    r.max_jobs = max_jobs;
    r.wait = wait;
    r.worker_id = "test";
    return r;
  }
  JobState state_of(int64_t id) { return engine->get_job(id).value().state; }

  std::shared_ptr<Storage> storage = testing::open_memory_storage();
  Config config;
  std::unique_ptr<Engine> engine;
  std::mutex mu;
  std::set<int64_t> local_ran;
};

TEST_F(RemoteWorkersTest, GrantsOnlyItsKindsAndLocalHandlersOnlyTheirs) {
  start();
  std::vector<int64_t> remote_ids, local_ids;
  for (int i = 0; i < 20; ++i) {
    remote_ids.push_back(engine->enqueue("q", "py"));
    local_ids.push_back(engine->enqueue("q", "local"));
  }
  std::set<int64_t> granted;
  while (granted.size() < remote_ids.size()) {
    Answer a;
    remote().claim(request({"py"}, 7, 5s), a.sink());
    auto got = a.wait();
    ASSERT_TRUE(got);
    ASSERT_FALSE(got->jobs.empty());
    EXPECT_LE(got->jobs.size(), 7u);
    for (const Job& j : got->jobs) {
      EXPECT_EQ(j.kind, "py");
      EXPECT_EQ(j.state, JobState::kRunning);
      granted.insert(j.id);
    }
    auto results = remote().complete(leases_of(got->jobs));
    for (const auto& r : results) EXPECT_EQ(r.status, CONVEYOR_OK);
  }
  EXPECT_EQ(granted, std::set<int64_t>(remote_ids.begin(), remote_ids.end()));
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mu);
    return local_ran.size() == local_ids.size();
  }));
  std::lock_guard lock(mu);
  EXPECT_EQ(local_ran, std::set<int64_t>(local_ids.begin(), local_ids.end()));
  for (int64_t id : remote_ids) EXPECT_EQ(state_of(id), JobState::kCompleted);
}

TEST_F(RemoteWorkersTest, LongPollAnswersWhenAJobArrivesOrEmptyWhenTheWaitEnds) {
  start();
  Answer empty;
  const auto before = std::chrono::steady_clock::now();
  remote().claim(request({"py"}, 1, 300ms), empty.sink());
  auto got = empty.wait();
  ASSERT_TRUE(got);
  EXPECT_TRUE(got->jobs.empty());
  EXPECT_GE(std::chrono::steady_clock::now() - before, 300ms);

  Answer waiting;
  remote().claim(request({"py"}, 5, 20s), waiting.sink());
  EXPECT_FALSE(waiting.answered());
  const int64_t id = engine->enqueue("q", "py");
  got = waiting.wait();
  ASSERT_TRUE(got);
  ASSERT_EQ(got->jobs.size(), 1u);
  EXPECT_EQ(got->jobs[0].id, id);
}

TEST_F(RemoteWorkersTest, RemoteJobsHoldTheQueuesPermitsUntilSettled) {
  config.queues["q"].max_workers = 3;
  start();
  for (int i = 0; i < 10; ++i) engine->enqueue("q", "py");
  Answer first;
  remote().claim(request({"py"}, 10, 5s), first.sink());
  auto got = first.wait();
  ASSERT_TRUE(got);
  ASSERT_EQ(got->jobs.size(), 3u);  // max_workers, not max_jobs
  Answer second;
  remote().claim(request({"py"}, 10, 10s), second.sink());
  EXPECT_FALSE(second.wait(200ms)) << "granted beyond max_workers";
  // Settling one job of each kind of result frees a permit each.
  remote().complete(std::vector<conveyor_lease>{lease_of(got->jobs[0])});
  auto next = second.wait();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->jobs.size(), 1u);
  EXPECT_EQ(remote().jobs_held(), 3u);
}

TEST_F(RemoteWorkersTest, AnExpiredLeaseFreesItsPermitAndALateResultIsRefused) {
  config.queues["q"].max_workers = 1;
  config.engine.rescue_interval_ms = 50;
  start();
  const int64_t id = engine->enqueue("q", "py");
  Answer a;
  auto r = request({"py"}, 1, 5s);
  r.lease = 1000ms;
  remote().claim(r, a.sink());
  auto got = a.wait();
  ASSERT_TRUE(got);
  ASSERT_EQ(got->jobs.size(), 1u);
  const conveyor_lease stale = lease_of(got->jobs[0]);
  // The worker died: the lease expires, the job is rescued and granted again.
  Answer again;
  remote().claim(request({"py"}, 1, 10s), again.sink());
  auto second = again.wait();
  ASSERT_TRUE(second);
  ASSERT_EQ(second->jobs.size(), 1u);
  EXPECT_EQ(second->jobs[0].id, id);
  EXPECT_EQ(second->jobs[0].attempt, 2);
  auto late = remote().complete(std::vector<conveyor_lease>{stale});
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].status, CONVEYOR_E_LEASE_LOST);
  EXPECT_NE(late[0].message.find("no longer current"), std::string::npos) << late[0].message;
  EXPECT_THROW(remote().fail(stale, "late", 0ms, false), StorageError);
  EXPECT_EQ(remote().complete(std::vector<conveyor_lease>{lease_of(second->jobs[0])})[0].status,
            CONVEYOR_OK);
  EXPECT_EQ(state_of(id), JobState::kCompleted);
}

TEST_F(RemoteWorkersTest, FailRetriesAfterTheGivenDelayOrFailsForGood) {
  start();
  const int64_t retried = engine->enqueue("q", "py");
  const int64_t doomed = engine->enqueue("q", "py");
  Answer a;
  remote().claim(request({"py"}, 2, 5s), a.sink());
  auto got = a.wait();
  ASSERT_TRUE(got);
  ASSERT_EQ(got->jobs.size(), 2u);
  const int64_t now = SystemClock::instance().wall_now_us();
  auto outcome = remote().fail(lease_of(got->jobs[0]), "try later", 60s, false);
  EXPECT_TRUE(outcome.will_retry);
  EXPECT_GE(outcome.retry_at_us, now + 59'000'000);
  Job job = engine->get_job(retried).value();
  EXPECT_EQ(job.state, JobState::kScheduled);
  EXPECT_EQ(job.last_error, "try later");
  outcome = remote().fail(lease_of(got->jobs[1]), "bad payload", 0ms, true);
  EXPECT_FALSE(outcome.will_retry);
  job = engine->get_job(doomed).value();
  EXPECT_EQ(job.state, JobState::kFailed);
  EXPECT_EQ(job.last_error, "bad payload");
  EXPECT_EQ(remote().jobs_held(), 0u);
}

TEST_F(RemoteWorkersTest, ReleaseGivesTheJobBackWithItsAttemptUnspent) {
  start();
  const int64_t id = engine->enqueue("q", "py");
  Answer a;
  remote().claim(request({"py"}, 1, 5s), a.sink());
  auto got = a.wait();
  ASSERT_TRUE(got);
  ASSERT_EQ(got->jobs.size(), 1u);
  EXPECT_EQ(remote().release(leases_of(got->jobs))[0].status, CONVEYOR_OK);
  Job job = engine->get_job(id).value();
  EXPECT_EQ(job.state, JobState::kAvailable);
  EXPECT_EQ(job.attempt, 0);
}

TEST_F(RemoteWorkersTest, HeartbeatExtendsTheLease) {
  start();
  engine->enqueue("q", "py");
  Answer a;
  auto r = request({"py"}, 1, 5s);
  r.lease = 2000ms;
  remote().claim(r, a.sink());
  auto got = a.wait();
  ASSERT_TRUE(got);
  ASSERT_EQ(got->jobs.size(), 1u);
  int64_t expires = 0;
  auto results = remote().heartbeat(leases_of(got->jobs), 600s, &expires);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].status, CONVEYOR_OK);
  EXPECT_EQ(engine->get_job(got->jobs[0].id)->lease_expires_us, expires);
  EXPECT_GE(expires, SystemClock::instance().wall_now_us() + 590'000'000);
}

TEST_F(RemoteWorkersTest, ALimitedQueueGrantsNoMoreThanItsBucketHolds) {
  config.queues["q"].rate_limit = RateLimit{0.5, 3};  // 3 now, then one per 2 s
  start();
  for (int i = 0; i < 10; ++i) engine->enqueue("q", "py");
  Answer a;
  remote().claim(request({"py"}, 10, 5s), a.sink());
  auto got = a.wait();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->jobs.size(), 3u);
  Answer b;
  remote().claim(request({"py"}, 10, 300ms), b.sink());
  got = b.wait();
  ASSERT_TRUE(got);
  EXPECT_TRUE(got->jobs.empty()) << "granted past the bucket";
  EXPECT_GT(EngineInternals::metrics(*engine).queue("q").throttled.load(), 0u);
}

TEST_F(RemoteWorkersTest, RemoteKindsCountAsServedWhileTheWorkerIsConnected) {
  config.engine.unknown_kind_grace_s = 0;
  start();
  engine->enqueue("q", "py");
  engine->enqueue("q", "nobody");
  Answer a;
  remote().claim(request({"py"}, 1, 0ms, "other"), a.sink());
  ASSERT_TRUE(a.wait());
  EngineInternals::scan_unserved_kinds(*engine);
  const auto unserved = EngineInternals::unserved_kinds(*engine);
  ASSERT_EQ(unserved.count("q"), 1u);
  std::vector<std::string> kinds;
  for (const KindCount& k : unserved.at("q")) kinds.push_back(k.kind);
  EXPECT_EQ(kinds, std::vector<std::string>{"nobody"});
  EXPECT_EQ(remote().connected_workers(), 1u);
}

TEST_F(RemoteWorkersTest, BadClaimsAreRefusedNamingTheField) {
  start();
  Answer never;
  auto expect_field = [&](RemoteWorkers::ClaimRequest r, const std::string& field) {
    try {
      remote().claim(std::move(r), never.sink());
      ADD_FAILURE() << "accepted a claim with a bad " << field;
    } catch (const ValidationError& e) {
      EXPECT_EQ(e.field(), field) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind(field + ":", 0), 0u) << e.what();
    }
  };
  expect_field(request({"py"}, 0, 1s), "maxJobs");
  expect_field(request({"py"}, 1001, 1s), "maxJobs");
  expect_field(request({}, 1, 1s), "kinds");
  expect_field(request({"py"}, 1, 31s), "waitSeconds");
  expect_field(request({"py"}, 1, 1s, "bad name"), "queues[0].queue");
  auto twice = request({"py"}, 1, 1s);
  twice.queues.push_back({"q", 2});
  expect_field(twice, "queues[1].queue");
  auto no_queue = request({"py"}, 1, 1s);
  no_queue.queues.clear();
  expect_field(no_queue, "queues");
  EXPECT_FALSE(never.answered());
}

TEST_F(RemoteWorkersTest, ClosingAnswersEveryWaitingClaimEmpty) {
  start();
  Answer a, b;
  remote().claim(request({"py"}, 1, 30s), a.sink());
  remote().claim(request({"js"}, 1, 30s), b.sink());
  EXPECT_FALSE(a.answered());
  remote().close();
  auto got_a = a.wait(2s), got_b = b.wait(2s);
  ASSERT_TRUE(got_a);
  ASSERT_TRUE(got_b);
  EXPECT_TRUE(got_a->jobs.empty());
  Answer c;
  remote().claim(request({"py"}, 1, 30s), c.sink());
  ASSERT_TRUE(c.wait(2s));
}

TEST_F(RemoteWorkersTest, ACancelledClaimIsNeverAnsweredAndTakesNoJob) {
  start();
  Answer a;
  RemoteWorkers::Cancel cancel = remote().claim(request({"py"}, 1, 30s), a.sink());
  EXPECT_TRUE(cancel());
  const int64_t id = engine->enqueue("q", "py");
  Answer b;
  remote().claim(request({"py"}, 1, 5s), b.sink());
  auto got = b.wait();
  ASSERT_TRUE(got);
  ASSERT_EQ(got->jobs.size(), 1u);
  EXPECT_EQ(got->jobs[0].id, id);
  EXPECT_FALSE(a.answered());
}

TEST_F(RemoteWorkersTest, ABackpressureFailGivesTheJobBackAndHoldsTheQueue) {
  start();
  const int64_t id = engine->enqueue("q", "py");
  engine->enqueue("q", "py");
  Answer a;
  remote().claim(request({"py"}, 1, 5s), a.sink());
  auto got = a.wait();
  ASSERT_TRUE(got);
  ASSERT_EQ(got->jobs.size(), 1u);
  ASSERT_EQ(got->jobs[0].id, id);
  EXPECT_THROW(remote().fail(lease_of(got->jobs[0]), "429", 60s, true, true), ValidationError);
  const auto outcome = remote().fail(lease_of(got->jobs[0]), "HTTP 429", 60s, false, true);
  EXPECT_TRUE(outcome.will_retry);
  Job job = engine->get_job(id).value();
  EXPECT_EQ(job.state, JobState::kAvailable);
  EXPECT_EQ(job.attempt, 0) << "the attempt was given back";
  // Held: the other job is not granted, to this worker or the engine's handlers.
  Answer b;
  remote().claim(request({"py"}, 5, 300ms), b.sink());
  auto held = b.wait();
  ASSERT_TRUE(held);
  EXPECT_TRUE(held->jobs.empty());
  bool shown = false;
  for (const QueueReport& r : engine->queues())
    if (r.stats.queue == "q") {
      EXPECT_EQ(r.limit.source, LimitSource::kBackoff);
      EXPECT_GE(r.backoff_until_us, SystemClock::instance().wall_now_us() + 50'000'000);
      shown = true;
    }
  EXPECT_TRUE(shown);
  EXPECT_EQ(EngineInternals::metrics(*engine).queue("q").backoffs.load(), 1u);
  // Setting a limit is the operator's answer: the hold ends.
  engine->set_rate_limit("q", RateLimit{1000, 10});
  Answer c;
  remote().claim(request({"py"}, 5, 5s), c.sink());
  auto after = c.wait();
  ASSERT_TRUE(after);
  EXPECT_FALSE(after->jobs.empty());
}

// The refusals of jobs granted together are one hold (one episode), not one
// doubling each: the second answer belongs to the hold the first set.
TEST_F(RemoteWorkersTest, BackpressureFailsOfJobsInFlightTogetherAreOneHold) {
  start();
  for (int i = 0; i < 3; ++i) engine->enqueue("q", "py");
  Answer a;
  remote().claim(request({"py"}, 3, 5s), a.sink());
  auto got = a.wait();
  ASSERT_TRUE(got);
  ASSERT_EQ(got->jobs.size(), 3u);
  const int64_t before_us = SystemClock::instance().wall_now_us();
  for (const Job& job : got->jobs)
    EXPECT_TRUE(remote().fail(lease_of(job), "HTTP 429", 0s, false, true).will_retry);
  EXPECT_EQ(EngineInternals::metrics(*engine).queue("q").backoffs.load(), 1u);
  int64_t until_us = 0;
  for (const QueueReport& r : engine->queues())
    if (r.stats.queue == "q") until_us = r.backoff_until_us;
  // backoff_base_ms (1 s): not doubled by the second and third answers.
  EXPECT_GE(until_us, before_us + 900'000);
  EXPECT_LE(until_us, SystemClock::instance().wall_now_us() + 1'000'000);
}

TEST_F(RemoteWorkersTest, AHandlersRetryAfterGivesTheJobBackAndHoldsTheQueue) {
  start();
  std::atomic<int> runs{0};
  engine->register_handler("limited", [&](const Job&) {
    if (runs++ == 0) throw RetryAfter(1500ms, "HTTP 429 Too Many Requests");
  });
  const auto before = std::chrono::steady_clock::now();
  const int64_t id = engine->enqueue("api", "limited");
  ASSERT_TRUE(eventually([&] { return engine->get_job(id)->state == JobState::kCompleted; }));
  EXPECT_GE(std::chrono::steady_clock::now() - before, 1500ms) << "ran again before the hold ended";
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(engine->get_job(id)->attempt, 1) << "the held attempt was not spent";
  EXPECT_EQ(EngineInternals::metrics(*engine).queue("api").backoffs.load(), 1u);
}

TEST_F(RemoteWorkersTest, ABackpressureFailOfAKeyedJobHoldsOnlyItsKey) {
  start();
  std::vector<NewJob> jobs(2);
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].queue = "q";
    jobs[i].kind = "py";
    jobs[i].key = i == 0 ? "tenant-a" : "tenant-b";
  }
  engine->enqueue_batch(jobs);
  engine->enqueue_batch({jobs[0]});  // a second job of tenant-a
  Answer a;
  remote().claim(request({"py"}, 1, 5s), a.sink());
  auto got = a.wait();
  ASSERT_TRUE(got);
  ASSERT_EQ(got->jobs.size(), 1u);
  const std::string held_key = got->jobs[0].key;
  EXPECT_TRUE(remote().fail(lease_of(got->jobs[0]), "HTTP 429", 60s, false, true).will_retry);
  // The other key goes on; the held key's jobs wait (both of tenant-a's, or
  // tenant-b's one).
  std::set<std::string> granted_keys;
  for (int i = 0; i < 3; ++i) {
    Answer b;
    remote().claim(request({"py"}, 5, 300ms), b.sink());
    auto more = b.wait();
    ASSERT_TRUE(more);
    for (const Job& j : more->jobs) {
      granted_keys.insert(j.key);
      EXPECT_EQ(remote().complete(leases_of({j})).at(0).status, CONVEYOR_OK);
    }
  }
  EXPECT_FALSE(granted_keys.empty()) << "the other key was held too";
  EXPECT_EQ(granted_keys.count(held_key), 0u) << "the held key " << held_key << " was granted";
  for (const QueueReport& r : engine->queues())
    if (r.stats.queue == "q") {
      EXPECT_NE(r.limit.source, LimitSource::kBackoff) << "the whole queue was held";
    }
}

}  // namespace
}  // namespace conveyor
