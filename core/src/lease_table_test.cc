#include "lease_table.hpp"

#include <gtest/gtest.h>

namespace conveyor {
namespace {

Job job(int64_t id, int64_t token) {
  Job j;
  j.id = id;
  j.lease_token = token;
  j.queue = "q";
  j.kind = "k";
  return j;
}

TEST(LeaseTable, HeartbeatsSeeOnlyHandlersStillRunning) {
  LeaseTable t;
  std::vector<Job> jobs{job(1, 10), job(2, 20)};
  t.add(jobs);
  EXPECT_EQ(t.running().size(), 2u);
  t.mark_handler_done({1, 10});
  ASSERT_EQ(t.running().size(), 1u);
  EXPECT_EQ(t.running()[0].job_id, 2);
  EXPECT_FALSE(t.handler_running({1, 10}));
  EXPECT_TRUE(t.handler_running({2, 20}));
  EXPECT_EQ(t.size(), 2u) << "a finished handler's lease stays until settled";
}

TEST(LeaseTable, ALeaseIsSettledOnceAndOnlyByItsToken) {
  LeaseTable t;
  // The same job claimed twice (rescued, then claimed again here).
  std::vector<Job> jobs{job(1, 10), job(1, 11)};
  t.add(jobs);
  EXPECT_FALSE(t.settle({1, 99}));
  EXPECT_TRUE(t.settle({1, 10}));
  EXPECT_FALSE(t.settle({1, 10}));
  EXPECT_TRUE(t.handler_running({1, 11}));
  EXPECT_TRUE(t.settle({1, 11}));
  EXPECT_EQ(t.size(), 0u);
}

TEST(LeaseTable, RunningJobsNameTheirQueueAndKind) {
  LeaseTable t;
  std::vector<Job> jobs{job(7, 70)};
  t.add(jobs);
  auto running = t.running_jobs();
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0].queue, "q");
  EXPECT_EQ(running[0].kind, "k");
  EXPECT_EQ(running[0].lease.lease_token, 70);
}

}  // namespace
}  // namespace conveyor
