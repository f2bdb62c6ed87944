// Logging of the real binary: CONVEYOR_LOG_LEVEL is checked (any case; a
// typo is an error, not silence) and [log] format = "json" writes one JSON
// object per line on stderr.
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <regex>
#include <sstream>

namespace conveyor {
namespace {

TEST(LogCli, AnUnknownLogLevelExits2NamingIt) {
  test::TempDir dir;
  const auto config = test::write_sqlite_config(dir);
  const auto r =
      test::run_conveyor({"--config", config.string(), "serve"}, {"CONVEYOR_LOG_LEVEL=bogus"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "conveyor: environment variable CONVEYOR_LOG_LEVEL: must be one of trace, debug, "
            "info, warn, error, critical, off (any case), got \"bogus\"\n");
  // Other commands too.
  EXPECT_EQ(test::run_conveyor({"--config", config.string(), "queues"}, {"CONVEYOR_LOG_LEVEL=inf"})
                .exit_code,
            2);
}

TEST(LogCli, UpperCaseWarnWorksAndKeepsInfoLinesOut) {
  test::TempDir dir;
  test::ServeProcess serve(dir, "", "allow_unauthenticated = \"loopback\"\n",
                           {"CONVEYOR_LOG_LEVEL=WARN"});
  ASSERT_TRUE(serve.ready()) << serve.process().stderr_text();
  serve.process().signal(SIGTERM);
  EXPECT_EQ(serve.process().wait(), 0);
  EXPECT_EQ(serve.process().stderr_text(), "") << "info lines at WARN";

  test::TempDir dir2;
  test::ServeProcess chatty(dir2, "", "allow_unauthenticated = \"loopback\"\n",
                            {"CONVEYOR_LOG_LEVEL=Info"});
  ASSERT_TRUE(chatty.ready());
  chatty.process().signal(SIGTERM);
  EXPECT_EQ(chatty.process().wait(), 0);
  EXPECT_NE(chatty.process().stderr_text().find(" info engine started"), std::string::npos)
      << chatty.process().stderr_text();
}

TEST(LogCli, JsonFormatWritesOneObjectPerLineWithUtcTimes) {
  test::TempDir dir;
  test::ServeProcess serve(dir, "[log]\nformat = \"json\"\nlevel = \"info\"\n",
                           "allow_unauthenticated = \"loopback\"\n");
  ASSERT_TRUE(serve.ready()) << serve.process().stderr_text();
  serve.process().signal(SIGTERM);
  EXPECT_EQ(serve.process().wait(), 0);
  std::istringstream lines(serve.process().stderr_text());
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    ASSERT_TRUE(nlohmann::json::accept(line)) << line;
    const auto j = nlohmann::json::parse(line);
    EXPECT_TRUE(std::regex_match(j.at("time").get<std::string>(),
                                 std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")))
        << line;
    EXPECT_TRUE(j.at("level").is_string());
    EXPECT_TRUE(j.at("message").is_string());
  }
  EXPECT_GE(n, 3) << "started, serving, stopped";
}

}  // namespace
}  // namespace conveyor
