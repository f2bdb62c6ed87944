// JSON log lines: one object per line, UTC time with a zone, level, message
// and the thread's fields; text lines in UTC too.
#include <conveyor/internal/log.hpp>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <regex>
#include <sstream>
#include <thread>

namespace conveyor {
namespace {

struct Captured {
  std::ostringstream out;
  std::shared_ptr<spdlog::logger> logger;
  explicit Captured(LogFormat format) {
    logger = std::make_shared<spdlog::logger>(
        "test", std::make_shared<spdlog::sinks::ostream_sink_st>(out));
    logger->set_formatter(make_log_formatter(format));
    logger->set_level(spdlog::level::trace);
  }
  std::vector<std::string> lines() const {
    std::vector<std::string> v;
    std::istringstream in(out.str());
    for (std::string l; std::getline(in, l);) v.push_back(l);
    return v;
  }
};

TEST(LogJson, OneObjectPerLineWithUtcTimeLevelMessageAndFields) {
  Captured c(LogFormat::kJson);
  {
    LogFields fields{{"queue", "email"}, {"job_id", int64_t{42}}};
    LogFields inner{{"kind", "send \"quoted\"\nline"}};
    c.logger->info("job {} failed", 42);
  }
  c.logger->warn("no fields here");
  const auto lines = c.lines();
  ASSERT_EQ(lines.size(), 2u);
  const auto first = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(first["level"], "info");
  EXPECT_EQ(first["message"], "job 42 failed");
  EXPECT_EQ(first["queue"], "email");
  EXPECT_EQ(first["job_id"], 42);
  EXPECT_EQ(first["kind"], "send \"quoted\"\nline");
  EXPECT_TRUE(std::regex_match(first["time"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")))
      << first["time"];
  const auto second = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(second["level"], "warn");
  EXPECT_FALSE(second.contains("queue")) << "fields end with their scope";
}

TEST(LogJson, FieldsBelongToTheirThread) {
  Captured c(LogFormat::kJson);
  LogFields fields{{"queue", "mine"}};
  std::thread([&] { c.logger->info("other thread"); }).join();
  EXPECT_FALSE(nlohmann::json::parse(c.lines().at(0)).contains("queue"));
}

TEST(LogJson, InvalidUtf8IsReplacedNotThrown) {
  Captured c(LogFormat::kJson);
  c.logger->error("bad \xff byte");
  EXPECT_TRUE(nlohmann::json::accept(c.lines().at(0))) << c.lines().at(0);
}

TEST(LogText, UtcTimeWithZoneLevelMessage) {
  Captured c(LogFormat::kText);
  c.logger->info("hello");
  EXPECT_TRUE(std::regex_match(c.lines().at(0),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z info hello)")))
      << c.lines().at(0);
}

}  // namespace
}  // namespace conveyor
