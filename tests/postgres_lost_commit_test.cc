// A crash that loses lease commits: the proof behind lease_commit = "async"
// (pg_sql.hpp CONVEYOR_PG_LEASE_COMMIT). Claims, completions and failures
// commit there without waiting for their WAL flush, which the design allows
// because each loss ends with the job run again: a lost claim leaves the
// job ready, a lost completion leaves it running under a lease that expires
// and is rescued. Enqueues keep the server's synchronous_commit, so an
// acknowledged enqueue is never lost.
//
// The restart tests crash the server mid-drain and accept any loss; they
// cannot force one. Here the loss is forced: the processes that write WAL in
// the background (WAL writer, background writer, checkpointer) are stopped
// (SIGSTOP), so an async commit stays in the server's memory, and the server
// is then crashed ("immediate"; the postmaster kills the stopped processes).
// With lease_commit = "sync" the same steps lose nothing: the control.
//
// Each case runs on a cluster of its own (scripts/pg-cluster.sh, ports
// 5460-5469). Skipped when the PostgreSQL 15 server binaries are missing;
// failed then when CI=true.
#include "pg_test_env.hpp"
#include "test_support.hpp"

#include <conveyor/clock.hpp>
#include <conveyor/config.hpp>
#include <conveyor/internal/storage.hpp>

#include <gtest/gtest.h>

#include <signal.h>

#include <string>
#include <vector>

namespace conveyor {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kHour = 3'600'000'000;

struct LostCommitCase {
  const char* plugin;
  const char* lease_commit;
  bool async() const { return std::string(lease_commit) == "async"; }
};

std::string case_name(const ::testing::TestParamInfo<LostCommitCase>& info) {
  std::string name = std::string(info.param.plugin) + "_" + info.param.lease_commit;
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
}

class PostgresLostCommit : public ::testing::TestWithParam<LostCommitCase> {
 protected:
  void SetUp() override {
    CONVEYOR_NEED_PG_SERVER_BINARIES();
    cluster_ = std::make_unique<test::ThrowawayCluster>(5460, 5469);
  }

  std::shared_ptr<Storage> open() {
    const auto config = test::write_postgres_config(
        dir_, GetParam().plugin, cluster_->dsn(), "lost_commit",
        std::string("lease_commit = \"") + GetParam().lease_commit + "\"\n");
    return open_storage(load_config_file(config).storage);
  }

  // Stops every server process that flushes WAL on its own; the pids.
  std::vector<int> stop_background_wal_writes() {
    std::vector<int> pids;
    for (const std::string& pid :
         test::psql(cluster_->dsn(),
                    "SELECT pid FROM pg_stat_activity WHERE backend_type IN "
                    "('walwriter', 'background writer', 'checkpointer') ORDER BY pid")) {
      pids.push_back(std::stoi(pid));
      EXPECT_EQ(::kill(pids.back(), SIGSTOP), 0) << "SIGSTOP " << pid;
    }
    return pids;
  }

  std::unique_ptr<test::ThrowawayCluster> cluster_;
  test::TempDir dir_;
};

NewJob job(const std::string& queue) {
  NewJob j;
  j.queue = queue;
  j.kind = "noop";
  j.payload = "{}";
  return j;
}

JobState state_of(Storage& storage, int64_t id, int64_t now_us) {
  const auto job = storage.get_job(id, now_us);
  if (!job) throw std::runtime_error("job " + std::to_string(id) + " is gone");
  return job->state;
}

TEST_P(PostgresLostCommit, ACrashLosesOnlyLeaseCommitsAndEveryLostJobRunsAgain) {
  const int64_t now = SystemClock::instance().wall_now_us();
  auto storage = open();
  // done: claimed, the claim made durable, then completed (the completion is
  // the last commit for it); ready: claimed last; enqueued: its enqueue is
  // the sync commit that flushes done's claim.
  const std::vector<int64_t> ids = storage->enqueue(std::vector{job("done"), job("ready")}, now);
  ASSERT_EQ(ids.size(), 2u);
  const int64_t done = ids[0], ready = ids[1];
  const std::vector<Job> claimed_done = storage->claim("done", 1, 11, now, now + kHour);
  ASSERT_EQ(claimed_done.size(), 1u);
  const int64_t enqueued = storage->enqueue(std::vector{job("enqueued")}, now).at(0);

  ASSERT_FALSE(stop_background_wal_writes().empty());
  ASSERT_EQ(storage->complete(std::vector{lease_of(claimed_done[0])}, now + 1).at(0), CONVEYOR_OK);
  ASSERT_EQ(storage->claim("ready", 1, 12, now + 2, now + kHour).size(), 1u);
  // Both visible before the crash: what a crash then loses is a commit the
  // server had acknowledged.
  ASSERT_EQ(state_of(*storage, done, now + 3), JobState::kCompleted);
  ASSERT_EQ(state_of(*storage, ready, now + 3), JobState::kRunning);
  cluster_->halt("immediate");
  storage.reset();
  cluster_->resume();

  storage = open();
  EXPECT_EQ(state_of(*storage, enqueued, now + 4), JobState::kAvailable)
      << "an acknowledged enqueue was lost";
  if (!GetParam().async()) {
    EXPECT_EQ(state_of(*storage, done, now + 4), JobState::kCompleted);
    EXPECT_EQ(state_of(*storage, ready, now + 4), JobState::kRunning);
    return;
  }
  // The completion was lost: the job is running under its old lease, which
  // expires, and the rescue makes it run again.
  ASSERT_EQ(state_of(*storage, done, now + 4), JobState::kRunning)
      << "the completion survived the crash: the test did not force its loss";
  // The claim was lost: the job is ready as it was, no attempt spent.
  const auto ready_job = storage->get_job(ready, now + 4);
  ASSERT_TRUE(ready_job);
  EXPECT_EQ(ready_job->state, JobState::kAvailable);
  EXPECT_EQ(ready_job->attempt, 0);

  EXPECT_TRUE(storage->claim("done", 1, 13, now + 5, now + kHour).empty())
      << "a job whose completion was lost was claimed while its lease still held";
  const Storage::Rescued rescued = storage->rescue_expired(now + 2 * kHour, 10);
  EXPECT_EQ(rescued.count, 1u);
  const std::vector<Job> again = storage->claim("done", 1, 14, now + 2 * kHour, now + 3 * kHour);
  ASSERT_EQ(again.size(), 1u) << "the job whose completion was lost never ran again";
  EXPECT_EQ(again[0].id, done);
  EXPECT_EQ(again[0].attempt, 2);
  EXPECT_EQ(storage->claim("ready", 1, 15, now + 2 * kHour, now + 3 * kHour).at(0).attempt, 1);
}

std::vector<LostCommitCase> cases() {
  std::vector<LostCommitCase> out = {{"postgres", "async"}, {"postgres", "sync"}};
#ifdef CONVEYOR_TEST_HAS_POSTGRES_QUEUE
  out.push_back({"postgres-queue", "async"});
  out.push_back({"postgres-queue", "sync"});
#endif
  return out;
}

INSTANTIATE_TEST_SUITE_P(Postgres, PostgresLostCommit, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace conveyor
