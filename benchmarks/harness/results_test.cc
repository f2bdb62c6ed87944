// Putting interleaved repeats together: runs appended in order, medians and
// spreads over all of them, references matched by name.
#include "results.hpp"
#include "sample_stats.hpp"

#include <gtest/gtest.h>

namespace conveyor::bench {
namespace {

DrainResult drain_of(std::vector<double> rates, std::optional<double> cpu = std::nullopt) {
  DrainResult d;
  for (double r : rates) {
    DrainRun run;
    run.jobs_per_sec = r;
    run.enqueue_jobs_per_sec = r * 2;
    run.server_cpu_us_per_job = cpu;
    d.runs.push_back(run);
  }
  return d;
}

TEST(AppendRuns, DrainMediansCoverEveryRun) {
  DrainResult d = drain_of({100});
  append_runs(d, drain_of({300}, 7.0));
  append_runs(d, drain_of({200}, 9.0));
  ASSERT_EQ(d.runs.size(), 3u);
  EXPECT_EQ(d.rates(), (std::vector<double>{100, 300, 200}));
  EXPECT_EQ(d.median_jobs_per_sec, 200);
  EXPECT_EQ(d.median_enqueue_jobs_per_sec, 400);
  EXPECT_EQ(min_of(d.rates()), 100);
  EXPECT_EQ(max_of(d.rates()), 300);
  // Only the runs that measured the server's CPU count towards its median.
  EXPECT_EQ(d.median_server_cpu_us_per_job(), 8.0);
  EXPECT_FALSE(drain_of({1, 2}).median_server_cpu_us_per_job());
}

TEST(AppendRuns, ReferencesAreMatchedByName) {
  ReferenceResult claim{"sqlite-claim", "", 1, 100, 1000, {10}, 10, {}};
  ReferenceResult both{"sqlite-claim-complete", "", 1, 100, 1000, {5}, 5, {1.5}};
  std::vector<ReferenceResult> refs{claim, both};
  ReferenceResult both2 = both;
  both2.runs_jobs_per_sec = {7};
  both2.runs_server_cpu_us_per_job = {2.5};
  ReferenceResult pg{"postgres-claim-complete", "", 4, 100, 1000, {3}, 3, {}};
  append_runs(refs, {both2, pg});
  ASSERT_EQ(refs.size(), 3u);
  EXPECT_EQ(refs[0].runs_jobs_per_sec, (std::vector<double>{10}));
  EXPECT_EQ(refs[1].runs_jobs_per_sec, (std::vector<double>{5, 7}));
  EXPECT_EQ(refs[1].median_jobs_per_sec, 6);
  EXPECT_EQ(refs[1].runs_server_cpu_us_per_job, (std::vector<double>{1.5, 2.5}));
  EXPECT_EQ(refs[2].name, "postgres-claim-complete");
}

TEST(SampleStats, MinAndMaxOfNothingIsZero) {
  EXPECT_EQ(min_of({}), 0);
  EXPECT_EQ(max_of({}), 0);
  EXPECT_EQ(min_of({3, -1, 2}), -1);
  EXPECT_EQ(max_of({3, -1, 2}), 3);
}

}  // namespace
}  // namespace conveyor::bench
