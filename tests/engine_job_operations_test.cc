// The engine's job operations (storage ABI 1.1) on the SQLite plugin, loaded
// through the real loader: list a queue's jobs by state and kind page by
// page, retry failed jobs (they run again), delete final jobs, counts without
// a scan, and bad input refused before storage sees it.
#include "test_support.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/validation.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
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

// Enqueue options of a job due in an hour.
EnqueueOptions later() {
  EnqueueOptions o;
  o.delay = std::chrono::hours(1);
  return o;
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

// jobs cancel/rm --queue in the core: bounded batches over one queue that
// follow the cursor, each state checked, other queues untouched.
TEST(EngineJobOperations, BulkCancelAndDeleteGoBatchByBatch) {
  TempDir dir;
  Engine engine(fast_config(dir));  // not started: nothing runs meanwhile
  for (int i = 0; i < 10; ++i) engine.enqueue("q", "noop", "{}");
  for (int i = 0; i < 10; ++i) engine.enqueue("q", "noop", "{}", later());
  const int64_t other = engine.enqueue("other", "noop", "{}");

  // Final states are refused for a cancel, other states (and none) for a delete.
  for (const auto& [states, cancel] :
       std::vector<std::pair<std::vector<JobState>, bool>>{{{JobState::kCompleted}, true},
                                                           {{JobState::kFailed}, true},
                                                           {{}, false},
                                                           {{JobState::kRunning}, false},
                                                           {{JobState::kAvailable}, false}}) {
    JobQuery f{.queue = "q", .states = states, .limit = 5};
    try {
      cancel ? engine.cancel_jobs_batch(f) : engine.delete_jobs_batch(f);
      ADD_FAILURE() << "accepted";
    } catch (const ValidationError& e) {
      EXPECT_EQ(e.field(), "states");
    }
  }
  EXPECT_THROW(engine.cancel_jobs_batch(JobQuery{.queue = "q", .limit = 0}), ValidationError);
  EXPECT_THROW(engine.cancel_jobs_batch(JobQuery{.queue = "q", .limit = 1001}), ValidationError);
  EXPECT_EQ(counts_of(engine, "q").pending, 10);  // nothing done

  // Cancel only the scheduled ones first, 3 per batch.
  JobQuery f{.queue = "q", .states = {JobState::kScheduled}, .limit = 3};
  int64_t done = 0, batches = 0;
  do {
    const Engine::JobBatchResult r = engine.cancel_jobs_batch(f);
    EXPECT_EQ(r.refused, 0);
    done += r.done;
    ++batches;
    f.after_id = r.next_after_id;
  } while (f.after_id != 0);
  EXPECT_EQ(done, 10);
  EXPECT_EQ(batches, 4);  // 3 + 3 + 3 + 1
  QueueStats s = counts_of(engine, "q");
  EXPECT_EQ(s.pending, 10);
  EXPECT_EQ(s.scheduled, 0);
  EXPECT_EQ(s.cancelled, 10);
  // Then every job not final (the default).
  f = JobQuery{.queue = "q", .limit = 1000};
  Engine::JobBatchResult r = engine.cancel_jobs_batch(f);
  EXPECT_EQ(r.done, 10);
  EXPECT_EQ(r.next_after_id, 0);
  // Delete the cancelled ones, 7 per batch.
  f = JobQuery{.queue = "q", .states = {JobState::kCancelled}, .limit = 7};
  done = 0;
  do {
    r = engine.delete_jobs_batch(f);
    done += r.done;
    f.after_id = r.next_after_id;
  } while (f.after_id != 0);
  EXPECT_EQ(done, 20);
  s = counts_of(engine, "q");
  EXPECT_EQ(s.pending + s.scheduled + s.cancelled, 0);
  ASSERT_TRUE(engine.get_job(other).has_value());
  EXPECT_EQ(engine.get_job(other)->state, JobState::kAvailable);
}

// conveyor queues rm in the core: refused while a job runs (nothing
// changed), then with force everything of the queue goes, in batches: jobs
// (the running one cancelled, its result refused), the override, the key
// settings, the paused flag. Another queue is untouched.
TEST(EngineJobOperations, RemoveQueueRefusesRunningJobsUnlessForced) {
  TempDir dir;
  Engine engine(fast_config(dir));
  std::atomic<bool> release{false};
  std::atomic<int> started{0};
  engine.register_handler("block", [&](const Job&) {
    ++started;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  const int64_t running = engine.enqueue("q", "block", "{}");
  for (int i = 0; i < 4; ++i) engine.enqueue("q", "noop", "{}", later());
  const int64_t other = engine.enqueue("other", "noop", "{}", later());
  engine.set_rate_limit("q", RateLimit{5, 5});
  engine.set_rate_limit("other", RateLimit{5, 5});
  engine.set_key_weight("q", "a", 3);
  engine.start();
  ASSERT_TRUE(wait_until([&] { return counts_of(engine, "q").running == 1; }));

  Engine::QueueRemoval r = engine.remove_queue("q", false);
  EXPECT_EQ(r.running_refused, 1);
  EXPECT_EQ(r.deleted, 0);
  QueueStats s = counts_of(engine, "q");
  EXPECT_EQ(s.running, 1);
  EXPECT_EQ(s.scheduled, 4);
  EXPECT_FALSE(s.paused);  // as it was
  EXPECT_EQ(engine.key_overrides().size(), 1u);

  Engine::QueueRemoval total;
  int64_t after = 0, batches = 0;
  do {
    r = engine.remove_queue("q", true, after, 2);
    EXPECT_EQ(r.running_refused, 0);
    total.deleted += r.deleted;
    total.running_cancelled += r.running_cancelled;
    total.cancelled += r.cancelled;
    total.kept += r.kept;
    after = r.next_after_id;
    ++batches;
  } while (after != 0);
  EXPECT_EQ(batches, 3);
  EXPECT_EQ(total.deleted, 5);
  EXPECT_EQ(total.cancelled, 5);
  EXPECT_EQ(total.running_cancelled, 1);
  EXPECT_EQ(total.kept, 0);
  EXPECT_TRUE(r.override_removed);
  EXPECT_EQ(r.key_settings_removed, 1);
  EXPECT_FALSE(engine.get_job(running).has_value());
  s = counts_of(engine, "q");
  EXPECT_EQ(s.pending + s.scheduled + s.running + s.completed + s.failed + s.cancelled, 0);
  EXPECT_FALSE(s.paused);
  EXPECT_TRUE(engine.key_overrides().empty());
  bool other_limit = false, q_limit = false;
  for (const QueueReport& q : engine.queues()) {
    other_limit =
        other_limit || (q.stats.queue == "other" && q.limit.source == LimitSource::kOverride);
    q_limit = q_limit || (q.stats.queue == "q" && q.limit.source == LimitSource::kOverride);
  }
  EXPECT_TRUE(other_limit);
  EXPECT_FALSE(q_limit);
  ASSERT_TRUE(engine.get_job(other).has_value());
  // The handler ends; its result is refused (the job is gone), nothing comes back.
  release = true;
  engine.stop();
  EXPECT_FALSE(engine.get_job(running).has_value());
  EXPECT_EQ(started.load(), 1);

  EXPECT_TRUE(engine.remove_queue("never-seen", false).not_found);
  EXPECT_THROW(engine.remove_queue("bad queue", false), ValidationError);
}

}  // namespace
}  // namespace conveyor
