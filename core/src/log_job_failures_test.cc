// JobFailureLog: what a failed attempt's line says, and the per-queue bound
// on a storm of them (ManualClock).
#include "log_job_failures.hpp"

#include <conveyor/internal/log.hpp>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <sstream>

namespace conveyor {
namespace {

using namespace std::chrono_literals;

class JobFailureLogTest : public ::testing::Test {
 protected:
  std::vector<nlohmann::json> lines() const {
    std::vector<nlohmann::json> v;
    std::istringstream in(out_.str());
    for (std::string l; std::getline(in, l);) v.push_back(nlohmann::json::parse(l));
    return v;
  }
  JobFailureLog::Failure failure(std::string_view queue, int64_t id, int64_t retry_at = -1) {
    return {queue, id, "email", 3, 5, "smtp said no\nsecond line", retry_at};
  }

  ManualClock clock_;
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> logger_ = [this] {
    auto l = std::make_shared<spdlog::logger>(
        "test", std::make_shared<spdlog::sinks::ostream_sink_st>(out_));
    l->set_formatter(make_log_formatter(LogFormat::kJson));
    l->set_level(spdlog::level::info);
    return l;
  }();
};

TEST_F(JobFailureLogTest, RetryAndFinalFailureAtInfoWithTheJobsFields) {
  JobFailureLog log(clock_, {}, logger_.get());
  log.failed(failure("mail", 7, clock_.wall_now_us() + 2'000'000));
  log.failed(failure("mail", 8));
  const auto l = lines();
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0]["level"], "info");
  EXPECT_EQ(l[0]["queue"], "mail");
  EXPECT_EQ(l[0]["job_id"], 7);
  EXPECT_EQ(l[0]["kind"], "email");
  EXPECT_EQ(l[0]["attempt"], 3);
  EXPECT_EQ(l[0]["max_attempts"], 5);
  EXPECT_EQ(l[0]["error"], "smtp said no second line");
  EXPECT_EQ(l[0]["retry_in_ms"], 2000);
  EXPECT_EQ(l[0]["message"],
            "queue mail: job 7 (kind email) attempt 3 of 5 failed, retrying in 2000 ms: smtp said "
            "no second line");
  EXPECT_EQ(l[1]["message"],
            "queue mail: job 8 (kind email) failed for good after attempt 3 of 5: smtp said no "
            "second line");
  EXPECT_FALSE(l[1].contains("retry_in_ms"));
}

TEST_F(JobFailureLogTest, AStormIsBoundedPerQueueWithASummaryOfWhatWasLeftOut) {
  JobFailureLog log(clock_, {5, 1}, logger_.get());
  for (int i = 0; i < 1000; ++i) log.failed(failure("storm", i));
  log.failed(failure("calm", 1));  // another queue has its own bucket
  EXPECT_EQ(lines().size(), 6u) << "the burst of 5, then the other queue's line";
  EXPECT_EQ(log.suppressed(), 995u);

  clock_.advance(1s);  // one more token
  log.failed(failure("storm", 1000));
  const auto l = lines();
  ASSERT_EQ(l.size(), 8u);
  EXPECT_EQ(l[6]["message"],
            "queue storm: 995 similar lines suppressed in the last 1 s (failed attempts)");
  EXPECT_EQ(l[6]["suppressed"], 995);
  EXPECT_FALSE(l[6].contains("job_id")) << "the summary is no job's line";
  EXPECT_EQ(l[7]["job_id"], 1000);

  // A minute of 100 failures a second writes about a line a second.
  for (int s = 0; s < 60; ++s) {
    clock_.advance(1s);
    for (int i = 0; i < 100; ++i) log.failed(failure("storm", 2000 + s * 100 + i));
  }
  EXPECT_LE(lines().size(), 8u + 2 * 60) << "a line and a summary per second at most";
  EXPECT_GE(lines().size(), 8u + 60);
}

TEST_F(JobFailureLogTest, NothingWhenInfoIsOff) {
  logger_->set_level(spdlog::level::warn);
  JobFailureLog log(clock_, {}, logger_.get());
  log.failed(failure("mail", 1));
  EXPECT_TRUE(out_.str().empty());
}

}  // namespace
}  // namespace conveyor
