// Queues: pause and resume, list_queues, queue_stats.
#include "fixture.hpp"

namespace conveyor::conformance {
namespace {

class Pause : public ConformanceTest {};
class ListQueues : public ConformanceTest {};
class QueueStats : public ConformanceTest {};

std::string names(const std::vector<QueueCopy>& queues) {
  std::string out;
  for (const QueueCopy& q : queues) out += (out.empty() ? "" : ",") + q.queue;
  return out;
}

std::optional<QueueCopy> find(const std::vector<QueueCopy>& queues, const std::string& name) {
  for (const QueueCopy& q : queues)
    if (q.queue == name) return q;
  return std::nullopt;
}

TEST_F(Pause, StopsClaims) {
  auto h = open();
  h->add_all(std::vector<JobSpec>(3));
  h->pause("default", true, kT0);
  std::vector<JobCopy> jobs;
  Status s = h->claim("default", 10, next_lease_token(), kT0, kT0 + kLease, &jobs);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(jobs.empty()) << "a paused queue gave out " << jobs.size() << " job(s) "
                            << "(storage_plugin.h: \"a paused queue's claims return nothing\")";
}

TEST_F(Pause, ResumeRestoresClaims) {
  auto h = open();
  h->add_all(std::vector<JobSpec>(3));
  h->pause("default", true, kT0);
  h->pause("default", false, kT0 + 1);
  EXPECT_EQ(h->claim_jobs("default", 10, kT0 + 2).size(), 3u) << "resumed queue is still held";
}

TEST_F(Pause, AffectsOnlyThatQueue) {
  auto h = open();
  h->add(JobSpec{.queue = "held"});
  const int64_t free_id = h->add(JobSpec{.queue = "free"});
  h->pause("held", true, kT0);
  EXPECT_EQ(h->claim_one("free", kT0).id, free_id);
}

TEST_F(Pause, RunningJobsCanStillFinish) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  JobCopy running = h->claim_one("default", kT0);
  h->pause("default", true, kT0 + 1);
  h->complete_one(running.lease(), kT0 + 2);  // pausing stops claims, not work in progress
  EXPECT_STATE(h->job(id, kT0 + 2).state, CONVEYOR_JOB_COMPLETED);
}

TEST_F(Pause, QueueWithoutJobsCanBePausedAndIsListed) {
  auto h = open();
  h->pause("empty", true, kT0);  // storage_plugin.h: "Pausing a queue with no jobs is allowed"
  std::optional<QueueCopy> listed = find(h->queues(), "empty");
  ASSERT_TRUE(listed) << "list_queues does not list a paused queue (storage_plugin.h list_queues: "
                         "\"every queue the storage knows (enqueued into at least once, or "
                         "paused)\")";
  EXPECT_EQ(listed->paused, 1);
  std::optional<StatsCopy> stats = h->stats_of("empty", kT0);
  ASSERT_TRUE(stats) << "queue_stats does not report a paused queue (storage_plugin.h "
                        "queue_stats: \"every queue that has retained jobs or is paused\")";
  EXPECT_EQ(stats->paused, 1);
  // A job enqueued later finds the queue paused.
  h->add(JobSpec{.queue = "empty"});
  EXPECT_TRUE(h->claim_jobs("empty", 10, kT0).empty()) << "pausing before the first job was lost";
}

TEST_F(Pause, PausedFlagIsReportedAndCleared) {
  auto h = open();
  h->add(JobSpec{.queue = "alpha"});
  h->add(JobSpec{.queue = "bravo"});
  h->pause("alpha", true, kT0);
  std::vector<QueueCopy> q = h->queues();
  ASSERT_TRUE(find(q, "alpha") && find(q, "bravo")) << "listed: " << names(q);
  EXPECT_EQ(find(q, "alpha")->paused, 1);
  EXPECT_EQ(find(q, "bravo")->paused, 0);
  EXPECT_EQ(h->stats_of("alpha", kT0).value_or(StatsCopy{}).paused, 1);
  EXPECT_EQ(h->stats_of("bravo", kT0).value_or(StatsCopy{}).paused, 0);
  h->pause("alpha", false, kT0 + 1);
  EXPECT_EQ(find(h->queues(), "alpha").value_or(QueueCopy{}).paused, 0);
  std::optional<StatsCopy> resumed = h->stats_of("alpha", kT0 + 1);
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->paused, 0);
}

TEST_F(ListQueues, ListsEnqueuedQueuesInNameOrder) {
  auto h = open();
  EXPECT_TRUE(h->queues().empty());
  for (const char* q : {"charlie", "alpha", "delta", "bravo", "alpha"}) h->add(JobSpec{.queue = q});
  std::vector<QueueCopy> q = h->queues();
  EXPECT_EQ(names(q), "alpha,bravo,charlie,delta")
      << "storage_plugin.h list_queues: every queue enqueued into, once each, \"in name order\"";
  for (const QueueCopy& e : q) EXPECT_EQ(e.paused, 0) << e.queue;
}

TEST_F(ListQueues, KeepsQueuesWhoseJobsAreDone) {
  auto h = open();
  h->add(JobSpec{.queue = "busy"});
  h->add(JobSpec{.queue = "done"});
  h->complete_one(h->claim_one("done", kT0).lease(), kT0 + 1);
  std::vector<QueueCopy> q = h->queues();
  EXPECT_TRUE(find(q, "done")) << "a queue with retained jobs vanished: " << names(q);
  EXPECT_TRUE(find(q, "busy"));
}

