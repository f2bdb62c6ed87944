// Jobs of a kind no handler of this engine serves, on the SQLite plugin (ABI
// 1.1, claim_kinds) through the real loader: they wait as pending, unspent,
// while the served kinds of the same queue run, and after the grace period
// queue reports name them per queue and kind.
#include "test_support.hpp"

#include <conveyor/clock.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/internal/engine_internals.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <vector>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using test::TempDir;

std::optional<QueueReport> report_of(Engine& engine, const std::string& queue) {
  for (QueueReport& r : engine.queues())
    if (r.stats.queue == queue) return r;
  return std::nullopt;
}

TEST(EngineUnknownKinds, AnUnservedJobStaysPendingAndUntouchedWhileServedJobsRun) {
  TempDir dir;
  Config c = test::sqlite_config(dir);
  c.engine.poll_interval_ms = 20;
  Engine engine(c);
  std::atomic<int> ran{0};
  engine.register_handler("work", [&](const Job&) { ran++; });
  std::vector<int64_t> unserved;
  // Interleaved and ahead in claim order: they must not block the served ones.
  for (int i = 0; i < 100; ++i) {
    if (i % 10 == 0) unserved.push_back(engine.enqueue("q", "send_email"));
    engine.enqueue("q", "work");
  }
  std::map<int64_t, int64_t> run_at;  // as enqueued
  for (int64_t id : unserved) run_at[id] = engine.get_job(id)->run_at_us;
  engine.start();
  ASSERT_TRUE(test::wait_until([&] {
    auto r = report_of(engine, "q");
    return r && r->stats.completed == 100;
  })) << "the served jobs did not all run";
  // A few more polls of a queue holding only unserved jobs.
  const uint64_t dispatched =
      EngineInternals::metrics(engine).queue("q").dispatched.load(std::memory_order_relaxed);
  engine.enqueue("q", "work");
  ASSERT_TRUE(test::wait_until([&] { return ran.load() == 101; }));
  engine.stop();
  EXPECT_EQ(EngineInternals::metrics(engine).queue("q").dispatched.load(), dispatched + 1)
      << "only the served job was claimed";
  for (int64_t id : unserved) {
    std::optional<Job> j = engine.get_job(id);
    ASSERT_TRUE(j);
    EXPECT_EQ(j->state, JobState::kAvailable) << "job " << id;
    EXPECT_EQ(j->attempt, 0) << "job " << id << " was claimed";
    EXPECT_EQ(j->last_error, "") << "job " << id;
    // A plain claim may take it and give it back: its place and age are kept.
    EXPECT_EQ(j->run_at_us, run_at[id]) << "job " << id;
  }
  auto r = report_of(engine, "q");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->stats.pending, 10);
  EXPECT_EQ(r->stats.failed, 0);
}

TEST(EngineUnknownKinds, ReportedPerQueueAndKindAfterTheGracePeriodAndNotBefore) {
  TempDir dir;
  Config c = test::sqlite_config(dir);
  c.engine.unknown_kind_grace_s = 60;
  ManualClock clock;
  Engine engine(c, clock);  // not started: the test runs the scan itself
  engine.register_handler("work", [](const Job&) {});
  for (int i = 0; i < 3; ++i) engine.enqueue("mail", "send_email");
  for (int i = 0; i < 2; ++i) engine.enqueue("mail", "resize");
  for (int i = 0; i < 4; ++i) engine.enqueue("mail", "work");
  engine.enqueue("other", "work");
  EnqueueOptions later;
  later.delay = 1h;  // scheduled, not pending: never counted
  engine.enqueue("mail", "send_email", "{}", later);

  EngineInternals::scan_unserved_kinds(engine);
  EXPECT_TRUE(EngineInternals::unserved_kinds(engine).empty()) << "just enqueued";
  clock.advance(59s);
  EngineInternals::scan_unserved_kinds(engine);
  EXPECT_TRUE(EngineInternals::unserved_kinds(engine).empty()) << "still within the grace";
  ASSERT_TRUE(report_of(engine, "mail"));
  EXPECT_TRUE(report_of(engine, "mail")->unserved_kinds.empty());

  clock.advance(1s);
  EngineInternals::scan_unserved_kinds(engine);
  const std::vector<KindCount> expected{{"resize", 2}, {"send_email", 3}};
  auto unserved = EngineInternals::unserved_kinds(engine);
  ASSERT_EQ(unserved.size(), 1u) << "queue other has only served jobs";
  EXPECT_EQ(unserved["mail"], expected);
  EXPECT_EQ(report_of(engine, "mail")->unserved_kinds, expected);
  EXPECT_TRUE(report_of(engine, "other")->unserved_kinds.empty());

  // A handler for one of them: the next scan drops that kind.
  engine.register_handler("resize", [](const Job&) {});
  EngineInternals::scan_unserved_kinds(engine);
  EXPECT_EQ(report_of(engine, "mail")->unserved_kinds, (std::vector<KindCount>{{"send_email", 3}}));
}

}  // namespace
}  // namespace conveyor
