// What a plugin reports through callbacks: well-formed structs, valid strings,
// and only while the call that was given the callback is running.
#include "call_context.hpp"
#include "fixture.hpp"

#include <cstddef>

#include <algorithm>

namespace conveyor::conformance {
namespace {

class Callbacks : public ConformanceTest {};

// Every reporting call, twice: a plugin that keeps a callback for later gets
// the chance to call it.
void report_everything(Handle& h) {
  require_ok(h.set_rate_limit("cb", 1, 1, kT0));
  for (int round = 0; round < 2; ++round) {
    const int64_t id = h.add(JobSpec{.queue = "cb", .payload = "payload"});
    h.claim_jobs("cb", 1, kT0);
    h.job(id, kT0);
    h.stats(kT0);
    h.queues();
    h.limits();
  }
}

TEST_F(Callbacks, ArriveOnlyDuringTheCall) {
  {
    auto h = open();
    report_everything(*h);
  }  // closed: "close ... Releases the handle and everything it owns"
  std::vector<std::string> late = take_late_callbacks();
  EXPECT_TRUE(late.empty()) << late.size() << " callback(s) arrived after their call returned, "
                            << "the first from " << (late.empty() ? "" : late[0]);
}

TEST_F(Callbacks, ReportedStructsCoverAbi10) {
  auto h = open();
  const int64_t id = h->add(JobSpec{.queue = "cb"});
  require_ok(h->set_rate_limit("cb", 1, 1, kT0));
  // storage_plugin.h rule 5: struct_size = sizeof as built, so at least the
  // 1.0 size; the copies also check every field's own rule.
  // conveyor_job and conveyor_rate_limit grew in 1.2 (cost, scope): 1.0 ends before.
  EXPECT_GE(h->job(id, kT0).struct_size, offsetof(conveyor_job, cost));
  EXPECT_GE(h->claim_one("cb", kT0).struct_size, offsetof(conveyor_job, cost));
  std::vector<StatsCopy> stats = h->stats(kT0);
  ASSERT_FALSE(stats.empty());
  // conveyor_queue_stats grew in 1.1 (oldest_pending_run_at_us): 1.0 ends before it.
  EXPECT_GE(stats[0].struct_size, offsetof(conveyor_queue_stats, oldest_pending_run_at_us));
  std::vector<LimitCopy> limits = h->limits();
  ASSERT_FALSE(limits.empty());
  EXPECT_GE(limits[0].struct_size, offsetof(conveyor_rate_limit, scope));
}

TEST_F(Callbacks, StringsHoldTheirBytesDuringTheCallback) {
  // The copies are made inside the callback; were a string already freed or
  // reused, its bytes would differ (and a sanitizer build would report it).
  auto h = open();
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 20; ++i)
    jobs.push_back(JobSpec{.queue = "strings",
                           .kind = "kind-" + std::to_string(i),
                           .payload = std::string(100 + i, static_cast<char>('a' + i))});
  std::vector<int64_t> ids = h->add_all(jobs);
  std::vector<JobCopy> claimed = h->claim_jobs("strings", 20, kT0);
  ASSERT_EQ(claimed.size(), 20u);
  for (const JobCopy& j : claimed) {
    const size_t i = static_cast<size_t>(std::find(ids.begin(), ids.end(), j.id) - ids.begin());
    ASSERT_LT(i, jobs.size()) << "claimed an unknown id " << j.id;
    EXPECT_EQ(j.kind, jobs[i].kind);
    EXPECT_EQ(j.payload, jobs[i].payload);
    EXPECT_EQ(j.queue, "strings");
  }
}

}  // namespace
}  // namespace conveyor::conformance