TEST_F(QueueStats, CountsEveryState) {
  auto h = open();
  const int64_t now = kT0 + 100 * kSecond;
  // Queue "q": pending 2, scheduled 1, running 1, completed 1, failed 1,
  // cancelled 1. Queue "other": 4 pending, counted apart.
  h->add_all({JobSpec{.queue = "q", .run_at_us = kT0}, JobSpec{.queue = "q", .run_at_us = now}});
  h->add(JobSpec{.queue = "q", .run_at_us = now + 1});
  h->add_all(std::vector<JobSpec>(4, JobSpec{.queue = "other"}));
  // The three lowest priorities are claimed first: one stays running, one
  // completes, one fails for good.
  const int64_t running = h->add(JobSpec{.queue = "q", .priority = -3, .run_at_us = kT0 - 3});
  const int64_t completed = h->add(JobSpec{.queue = "q", .priority = -2, .run_at_us = kT0 - 2});
  const int64_t failed = h->add(JobSpec{.queue = "q", .priority = -1, .run_at_us = kT0 - 1});
  std::vector<JobCopy> three = h->claim_jobs("q", 3, kT0);
  ASSERT_EQ(three.size(), 3u);
  for (const JobCopy& j : three) {
    if (j.id == completed) h->complete_one(j.lease(), kT0 + 1);
    if (j.id == failed) {
      ASSERT_TRUE(h->fail(j.lease(), "x", -1, kT0 + 1).ok());
    }
    if (j.id != running && j.id != completed && j.id != failed)
      FAIL() << "claimed job " << j.id << " is not one of the three lowest priorities";
  }
  const int64_t cancelled = h->add(JobSpec{.queue = "q"});
  ASSERT_TRUE(h->cancel(cancelled, kT0 + 1).ok());

  std::optional<StatsCopy> s = h->stats_of("q", now);
  ASSERT_TRUE(s) << "queue_stats does not report queue 'q'";
  EXPECT_EQ(s->pending, 2) << "AVAILABLE and run_at <= now (run_at == now counts as pending)";
  EXPECT_EQ(s->scheduled, 1) << "AVAILABLE and run_at > now";
  EXPECT_EQ(s->running, 1);
  EXPECT_EQ(s->completed, 1);
  EXPECT_EQ(s->failed, 1);
  EXPECT_EQ(s->cancelled, 1);
  EXPECT_EQ(s->paused, 0);
  std::optional<StatsCopy> other = h->stats_of("other", now);
  ASSERT_TRUE(other) << "queue_stats does not report queue 'other'";
  EXPECT_EQ(other->pending, 4);
  EXPECT_EQ(other->running + other->completed + other->failed + other->cancelled, 0);
}

TEST_F(QueueStats, ScheduledBecomesPendingByNow) {
  auto h = open();
  h->add_all({JobSpec{.run_at_us = kT0 + 10 * kSecond}, JobSpec{.run_at_us = kT0 + 20 * kSecond}});
  auto at = [&](int64_t now) {
    std::optional<StatsCopy> s = h->stats_of("default", now);
    return s ? std::make_pair(s->pending, s->scheduled) : std::make_pair(int64_t{-1}, int64_t{-1});
  };
  EXPECT_EQ(at(kT0), std::make_pair(int64_t{0}, int64_t{2}))
      << "(pending, scheduled) must be judged by the now_us passed to queue_stats";
  EXPECT_EQ(at(kT0 + 10 * kSecond), std::make_pair(int64_t{1}, int64_t{1}));
  EXPECT_EQ(at(kT0 + 30 * kSecond), std::make_pair(int64_t{2}, int64_t{0}));
}

TEST_F(QueueStats, ReportsQueuesInNameOrder) {
  auto h = open();
  for (const char* q : {"delta", "alpha", "charlie", "bravo"}) h->add(JobSpec{.queue = q});
  std::string order;
  for (const StatsCopy& s : h->stats(kT0)) order += (order.empty() ? "" : ",") + s.queue;
  EXPECT_EQ(order, "alpha,bravo,charlie,delta")
      << "storage_plugin.h queue_stats: \"one on_stats call per queue, in name order\"";
}

TEST_F(QueueStats, CountsFollowTheJobsLife) {
  auto h = open();
  h->add(JobSpec{});
  auto sum = [](const StatsCopy& s) {
    return s.pending + s.scheduled + s.running + s.completed + s.failed + s.cancelled;
  };
  JobCopy j = h->claim_one("default", kT0);
  StatsCopy mid = h->stats_of("default", kT0).value_or(StatsCopy{});
  EXPECT_EQ(mid.running, 1);
  EXPECT_EQ(sum(mid), 1) << "one job is counted once";
  h->complete_one(j.lease(), kT0 + 1);
  StatsCopy end = h->stats_of("default", kT0 + 1).value_or(StatsCopy{});
  EXPECT_EQ(end.completed, 1);
  EXPECT_EQ(sum(end), 1);
}

}  // namespace
}  // namespace conveyor::conformance
