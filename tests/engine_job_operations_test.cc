// The engine's job operations (storage ABI 1.1) on the SQLite plugin, loaded
// through the real loader: list a queue's jobs by state and kind page by
// page, retry failed jobs (they run again), delete final jobs, counts without
// a scan, and bad input refused before storage sees it.
#include "test_support.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/validation.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace conveyor {
namespace {

using test::TempDir;
using test::wait_until;

Config fast_config(const TempDir& dir) {
  Config c = test::sqlite_config(dir);
  c.engine.poll_interval_ms = 50;
  c.engine.retry_backoff_base_ms = 1;
  c.engine.retry_backoff_max_ms = 5;
  return c;
}

QueueStats counts_of(Engine& e, const std::string& queue) {
  for (QueueStats& s : e.job_counts())
    if (s.queue == queue) return s;
  return QueueStats{};
}

std::vector<int64_t> ids_of(const std::vector<Job>& jobs) {
  std::vector<int64_t> ids;
  for (const Job& j : jobs) ids.push_back(j.id);
  return ids;
}

TEST(EngineJobOperations, ListRetryAndDeleteOnSqlite) {
  TempDir dir;
  Engine engine(fast_config(dir));
  std::atomic<bool> broken{true};
  engine.register_handler("boom", [&](const Job&) {
    if (broken) throw PermanentError("downstream is gone");
  });
  engine.register_handler("ok", [](const Job&) {});
  std::vector<int64_t> failing, fine;
  for (int i = 0; i < 3; ++i) failing.push_back(engine.enqueue("q", "boom", "{}"));
  for (int i = 0; i < 2; ++i) fine.push_back(engine.enqueue("q", "ok", "{}"));
  engine.start();
  ASSERT_TRUE(wait_until([&] {
    QueueStats s = counts_of(engine, "q");
    return s.failed == 3 && s.completed == 2;
  }));

  // Failed jobs, two per page.
  JobQuery failed{.queue = "q", .states = {JobState::kFailed}, .limit = 2};
  std::vector<Job> page1 = engine.list_jobs(failed);
  ASSERT_EQ(page1.size(), 2u);
  failed.after_id = page1.back().id;
  std::vector<Job> page2 = engine.list_jobs(failed);
  ASSERT_EQ(page2.size(), 1u);
  std::vector<int64_t> listed = ids_of(page1);
  listed.push_back(page2[0].id);
  EXPECT_EQ(listed, failing);
  EXPECT_EQ(page1[0].last_error, "downstream is gone");
  // By kind.
  EXPECT_EQ(ids_of(engine.list_jobs(JobQuery{.queue = "q", .kind = "ok"})), fine);

  // Retry: the failed ones run again; a completed id and an unknown one are
  // reported and left alone.
  broken = false;
  std::vector<int64_t> retry = failing;
  retry.push_back(fine[0]);
  retry.push_back(987654321);
  std::vector<JobOutcome> r = engine.retry_jobs(retry);
  ASSERT_EQ(r.size(), 5u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r[i].status, JobOutcome::Status::kOk) << r[i].id;
  EXPECT_EQ(r[3].id, fine[0]);
  EXPECT_EQ(r[3].status, JobOutcome::Status::kWrongState);
  EXPECT_EQ(r[4].status, JobOutcome::Status::kNotFound);
  ASSERT_TRUE(wait_until([&] { return counts_of(engine, "q").completed == 5; }));
  std::optional<Job> again = engine.get_job(failing[0]);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->state, JobState::kCompleted);
  EXPECT_EQ(again->attempt, 1) << "a retry resets the attempts";

  // Delete: final jobs go; a pending one is refused and kept.
  EnqueueOptions in_an_hour;
  in_an_hour.delay = std::chrono::hours(1);
  const int64_t later = engine.enqueue("q", "ok", "{}", in_an_hour);
  std::vector<int64_t> all = failing;
  all.insert(all.end(), fine.begin(), fine.end());
  all.push_back(later);
  std::vector<JobOutcome> d = engine.delete_jobs(all);
  ASSERT_EQ(d.size(), 6u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(d[i].status, JobOutcome::Status::kOk) << d[i].id;
  EXPECT_EQ(d[5].status, JobOutcome::Status::kWrongState);
  EXPECT_FALSE(engine.get_job(failing[0]).has_value());
  EXPECT_TRUE(engine.get_job(later).has_value());
  QueueStats s = counts_of(engine, "q");
  EXPECT_EQ(s.completed, 0);
  EXPECT_EQ(s.failed, 0);
  EXPECT_EQ(s.scheduled, 1);
  engine.stop();
}

TEST(EngineJobOperations, BadInputIsRefusedBeforeStorage) {
  TempDir dir;
  Engine engine(fast_config(dir));
  EXPECT_THROW(engine.list_jobs(JobQuery{.queue = "q", .limit = 0}), ValidationError);
  EXPECT_THROW(engine.list_jobs(JobQuery{.queue = "q", .limit = kListJobsMax + 1}),
               ValidationError);
  EXPECT_THROW(engine.list_jobs(JobQuery{.queue = "q", .after_id = -1}), ValidationError);
  EXPECT_THROW(engine.list_jobs(JobQuery{.queue = "bad queue"}), ValidationError);
  std::vector<int64_t> too_many(Engine::kJobBatchMax + 1, 1);
  EXPECT_THROW(engine.retry_jobs(too_many), ValidationError);
  EXPECT_THROW(engine.delete_jobs(too_many), ValidationError);
  try {
    engine.list_jobs(JobQuery{.queue = "q", .limit = 5000});
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "limit");
    EXPECT_NE(std::string(e.what()).find("1..1000"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace conveyor
