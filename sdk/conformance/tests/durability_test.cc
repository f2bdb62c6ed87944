// CONVEYOR_CAP_DURABLE: "Data survives close and process exit".
#include "fixture.hpp"

namespace conveyor::conformance {
namespace {

class Durability : public ConformanceTest {};

TEST_F(Durability, EverythingSurvivesCloseAndReopen) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_DURABLE);
  int64_t available, scheduled, running, completed, failed;
  JobCopy lease_holder;
  {
    auto h = open();
    available = h->add(JobSpec{.queue = "work",
                               .kind = "a",
                               .payload = std::string("p\0q", 3),
                               .priority = 4,
                               .max_attempts = 6});
    scheduled = h->add(JobSpec{.queue = "work", .run_at_us = kT0 + 1000 * kSecond});
    running = h->add(JobSpec{.queue = "run", .priority = -1});
    completed = h->add(JobSpec{.queue = "run"});
    failed = h->add(JobSpec{.queue = "run"});
    std::vector<JobCopy> three = h->claim_jobs("run", 3, kT0);
    if (three.size() != 3) FAIL() << "claimed " << three.size() << " of 3";
    for (const JobCopy& j : three) {
      if (j.id == running) lease_holder = j;
      if (j.id == completed) h->complete_one(j.lease(), kT0 + 1);
      if (j.id == failed) {
        ASSERT_TRUE(h->fail(j.lease(), "gone", -1, kT0 + 2).ok());
      }
    }
    ASSERT_TRUE(h->set_rate_limit("work", 2.5, 3, kT0).ok());
    h->pause("held", true, kT0);
  }
  auto h = open();  // a new handle on the same storage, as after a restart
  JobCopy a = h->job(available, kT0);
  EXPECT_STATE(a.state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(a.payload, std::string("p\0q", 3));
  EXPECT_EQ(a.priority, 4);
  EXPECT_EQ(a.max_attempts, 6);
  EXPECT_STATE(h->job(scheduled, kT0).state, CONVEYOR_JOB_SCHEDULED);
  JobCopy r = h->job(running, kT0);
  EXPECT_STATE(r.state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(r.lease_token, lease_holder.lease_token) << "the lease did not survive";
  JobCopy c = h->job(completed, kT0);
  EXPECT_STATE(c.state, CONVEYOR_JOB_COMPLETED);
  EXPECT_EQ(c.finalized_at, kT0 + 1);
  JobCopy f = h->job(failed, kT0);
  EXPECT_STATE(f.state, CONVEYOR_JOB_FAILED);
  EXPECT_EQ(f.last_error, "gone");
  std::vector<LimitCopy> limits = h->limits();
  ASSERT_EQ(limits.size(), 1u) << "the rate-limit override did not survive";
  EXPECT_EQ(limits[0].rate_per_sec, 2.5);
  EXPECT_EQ(limits[0].burst, 3u);
  bool held_paused = false;
  for (const QueueCopy& q : h->queues())
    if (q.queue == "held") held_paused = q.paused == 1;
  EXPECT_TRUE(held_paused) << "the paused flag did not survive (storage_plugin.h "
                              "set_queue_paused: \"Pauses ... durably\")";
  // The worker that held the lease before the restart can still finish.
  EXPECT_STATUS(h->complete_all({lease_holder.lease()}, kT0 + 3).at(0), CONVEYOR_OK);
  // New ids do not collide with old ones.
  EXPECT_GT(h->add(JobSpec{}), failed);
}

}  // namespace
}  // namespace conveyor::conformance
