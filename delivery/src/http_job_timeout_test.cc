// http jobs under a job time limit ([queues.NAME] job_timeout_s, issue 41):
// the request gets at most what is left of the attempt's time, and a
// transfer cut by it fails the attempt as timed out. An engine on the
// in-memory example plugin, real time (curl's), a real server on 127.0.0.1
// that never answers.
#include "conveyor/http_delivery.hpp"
#include "conveyor/http_jobs.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/internal/engine_internals.hpp>

#include <gtest/gtest.h>

#include <chrono>

#include <fmt/format.h>

#include "testing/fault_injecting_storage.hpp"
#include "testing/raw_http_server.hpp"
#include "testing/sync.hpp"

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using http_delivery::testing::RawHttpServer;
using testing::eventually;

http_delivery::Policy loopback() {
  http_delivery::Policy p;
  p.allow_private = true;
  return p;
}

uint64_t timed_out_count(Engine& e, const std::string& queue) {
  for (const auto& c : EngineInternals::metrics(e).snapshot())
    if (c.queue == queue) return c.timed_out;
  return 0;
}

TEST(HttpJobTimeout, ARequestToAHungServerEndsAtTheJobTimeoutNotItsOwn) {
  RawHttpServer hung({.never_answer = true});
  Config config;
  config.engine.poll_interval_ms = 20;
  config.engine.shutdown_timeout_ms = 2000;
  config.http.allow_hosts = {"127.0.0.1"};
  config.queues["hooks"].job_timeout_s = 0.8;
  auto storage = std::make_shared<testing::FaultInjectingStorage>(testing::open_memory_storage());
  auto engine = EngineInternals::make(config, SystemClock::instance(), storage);
  HttpJobs http(*engine);
  // The request's own timeout (30 s) is far longer than the job's.
  const std::string payload =
      fmt::format(R"({{"url": "http://127.0.0.1:{}/slow", "timeout_ms": 30000}})", hung.port());
  EnqueueOptions once;
  once.max_attempts = 1;
  const int64_t id = engine->enqueue("hooks", "http", payload, once);
  const auto began = std::chrono::steady_clock::now();
  engine->start();
  ASSERT_TRUE(eventually([&] { return engine->get_job(id)->state == JobState::kFailed; }, 20s));
  const auto took = std::chrono::steady_clock::now() - began;
  EXPECT_GE(took, 800ms);
  EXPECT_LT(took, 10s) << "the request ran to its own 30 s timeout";
  const Job job = *engine->get_job(id);
  // Whichever comes first, the delivery's cut (which says where it was) or
  // the engine's deadline, the attempt failed as timed out.
  EXPECT_EQ(job.last_error.rfind("timed out after 0.8 s (job_timeout_s)", 0), 0u) << job.last_error;
  EXPECT_EQ(job.attempt, 1);
  EXPECT_EQ(timed_out_count(*engine, "hooks"), 1u);
  EXPECT_EQ(hung.requests_seen(), 1u);
  EXPECT_TRUE(eventually([&] { return http.in_flight() == 0; })) << "the transfer was not ended";
  engine->stop();
}

// The delivery itself: a deadline nearer than the request's timeout ends
// the transfer then, named by deadline_error and where it was.
TEST(HttpDeliveryDeadline, ADeadlineNearerThanTheTimeoutCutsTheTransfer) {
  RawHttpServer hung({.never_answer = true});
  http_delivery::Delivery delivery(loopback());
  http_delivery::Request r;
  r.url = fmt::format("http://127.0.0.1:{}/slow", hung.port());
  r.timeout = 30s;
  r.deadline = std::chrono::steady_clock::now() + 300ms;
  r.deadline_error = "timed out after 0.3 s (job_timeout_s)";
  std::mutex mu;
  std::optional<http_delivery::Outcome> got;
  const auto began = std::chrono::steady_clock::now();
  delivery.submit(std::move(r), [&](http_delivery::Outcome o) {
    std::lock_guard lock(mu);
    got = std::move(o);
  });
  ASSERT_TRUE(eventually(
      [&] {
        std::lock_guard lock(mu);
        return got.has_value();
      },
      20s));
  EXPECT_LT(std::chrono::steady_clock::now() - began, 10s);
  std::lock_guard lock(mu);
  EXPECT_EQ(got->kind, http_delivery::OutcomeKind::kRetry);
  EXPECT_TRUE(got->deadline_cut);
  EXPECT_EQ(got->error,
            "timed out after 0.3 s (job_timeout_s) waiting for the response from 127.0.0.1");
}

// Without a deadline the request's own timeout rules and says so.
TEST(HttpDeliveryDeadline, AFartherDeadlineLeavesTheRequestsTimeout) {
  RawHttpServer hung({.never_answer = true});
  http_delivery::Delivery delivery(loopback());
  http_delivery::Request r;
  r.url = fmt::format("http://127.0.0.1:{}/slow", hung.port());
  r.timeout = 300ms;
  r.deadline = std::chrono::steady_clock::now() + 60s;
  r.deadline_error = "timed out after 60 s (job_timeout_s)";
  std::mutex mu;
  std::optional<http_delivery::Outcome> got;
  delivery.submit(std::move(r), [&](http_delivery::Outcome o) {
    std::lock_guard lock(mu);
    got = std::move(o);
  });
  ASSERT_TRUE(eventually(
      [&] {
        std::lock_guard lock(mu);
        return got.has_value();
      },
      20s));
  std::lock_guard lock(mu);
  EXPECT_FALSE(got->deadline_cut);
  EXPECT_EQ(got->error.rfind("timed out after ", 0), 0u) << got->error;
  EXPECT_NE(got->error.find("(timeout_ms = 300)"), std::string::npos) << got->error;
}

}  // namespace
}  // namespace conveyor
