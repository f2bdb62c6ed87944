// enqueue: ids, atomic batches, validation.
#include "fixture.hpp"

#include <set>

namespace conveyor::conformance {
namespace {

class Enqueue : public ConformanceTest {};

// Nothing of the rejected batch may be stored: no job claimable, no count.
void expect_nothing_stored(Handle& h, const std::string& queue) {
  std::vector<JobCopy> claimed = h.claim_jobs(queue, 10, kT0 + 10 * kSecond);
  EXPECT_TRUE(claimed.empty()) << claimed.size() << " job(s) of the rejected batch were stored "
                               << "(storage_plugin.h enqueue: \"atomically: all or none\")";
  if (auto s = h.stats_of(queue, kT0)) {
    EXPECT_EQ(s->pending + s->scheduled + s->running + s->completed + s->failed + s->cancelled, 0)
        << "queue_stats counts jobs of the rejected batch";
  }
}

TEST_F(Enqueue, ReturnsPositiveDistinctIncreasingIds) {
  auto h = open();
  std::vector<int64_t> first = h->add_all({JobSpec{}, JobSpec{}, JobSpec{}});
  std::vector<int64_t> second = h->add_all({JobSpec{}, JobSpec{}});
  std::vector<int64_t> all = first;
  all.insert(all.end(), second.begin(), second.end());
  for (int64_t id : all) EXPECT_GT(id, 0) << "storage_plugin.h conveyor_job.id: \"> 0\"";
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), all.size())
      << "ids are not distinct (storage_plugin.h: \"unique within the storage\")";
  for (size_t i = 1; i < all.size(); ++i)
    EXPECT_LT(all[i - 1], all[i])
        << "ids do not increase in enqueue order: the claim tie-break \"priority, run_at, id\" "
           "would not be first-in first-out";
}

TEST_F(Enqueue, IdsNameTheJobsInOrder) {
  auto h = open();
  std::vector<int64_t> ids =
      h->add_all({JobSpec{.kind = "first"}, JobSpec{.kind = "second"}, JobSpec{.kind = "third"}});
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(h->job(ids[0], kT0).kind, "first");
  EXPECT_EQ(h->job(ids[1], kT0).kind, "second");
  EXPECT_EQ(h->job(ids[2], kT0).kind, "third")
      << "storage_plugin.h enqueue: \"out_ids ... receives the new ids in order\"";
}

TEST_F(Enqueue, NewJobIsAvailableOrScheduledByRunAt) {
  auto h = open();
  const int64_t ready = h->add(JobSpec{.run_at_us = kT0});
  const int64_t later = h->add(JobSpec{.run_at_us = kT0 + kSecond});
  JobCopy r = h->job(ready, kT0);
  EXPECT_STATE(r.state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(r.attempt, 0) << "no attempt has started";
  JobCopy l = h->job(later, kT0);
  EXPECT_STATE(l.state, CONVEYOR_JOB_SCHEDULED)
      << " (storage_plugin.h: \"run_at in the future: reported as "
      << "SCHEDULED\"; the future is judged by the now_us passed to get_job)";
  EXPECT_STATE(h->job(later, kT0 + kSecond).state, CONVEYOR_JOB_AVAILABLE)
      << "at now_us == run_at_us the job is ready";
}

TEST_F(Enqueue, EmptyKindRejectsTheWholeBatch) {
  auto h = open();
  std::vector<int64_t> ids;
  Status s = h->enqueue(
      {JobSpec{.queue = "batch"}, JobSpec{.queue = "batch", .kind = ""}, JobSpec{.queue = "batch"}},
      &ids);
  EXPECT_STATUS(s.code, CONVEYOR_E_INVALID)
      << s << " (storage_plugin.h conveyor_new_job.kind: \"non-empty\")";
  expect_nothing_stored(*h, "batch");
}

TEST_F(Enqueue, ZeroMaxAttemptsRejectsTheWholeBatch) {
  auto h = open();
  std::vector<int64_t> ids;
  Status s = h->enqueue({JobSpec{.queue = "batch"}, JobSpec{.queue = "batch", .max_attempts = 0},
                         JobSpec{.queue = "batch"}},
                        &ids);
  EXPECT_STATUS(s.code, CONVEYOR_E_INVALID)
      << s << " (storage_plugin.h conveyor_new_job.max_attempts: \">= 1\")";
  expect_nothing_stored(*h, "batch");
}

TEST_F(Enqueue, NegativeMaxAttemptsRejectsTheWholeBatch) {
  auto h = open();
  std::vector<int64_t> ids;
  Status s = h->enqueue({JobSpec{.queue = "batch"}, JobSpec{.queue = "batch"},
                         JobSpec{.queue = "batch", .max_attempts = -1}},
                        &ids);
  EXPECT_STATUS(s.code, CONVEYOR_E_INVALID)
      << s << " (storage_plugin.h conveyor_new_job.max_attempts: \">= 1\")";
  expect_nothing_stored(*h, "batch");
}

TEST_F(Enqueue, StorageStaysUsableAfterARejectedBatch) {
  auto h = open();
  Status bad = h->enqueue({JobSpec{.queue = "batch", .kind = ""}}, nullptr);
  ASSERT_STATUS(bad.code, CONVEYOR_E_INVALID) << bad;
  const int64_t id = h->add(JobSpec{.queue = "batch"});
  EXPECT_EQ(h->claim_one("batch", kT0).id, id);
}

TEST_F(Enqueue, EmptyBatchIsANoOp) {
  auto h = open();
  conveyor_error err = poisoned_error();
  // storage_plugin.h enqueue: "n == 0 is a no-op" (so the arrays may be NULL).
  const conveyor_status code = table().enqueue(h->raw(), nullptr, 0, nullptr, &err);
  EXPECT_STATUS(code, CONVEYOR_OK) << ": " << err.message;
  EXPECT_TRUE(h->queues().empty()) << "an empty batch created a queue";
}

TEST_F(Enqueue, LongestQueueNameRoundTrips) {
  auto h = open();
  // Queue names are [A-Za-z0-9][A-Za-z0-9._:-]{0,127}: 128 characters at most.
  std::string name = "Q";
  while (name.size() < 128) name += "a0._:-"[name.size() % 6];
  const int64_t id = h->add(JobSpec{.queue = name});
  EXPECT_EQ(h->job(id, kT0).queue, name);
  EXPECT_EQ(h->claim_one(name, kT0).id, id);
}

}  // namespace
}  // namespace conveyor::conformance
