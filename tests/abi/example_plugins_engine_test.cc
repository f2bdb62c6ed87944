// The example plugins (sdk/examples, and the C one built against the frozen
// 1.0 header) under the real engine: handlers run every job once, a failed
// attempt is retried, a rate-limit override and a pause are stored in the
// plugin and honoured, and the queue report counts what happened. This is
// "everything in Conveyor works on their backend" at the engine's level; the
// conformance runs check each ABI function on its own.
#include "test_support.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/internal/engine_internals.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <ostream>
#include <string>

namespace conveyor {
namespace {

using namespace std::chrono_literals;

struct ExamplePlugin {
  const char* label;
  const char* path;
};
// Names the parameter in test output (and CTest names) by its label.
void PrintTo(const ExamplePlugin& plugin, std::ostream* out) { *out << plugin.label; }

class ExamplePluginEngine : public ::testing::TestWithParam<ExamplePlugin> {
 protected:
  Config config() const {
    Config c;
    c.storage.plugin = GetParam().path;
    // A store of its own, whatever else this process has open.
    c.storage.options = {{"name", ::testing::UnitTest::GetInstance()->current_test_info()->name()}};
    c.engine.poll_interval_ms = 50;
    c.engine.retry_backoff_base_ms = 10;
    c.engine.retry_backoff_max_ms = 10;
    return c;
  }
};

std::optional<QueueReport> report_of(Engine& engine, const std::string& queue) {
  for (QueueReport& r : engine.queues())
    if (r.stats.queue == queue) return r;
  return std::nullopt;
}

TEST_P(ExamplePluginEngine, RunsEveryJobOnceAndRetriesAFailedAttempt) {
  Engine engine(config());
  std::mutex mu;
  std::map<std::string, int> runs;  // payload -> attempts seen
  engine.register_handler("work", [&](const Job& job) {
    std::lock_guard lock(mu);
    if (++runs[job.payload] == 1 && job.payload == "\"flaky\"")
      throw std::runtime_error("first attempt fails");
  });
  engine.start();
  constexpr int kJobs = 200;
  for (int i = 0; i < kJobs; ++i) engine.enqueue("work", "work", std::to_string(i));
  const int64_t flaky = engine.enqueue("work", "work", "\"flaky\"");
  ASSERT_TRUE(test::wait_until([&] {
    auto r = report_of(engine, "work");
    return r && r->stats.completed == kJobs + 1;
  })) << "the jobs did not all complete";
  engine.stop();
  std::lock_guard lock(mu);
  EXPECT_EQ(runs.size(), size_t{kJobs + 1});
  for (const auto& [payload, n] : runs)
    EXPECT_EQ(n, payload == "\"flaky\"" ? 2 : 1) << "job " << payload;
  std::optional<Job> j = engine.get_job(flaky);
  ASSERT_TRUE(j);
  EXPECT_EQ(j->state, JobState::kCompleted);
  EXPECT_EQ(j->attempt, 2);
  EXPECT_EQ(j->last_error, "first attempt fails");
}

TEST_P(ExamplePluginEngine, OverridesAndPausesAreStoredAndHonoured) {
  Engine engine(config());
  std::atomic<int> ran{0};
  engine.register_handler("work", [&](const Job&) { ran.fetch_add(1); });
  engine.set_rate_limit("limited", RateLimit{1000, 5});
  engine.set_queue_paused("held", true);
  engine.start();
  for (int i = 0; i < 20; ++i) engine.enqueue("limited", "work");
  engine.enqueue("held", "work");
  // Completions are committed in groups, shortly after the handlers return.
  auto all_completed = [&] {
    auto r = report_of(engine, "limited");
    return r && r->stats.completed == 20;
  };
  ASSERT_TRUE(test::wait_until(all_completed)) << ran.load() << " of 20 handlers ran";
  auto limited = report_of(engine, "limited");
  ASSERT_TRUE(limited);
  EXPECT_EQ(limited->limit.source, LimitSource::kOverride);
  ASSERT_TRUE(limited->limit.limit);
  EXPECT_EQ(limited->limit.limit->rate_per_sec, 1000);
  EXPECT_EQ(limited->limit.limit->burst, 5u);
  auto held = report_of(engine, "held");
  ASSERT_TRUE(held);
  EXPECT_TRUE(held->stats.paused);
  EXPECT_EQ(held->stats.pending, 1) << "a paused queue's job ran";
  engine.set_queue_paused("held", false);
  EXPECT_TRUE(test::wait_until([&] { return ran.load() == 21; })) << "resuming did not run it";
  engine.stop();
}

INSTANTIATE_TEST_SUITE_P(
    Examples, ExamplePluginEngine,
    ::testing::Values(ExamplePlugin{"memory_c", CONVEYOR_EXAMPLE_MEMORY_C},
                      ExamplePlugin{"memory_cpp", CONVEYOR_EXAMPLE_MEMORY_CPP},
                      ExamplePlugin{"memory_c_built_against_v1_0", CONVEYOR_ABI_V1_0_PLUGIN}),
    [](const ::testing::TestParamInfo<ExamplePlugin>& info) { return info.param.label; });

// A 1.0 plugin has no claim_kinds: the engine claims every kind, so a job no
// handler here runs is claimed too. It must not sit through 25 silent
// attempts: engine.unknown_kind = "fail" (the default) fails it at once,
// naming the kind and what this process serves; "retry" retries it.
Config v1_0_config(EngineConfig::UnknownKind policy) {
  Config c;
  c.storage.plugin = CONVEYOR_ABI_V1_0_PLUGIN;
  c.storage.options = {{"name", ::testing::UnitTest::GetInstance()->current_test_info()->name()}};
  c.engine.poll_interval_ms = 20;
  c.engine.retry_backoff_base_ms = 1;
  c.engine.retry_backoff_max_ms = 1;
  c.engine.unknown_kind = policy;
  return c;
}

TEST(V1_0PluginUnknownKind, FailsTheJobAtOnceNamingTheKindAndTheServedKinds) {
  Engine engine(v1_0_config(EngineConfig::UnknownKind::kFail));
  engine.register_handler("work", [](const Job&) {});
  engine.register_handler("noop", [](const Job&) {});
  const int64_t id = engine.enqueue("q", "send_email");  // max_attempts: the default 25
  const int64_t served = engine.enqueue("q", "work");
  engine.start();
  ASSERT_TRUE(test::wait_until([&] {
    auto j = engine.get_job(id);
    return j && j->state == JobState::kFailed;
  }));
  ASSERT_TRUE(
      test::wait_until([&] { return engine.get_job(served)->state == JobState::kCompleted; }));
  engine.stop();
  std::optional<Job> j = engine.get_job(id);
  EXPECT_EQ(j->attempt, 1) << "failed at its first attempt";
  EXPECT_EQ(j->last_error,
            "no handler for job kind 'send_email' in this process (it serves: noop, work); "
            "engine.unknown_kind = fail");
}

TEST(V1_0PluginRemoteWorkers, ClaimsAreRefusedNamingThePluginAndTheSlot) {
  Engine engine(v1_0_config(EngineConfig::UnknownKind::kFail));
  engine.start();
  RemoteWorkers::ClaimRequest r;
  r.queues = {{"q", 1}};
  r.kinds = {"py"};
  try {
    EngineInternals::remote_workers(engine).claim(
        r, [](RemoteWorkers::Claimed&&) { ADD_FAILURE() << "a refused claim was answered"; });
    ADD_FAILURE() << "a 1.0 plugin served a remote claim";
  } catch (const StorageError& e) {
    EXPECT_EQ(e.code(), CONVEYOR_E_UNSUPPORTED);
    EXPECT_NE(std::string(e.what()).find("implements ABI 1.0; remote workers need ABI 1.1 (slot "
                                         "claim_kinds): upgrade the plugin"),
              std::string::npos)
        << e.what();
  }
}

TEST(V1_0PluginUnknownKind, RetryKeepsRetryingWithBackoff) {
  Engine engine(v1_0_config(EngineConfig::UnknownKind::kRetry));
  engine.register_handler("work", [](const Job&) {});
  EnqueueOptions o;
  o.max_attempts = 3;
  const int64_t id = engine.enqueue("q", "send_email", "{}", o);
  engine.start();
  ASSERT_TRUE(test::wait_until([&] {
    auto j = engine.get_job(id);
    return j && j->state == JobState::kFailed;
  }));
  engine.stop();
  std::optional<Job> j = engine.get_job(id);
  EXPECT_EQ(j->attempt, 3) << "every attempt ran";
  EXPECT_EQ(j->last_error,
            "no handler for job kind 'send_email' in this process (it serves: work); "
            "engine.unknown_kind = retry");
}

}  // namespace
}  // namespace conveyor
