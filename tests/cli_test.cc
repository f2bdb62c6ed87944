// The conveyor command as a real process: outputs of docs/reference.md, exit codes
// (0 ok, 1 runtime, 2 usage/validation), one-line errors, and `serve` with a
// graceful Ctrl-C and a restart that keeps jobs and overrides.
#include "test_support.hpp"

#include <conveyor/storage_plugin.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <fstream>
#include <sstream>

namespace conveyor {
namespace {

using nlohmann::json;
using test::expect_one_line_error;
using test::run_conveyor;
using test::TempDir;

// The words of each line of text.
std::vector<std::vector<std::string>> words_of_lines(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::vector<std::string>& words = out.emplace_back();
    for (std::string w; in >> w;) words.push_back(w);
  }
  return out;
}

// The words of the table row that starts with first; a five-word row (of
// ratelimit ls) without its last, the UPDATED time.
std::vector<std::string> words_of_row(const std::string& table, const std::string& first) {
  for (std::vector<std::string>& words : words_of_lines(table)) {
    if (!words.empty() && words[0] == first) {
      if (words.size() == 5) words.pop_back();  // ratelimit ls: drop UPDATED
      return words;
    }
  }
  return {};
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override { config_ = test::write_sqlite_config(dir_, extra_); }
  test::CommandResult run(std::vector<std::string> args, std::vector<std::string> env = {}) {
    args.insert(args.begin(), {"--config", config_.string()});
    return run_conveyor(args, env);
  }

  TempDir dir_;
  std::string extra_;
  std::filesystem::path config_;
};

TEST_F(Cli, EnqueueThenQueuesJson) {
  auto r = run({"enqueue", "email", "noop", "--count", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "enqueued 5 jobs on queue email (ids 1..5)\n");
  r = run({"enqueue", "email:send", "sleep", "--payload", R"({"ms": 5})", "--delay", "3600"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run({"--json", "queues"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["queue"], "email");
  EXPECT_EQ(j[0]["pending"], 5);
  EXPECT_EQ(j[0]["limit"]["source"], "none");
  EXPECT_TRUE(j[0]["limit"]["rate"].is_null());
  EXPECT_EQ(j[1]["queue"], "email:send");
  EXPECT_EQ(j[1]["scheduled"], 1);
  for (const char* key : {"running", "completed", "failed"}) EXPECT_EQ(j[0][key], 0) << key;
}

// The global options are accepted after the command too (`conveyor queues
// --json`), at any depth, and mean the same as before it.
TEST_F(Cli, GlobalOptionsWorkAfterTheCommand) {
  ASSERT_EQ(run({"enqueue", "email", "noop", "--count", "2"}).exit_code, 0);
  auto r = run_conveyor({"queues", "--json", "--config", config_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)[0]["pending"], 2);
  r = run_conveyor({"ratelimit", "set", "email", "--rate", "5", "--config", config_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_conveyor({"ratelimit", "ls", "--config", config_.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["overrides"][0]["rate"], 5.0) << r.out;
  r = run_conveyor({"enqueue", "email", "noop", "--json", "--config", config_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["count"], 1) << r.out;
}

TEST_F(Cli, RateLimitSetLsRm) {
  auto r = run({"ratelimit", "set", "email", "--rate", "50", "--burst", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The first line as before scopes; the scope (process by default) under it.
  EXPECT_EQ(r.out,
            "queue email limited to 50/s (burst 10)\n"
            "scope: process (each process has its own bucket: N processes start up to N x 50/s)\n");
  r = run({"ratelimit", "set", "sms", "--rate", "2.5"});
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')),
            "queue sms limited to 2.5/s (burst 3)");  // burst ceil(rate)
  r = run({"ratelimit", "set", "push", "--rate", "4", "--burst", "2", "--scope", "fleet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "queue push limited to 4/s (burst 2)\n"
            "scope: fleet (one bucket shared by every process on this storage: at most 4/s in "
            "all)\n");
  r = run({"--json", "ratelimit", "set", "push2", "--rate", "1", "--scope", "fleet"});
  EXPECT_EQ(json::parse(r.out),
            json::parse(R"({"queue":"push2","rate":1.0,"burst":1,"scope":"fleet"})"));
  ASSERT_EQ(run({"ratelimit", "rm", "push2"}).exit_code, 0);
  r = run({"--json", "ratelimit", "ls"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["enabled"], true);
  EXPECT_EQ(j["enabled_source"], "config");  // nothing stored
  EXPECT_TRUE(j["default"]["rate"].is_null());
  EXPECT_TRUE(j["default"]["scope"].is_null());
  ASSERT_EQ(j["overrides"].size(), 3u);
  EXPECT_EQ(j["overrides"][0]["queue"], "email");
  EXPECT_EQ(j["overrides"][0]["rate"], 50.0);
  EXPECT_EQ(j["overrides"][0]["burst"], 10);
  EXPECT_EQ(j["overrides"][0]["scope"], "process");
  EXPECT_TRUE(j["overrides"][0]["updated_at"].is_string());
  EXPECT_EQ(j["overrides"][1]["queue"], "push");
  EXPECT_EQ(j["overrides"][1]["scope"], "fleet");
  r = run({"ratelimit", "ls"});
  EXPECT_EQ(r.out.rfind("QUEUE  RATE  BURST  SCOPE    UPDATED\n", 0), 0u) << r.out;
  EXPECT_EQ(words_of_row(r.out, "email"),
            (std::vector<std::string>{"email", "50", "10", "process"}));
  EXPECT_EQ(words_of_row(r.out, "push"), (std::vector<std::string>{"push", "4", "2", "fleet"}));
  EXPECT_NE(r.out.find("\nrate limiting: enabled (source: config, [engine] rate_limit_enabled; "
                       "nothing stored)\n"),
            std::string::npos)
      << r.out;
  r = run({"--json", "queues"});
  j = json::parse(r.out);
  EXPECT_EQ(j[0]["queue"], "email");
  EXPECT_EQ(j[0]["limit"]["source"], "override");
  EXPECT_EQ(j[0]["limit"]["rate"], 50.0);
  EXPECT_EQ(j[0]["limit"]["scope"], "process");
  EXPECT_EQ(j[1]["queue"], "push");
  EXPECT_EQ(j[1]["limit"]["scope"], "fleet");
  r = run({"queues"});
  EXPECT_NE(r.out.find("  LIMIT  "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  SCOPE  "), std::string::npos) << r.out;
  // push: no jobs, 4/s burst 2, fleet, from its override
  EXPECT_EQ(words_of_row(r.out, "push"),
            (std::vector<std::string>{"push", "no", "0", "0", "0", "0", "0", "4/s", "burst", "2",
                                      "fleet", "override"}));
  r = run({"ratelimit", "rm", "email"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "queue email rate limit cleared\n");
  expect_one_line_error(run({"ratelimit", "rm", "email"}), 1,
                        "queue email has no rate-limit override");
}

TEST_F(Cli, ValidationErrorsExitTwoAndStoreNothing) {
  expect_one_line_error(run({"ratelimit", "set", "email", "--rate", "0"}), 2, "rate");
  expect_one_line_error(run({"ratelimit", "set", "email", "--rate", "-3"}), 2, "rate");
  expect_one_line_error(run({"ratelimit", "set", "email", "--rate", "nan"}), 2, "rate");
  expect_one_line_error(run({"ratelimit", "set", "email", "--rate", "inf"}), 2, "rate");
  expect_one_line_error(run({"ratelimit", "set", "email", "--rate", "5", "--burst", "0"}), 2,
                        "burst");
  expect_one_line_error(run({"ratelimit", "set", "x'); DROP TABLE jobs;--", "--rate", "5"}), 2,
                        "queue name");
  expect_one_line_error(run({"enqueue", "bad queue", "noop"}), 2, "queue name");
  expect_one_line_error(run({"enqueue", "q", "noop", "--payload", "{not json"}), 2, "JSON");
  expect_one_line_error(run({"enqueue", "q", "noop", "--count", "0"}), 2, "--count");
  // An http job on a queue without [queues.NAME.http] must name its request.
  expect_one_line_error(run({"enqueue", "hooks", "http"}), 2,
                        "http job payload: must be a JSON object");
  expect_one_line_error(run({"enqueue", "hooks", "http", "--payload", R"({"url": "ftp://x/"})"}), 2,
                        "http job payload: url must be an http:// or https:// URL");
  expect_one_line_error(run({"frobnicate"}), 2, "frobnicate");
  expect_one_line_error(run({"ratelimit", "set", "email"}), 2, "--rate");
  expect_one_line_error(run({"ratelimit", "set", "email", "--rate", "5", "--scope", "galaxy"}), 2,
                        "--scope must be process (each process has its own bucket, the default) "
                        "or fleet (one bucket per queue shared by every process on the same "
                        "storage), got \"galaxy\"");
  expect_one_line_error(run({"enqueue", "q", "noop", "--cost", "0"}), 2,
                        "cost must be a whole number of tokens from 1 to 1000000, got 0");
  expect_one_line_error(run({"enqueue", "q", "noop", "--cost", "1000001"}), 2,
                        "cost must be a whole number of tokens from 1 to 1000000, got 1000001");
  expect_one_line_error(run({"enqueue", "q", "noop", "--cost", "lots"}), 2,
                        "--cost must be a whole number of tokens from 1 to 1000000, got \"lots\"");
  expect_one_line_error(run({"enqueue", "q", "noop", "--key", std::string(201, 'k')}), 2,
                        "key is 201 bytes; the longest is 200 bytes (UTF-8), got \"kkk");
  expect_one_line_error(run({"enqueue", "q", "noop", "--key", "tenant-\xff"}), 2,
                        "key must be UTF-8 text; byte 7 is not, got \"tenant-\\xff\"");
  expect_one_line_error(run({"enqueue", "q", "noop", "--key"}), 2, "--key");
  // None of them created the database (the read-only commands do not either).
  expect_one_line_error(run({"--json", "ratelimit", "ls"}), 1, "does not exist");
  expect_one_line_error(run({"--json", "queues"}), 1, "does not exist");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "conveyor.db"));
}

// A JSON string payload of about n bytes, as a file holds it (final newline).
std::string big_payload(size_t n) { return "{\"blob\": \"" + std::string(n, 'x') + "\"}\n"; }

// Payloads too large for the command line (one argument is at most 128 KiB
// on Linux) come from a file, or from standard input with "-".
TEST_F(Cli, EnqueuePayloadFromAFileOrStandardInput) {
  const std::string payload = big_payload(200 * 1024);
  const auto file = dir_ / "payload.json";
  std::ofstream(file) << payload;
  const std::string stored = payload.substr(0, payload.size() - 1);  // without the newline

  auto r = run({"enqueue", "blobs", "noop", "--payload-file", file.string(), "--delay", "3600"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "enqueued job 1 on queue blobs\n");
  r = run_conveyor({"--config", config_.string(), "enqueue", "blobs", "noop", "--payload-file", "-",
                    "--count", "2", "--delay", "3600"},
                   {}, file);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "enqueued 2 jobs on queue blobs (ids 2..3)\n");
  for (const char* id : {"1", "2", "3"}) {
    r = run({"--json", "jobs", "show", id});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)["payload"], stored) << id;
  }
}

// --payload-file gets --payload's checks, and errors that name the file;
// with --payload as well it is refused before anything is read or stored.
TEST_F(Cli, EnqueuePayloadFileErrorsEnqueueNothing) {
  const auto file = dir_ / "payload.json";
  std::ofstream(file) << big_payload(200 * 1024);
  expect_one_line_error(
      run({"enqueue", "q", "noop", "--payload", "{}", "--payload-file", file.string()}), 2,
      "give the payload with --payload JSON or with --payload-file PATH, not both");
  expect_one_line_error(run({"enqueue", "q", "noop", "--payload-file", "-", "--payload", "{}"}), 2,
                        "not both");
  const auto bad = dir_ / "bad.json";
  std::ofstream(bad) << "{not json\n";
  expect_one_line_error(run({"enqueue", "q", "noop", "--payload-file", bad.string()}), 2,
                        "--payload-file \"" + bad.string() + "\": payload is not valid JSON");
  const auto huge = dir_ / "huge.json";
  std::ofstream(huge) << big_payload(1024 * 1024);
  expect_one_line_error(run({"enqueue", "q", "noop", "--payload-file", huge.string()}), 2,
                        "the payload is more than 1048576 bytes, the limit");
  expect_one_line_error(
      run({"enqueue", "q", "noop", "--payload-file", (dir_ / "missing.json").string()}), 2,
      "cannot open it: No such file or directory");
  expect_one_line_error(run({"enqueue", "q", "noop", "--payload-file", "-"}), 2,
                        "--payload-file - (standard input): is empty");
  // An http job's payload is checked as with --payload.
  const auto not_request = dir_ / "http.json";
  std::ofstream(not_request) << R"({"url": "ftp://x/"})";
  expect_one_line_error(run({"enqueue", "hooks", "http", "--payload-file", not_request.string()}),
                        2, "http job payload: url must be an http:// or https:// URL");
  // Nothing was stored: the database was not even created.
  EXPECT_FALSE(std::filesystem::exists(dir_ / "conveyor.db"));
}

TEST_F(Cli, BadConfigNamesFileLineAndKey) {
  std::ofstream(config_, std::ios::app) << "[engine]\nrate_limt_enabled = true\n";
  auto r = run({"queues"});
  expect_one_line_error(r, 2, config_.string() + ":7");
  EXPECT_NE(r.err.find("rate_limt_enabled"), std::string::npos);
  auto missing = run_conveyor({"--config", (dir_ / "nope.toml").string(), "queues"});
  expect_one_line_error(missing, 2, "nope.toml");
}

TEST_F(Cli, EnvironmentOverridesTheFile) {
  ASSERT_EQ(run({"enqueue", "q", "noop"}).exit_code, 0);  // creates the database
  auto r = run({"--json", "ratelimit", "ls"},
               {"CONVEYOR_RATE_LIMIT_RATE_PER_SEC=20", "CONVEYOR_RATE_LIMIT_ENABLED=false"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["enabled"], false);
  EXPECT_EQ(j["default"]["rate"], 20.0);
  EXPECT_EQ(j["default"]["burst"], 20);
  expect_one_line_error(run({"queues"}, {"CONVEYOR_RATE_LIMIT_RATE_PER_SEC=fast"}), 2,
                        "CONVEYOR_RATE_LIMIT_RATE_PER_SEC");
}

TEST_F(Cli, UnknownPluginIsARuntimeErrorThatListsWhatExists) {
  auto r = run({"queues"}, {"CONVEYOR_STORAGE_PLUGIN=nope"});
  expect_one_line_error(r, 1, "storage plugin 'nope' not found");
  EXPECT_NE(r.err.find("sqlite"), std::string::npos);
}

TEST_F(Cli, PluginInfoDescribesThePlugin) {
  auto r =
      run({"plugin", "info", std::string(CONVEYOR_TEST_PLUGIN_DIR) + "/libconveyor-sqlite.so"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("name:          sqlite"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kind:          canonical"), std::string::npos) << r.out;
  // The built-in plugin speaks the host's ABI.
  EXPECT_NE(r.out.find("ABI version:   " + std::to_string(CONVEYOR_ABI_MAJOR) + "." +
                       std::to_string(CONVEYOR_ABI_MINOR) + " "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("durable"), std::string::npos) << r.out;
  r = run({"--json", "plugin", "info",
           std::string(CONVEYOR_TEST_PLUGIN_DIR) + "/libconveyor-sqlite.so"});
  EXPECT_EQ(json::parse(r.out)["kind"], "canonical");
  expect_one_line_error(run({"plugin", "info", "/etc/hostname"}), 1, "/etc/hostname");
}

// serve drains what the CLI enqueues, stops cleanly on Ctrl-C, and a restart
// finds the override and every job that was still pending.
TEST_F(Cli, ServeDrainsStopsOnSigintAndKeepsStateAcrossRestart) {
  std::ofstream(config_, std::ios::app) << "[engine]\npoll_interval_ms = 50\n";
  ASSERT_EQ(run({"enqueue", "bulk", "noop", "--count", "300"}).exit_code, 0);
  ASSERT_EQ(run({"ratelimit", "set", "slow", "--rate", "1", "--burst", "1"}).exit_code, 0);
  ASSERT_EQ(run({"enqueue", "slow", "noop", "--count", "50"}).exit_code, 0);
  {
    test::Process serve({"--config", config_.string(), "serve"});
    auto completed = [&](const std::string& queue) -> int64_t {
      auto r = run({"--json", "queues"});
      if (r.exit_code != 0) return -1;
      for (const auto& q : json::parse(r.out))
        if (q["queue"] == queue) return q["completed"].get<int64_t>();
      return -1;
    };
    ASSERT_TRUE(test::wait_until([&] { return completed("bulk") == 300; })) << serve.stderr_text();
    serve.signal(SIGINT);
    EXPECT_EQ(serve.wait(), 0) << serve.stderr_text();
    EXPECT_NE(serve.stderr_text().find("engine stopped"), std::string::npos) << serve.stderr_text();
  }
  auto r = run({"--json", "queues"});
  json j = json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[1]["queue"], "slow");
  EXPECT_EQ(j[1]["running"], 0);  // nothing left leased
  EXPECT_EQ(j[1]["pending"].get<int>() + j[1]["completed"].get<int>(), 50);
  EXPECT_GT(j[1]["pending"].get<int>(), 40);  // 1/s: only a few ran
  EXPECT_EQ(j[1]["limit"]["source"], "override");
}

// `conveyor jobs ...` and `queues pause/resume` on storage opened directly:
// listing pages (one queue or all), show, retry by id and in batches,
// cancel, rm, each id's outcome and the exit codes.
TEST_F(Cli, JobsCommandsOnStorage) {
  std::ofstream(config_, std::ios::app) << "[engine]\npoll_interval_ms = 50\n";
  ASSERT_EQ(run({"enqueue", "email", "noop", "--count", "2", "--delay", "3600"}).exit_code, 0);
  ASSERT_EQ(run({"enqueue", "email", "http", "--payload", R"({"url":"http://127.0.0.1:9/"})",
                 "--count", "3"})
                .exit_code,
            0);
  ASSERT_EQ(run({"enqueue", "other", "noop", "--delay", "3600"}).exit_code, 0);
  {  // ids 3..5 fail for good (an http job to loopback is refused at once)
    test::Process serve({"--config", config_.string(), "serve"});
    ASSERT_TRUE(test::wait_until([&] {
      auto r = run({"--json", "queues"});
      return r.exit_code == 0 && json::parse(r.out)[0]["failed"] == 3;
    })) << serve.stderr_text();
    serve.signal(SIGINT);
    ASSERT_EQ(serve.wait(), 0) << serve.stderr_text();
  }
  auto ids = [](const std::string& out) {
    const json page = json::parse(out);  // named: a range-for over a temporary's member dangles
    std::vector<int64_t> v;
    for (const auto& j : page["jobs"]) v.push_back(j["id"]);
    return v;
  };
  auto r = run({"--json", "jobs", "ls", "--queue", "email", "--state", "failed"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ids(r.out), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(json::parse(r.out)["next_after_id"], 0);
  EXPECT_NE(json::parse(r.out)["jobs"][0]["last_error"].get<std::string>().find("127.0.0.1"),
            std::string::npos);
  r = run({"--json", "jobs", "ls", "--state", "pending,scheduled", "--state", "failed"});
  EXPECT_EQ(ids(r.out), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  r = run({"--json", "jobs", "ls", "--kind", "http", "--queue", "email"});
  EXPECT_EQ(ids(r.out), (std::vector<int64_t>{3, 4, 5}));
  // Every queue, merged in id order, a page at a time.
  r = run({"--json", "jobs", "ls", "--limit", "4"});
  EXPECT_EQ(ids(r.out), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(json::parse(r.out)["next_after_id"], 4);
  r = run({"jobs", "ls", "--limit", "4"});
  EXPECT_EQ(r.out.rfind("ID  QUEUE  KIND ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("more: add --after 4 for the next page\n"), std::string::npos) << r.out;
  r = run({"--json", "jobs", "ls", "--limit", "4", "--after", "4"});
  EXPECT_EQ(ids(r.out), (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(json::parse(r.out)["next_after_id"], 0);
  EXPECT_EQ(run({"jobs", "ls", "--queue", "nobody"}).out, "no jobs\n");

  r = run({"--json", "jobs", "show", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["state"], "failed");
  EXPECT_TRUE(json::parse(r.out)["lease_expires_at"].is_null());
  r = run({"jobs", "show", "6"});
  EXPECT_NE(r.out.find("queue:            other\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("state:            scheduled\n"), std::string::npos) << r.out;
  expect_one_line_error(run({"jobs", "show", "999"}), 1, "job 999 not found");

  // Retry by id: each id reported; any failure is exit 1.
  r = run({"jobs", "retry", "3", "1", "999"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "job 3 retried\n1 of 3 jobs retried\n");
  EXPECT_EQ(r.err,
            "conveyor: job 1 not retried: only failed or cancelled jobs can be retried\n"
            "conveyor: job 999 not found\n");
  // In batches: one job per call here, progress with the cursor on stderr.
  r = run({"jobs", "retry", "--queue", "email", "--state", "failed", "--batch", "1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "retried 2 failed jobs of queue email\n");
  EXPECT_EQ(r.err,
            "retried 1 failed jobs of queue email so far (resume with --after 4)\n"
            "retried 2 failed jobs of queue email so far (resume with --after 5)\n");
  r = run({"--json", "jobs", "retry", "--queue", "email"});  // --state failed by default
  EXPECT_EQ(json::parse(r.out),
            json::parse(R"({"queue":"email","state":"failed","retried":0,"batches":1})"));
  r = run({"--json", "jobs", "ls", "--queue", "email", "--state", "available"});
  EXPECT_EQ(ids(r.out), (std::vector<int64_t>{3, 4, 5}));

  // Cancel, then rm.
  r = run({"jobs", "cancel", "6"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "job 6 cancelled\n");
  r = run({"jobs", "cancel", "6", "999"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "conveyor: job 6 not cancelled: it is already cancelled\nconveyor: job 999 not "
            "found\n");
  r = run({"--json", "jobs", "cancel", "5"});
  EXPECT_EQ(json::parse(r.out),
            json::parse(R"({"outcomes":[{"id":5,"outcome":"ok","state":"cancelled"}]})"));
  r = run({"jobs", "rm", "6", "1", "999"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "job 6 removed\n1 of 3 jobs removed\n");
  EXPECT_EQ(r.err,
            "conveyor: job 1 not removed: only final jobs (completed, failed, cancelled) can be "
            "removed; cancel it first\nconveyor: job 999 not found\n");
  r = run({"--json", "jobs", "rm", "5"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(json::parse(r.out),
            json::parse(R"({"outcomes":[{"id":5,"outcome":"ok"}],"removed":1})"));
  expect_one_line_error(run({"jobs", "show", "5"}), 1, "job 5 not found");

  // Pause and resume: a column in `queues`, not text in the name.
  r = run({"queues", "pause", "email"});
  EXPECT_EQ(r.out, "queue email paused (no new claims in any process)\n");
  r = run({"queues"});
  EXPECT_EQ(r.out.rfind("QUEUE  PAUSED  PENDING", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\nemail  yes "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("(paused)"), std::string::npos) << r.out;
  EXPECT_EQ(json::parse(run({"--json", "queues"}).out)[0]["paused"], true);
  r = run({"--json", "queues", "resume", "email"});
  EXPECT_EQ(json::parse(r.out), json::parse(R"({"queue":"email","paused":false})"));
  EXPECT_NE(run({"queues"}).out.find("\nemail  no "), std::string::npos);
}

TEST_F(Cli, JobsCommandsRefuseBadArgumentsWithExit2) {
  ASSERT_EQ(run({"enqueue", "email", "noop"}).exit_code, 0);
  expect_one_line_error(run({"jobs", "ls", "--limit", "1001"}), 2,
                        "--limit must be from 1 to 1000 (the most per call), got 1001");
  expect_one_line_error(run({"jobs", "ls", "--limit", "0"}), 2, "--limit must be from 1 to 1000");
  expect_one_line_error(run({"jobs", "ls", "--limit", "lots"}), 2,
                        "--limit must be a whole number from 1 to 1000, got \"lots\"");
  expect_one_line_error(run({"jobs", "ls", "--after", "-1"}), 2,
                        "--after must be a whole number >= 0, got \"-1\"");
  expect_one_line_error(run({"jobs", "ls", "--after", "12abc"}), 2,
                        "--after must be a whole number >= 0, got \"12abc\"");
  expect_one_line_error(run({"jobs", "ls", "--state", "dead"}), 2,
                        "--state: unknown job state \"dead\"");
  expect_one_line_error(run({"jobs", "ls", "--queue", "no way"}), 2, "invalid queue name");
  expect_one_line_error(run({"jobs", "show", "abc"}), 2,
                        "a job id must be a whole number >= 1, got \"abc\"");
  expect_one_line_error(run({"jobs", "retry", "1", "x"}), 2,
                        "a job id must be a whole number >= 1, got \"x\"");
  expect_one_line_error(run({"jobs", "rm", "0"}), 2,
                        "a job id must be a whole number >= 1, got \"0\"");
  expect_one_line_error(run({"jobs", "cancel", "99999999999999999999"}), 2,
                        "a job id must be a whole number >= 1");
  expect_one_line_error(run({"jobs", "retry"}), 2, "give job ids (conveyor jobs retry ID...)");
  expect_one_line_error(run({"jobs", "retry", "1", "--queue", "email"}), 2,
                        "give job ids or --queue (with --state), not both");
  expect_one_line_error(run({"jobs", "retry", "--queue", "email", "--state", "running"}), 2,
                        "--state must be failed or cancelled");
  expect_one_line_error(run({"jobs", "retry", "--queue", "email", "--batch", "5000"}), 2,
                        "--batch must be from 1 to 1000");
  EXPECT_EQ(run({"jobs", "cancel"}).exit_code, 2);
  EXPECT_EQ(run({"jobs"}).exit_code, 2);
  expect_one_line_error(run({"queues", "pause"}), 2, "queue");
  // Nothing changed.
  EXPECT_EQ(json::parse(run({"--json", "jobs", "show", "1"}).out)["state"], "available");
}

// Read-only commands never create a database: a wrong path is an error
// naming it, and nothing appears on disk.
TEST_F(Cli, ReadOnlyCommandsDoNotCreateTheDatabase) {
  const std::string db = (dir_ / "conveyor.db").string();
  for (std::vector<std::string> args :
       {std::vector<std::string>{"queues"}, {"--json", "queues"}, {"ratelimit", "ls"}}) {
    auto r = run(args);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err, "conveyor: storage plugin 'sqlite' could not open: sqlite database '" + db +
                         "' does not exist (storage option 'path'); `conveyor serve` or `conveyor "
                         "enqueue` creates it, or fix the path\n");
    EXPECT_FALSE(std::filesystem::exists(db)) << args.back();
  }
  ASSERT_EQ(run({"enqueue", "q", "noop"}).exit_code, 0);
  EXPECT_EQ(run({"queues"}).exit_code, 0);
}

// The live kill switch: stored, so the next command (another process) sees
// it; its source is storage, and it wins over the config file's default.
TEST_F(Cli, KillSwitchIsStoredAndWinsOverTheConfig) {
  ASSERT_EQ(run({"ratelimit", "set", "email", "--rate", "5"}).exit_code, 0);
  auto r = run({"ratelimit", "disable"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "rate limiting disabled: no limit throttles any queue (backpressure holds still "
            "apply); stored in storage, every process on it follows within a second\n");
  r = run({"ratelimit", "ls"});
  EXPECT_NE(r.out.find("\nrate limiting: DISABLED (source: storage, set by conveyor ratelimit "
                       "disable: every limit is ignored in every process; conveyor ratelimit "
                       "enable turns them back on)\n"),
            std::string::npos)
      << r.out;
  json j = json::parse(run({"--json", "ratelimit", "ls"}).out);
  EXPECT_EQ(j["enabled"], false);
  EXPECT_EQ(j["enabled_source"], "storage");
  EXPECT_EQ(j["overrides"].size(), 1u);  // kept
  j = json::parse(run({"--json", "queues"}).out);
  EXPECT_EQ(j[0]["limit"]["source"], "disabled");
  // The config says enabled; storage says disabled: storage wins.
  j = json::parse(run({"--json", "ratelimit", "ls"}, {"CONVEYOR_RATE_LIMIT_ENABLED=true"}).out);
  EXPECT_EQ(j["enabled"], false);
  r = run({"--json", "ratelimit", "enable"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out), json::parse(R"({"enabled":true,"enabled_source":"storage"})"));
  r = run({"ratelimit", "enable"});  // again: the same state, said again
  EXPECT_EQ(r.out,
            "rate limiting enabled: every queue's limit applies again; stored in storage, every "
            "process on it follows within a second\n");
  // Stored enabled beats a config that disables.
  j = json::parse(run({"--json", "ratelimit", "ls"}, {"CONVEYOR_RATE_LIMIT_ENABLED=false"}).out);
  EXPECT_EQ(j["enabled"], true);
  EXPECT_EQ(j["enabled_source"], "storage");
  EXPECT_EQ(json::parse(run({"--json", "queues"}).out)[0]["limit"]["source"], "override");
}

// With nothing stored, the config file's rate_limit_enabled is the state, and ls says so.
TEST_F(Cli, KillSwitchFromTheConfigWhenNothingIsStored) {
  ASSERT_EQ(run({"ratelimit", "set", "email", "--rate", "5"}).exit_code, 0);
  const std::vector<std::string> off = {"CONVEYOR_RATE_LIMIT_ENABLED=false"};
  json j = json::parse(run({"--json", "ratelimit", "ls"}, off).out);
  EXPECT_EQ(j["enabled"], false);
  EXPECT_EQ(j["enabled_source"], "config");
  auto r = run({"ratelimit", "ls"}, off);
  EXPECT_NE(r.out.find("\nrate limiting: DISABLED (source: config, rate_limit_enabled = false: "
                       "every limit is ignored; nothing stored)\n"),
            std::string::npos)
      << r.out;
}

// --cost: stored with the job, shown by jobs show; more than the queue's
// burst is refused at enqueue (it could never start), naming the cost.
TEST_F(Cli, EnqueueCost) {
  auto r = run({"enqueue", "heavy", "noop", "--cost", "3", "--delay", "3600"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "enqueued job 1 on queue heavy\n");
  ASSERT_EQ(run({"enqueue", "heavy", "noop", "--delay", "3600"}).exit_code, 0);
  EXPECT_EQ(json::parse(run({"--json", "jobs", "show", "1"}).out)["cost"], 3);
  EXPECT_EQ(json::parse(run({"--json", "jobs", "show", "2"}).out)["cost"], 1);
  r = run({"jobs", "show", "1"});
  EXPECT_NE(r.out.find("\ncost:             3 tokens of the queue's limit\n"), std::string::npos)
      << r.out;
  ASSERT_EQ(run({"ratelimit", "set", "heavy", "--rate", "1", "--burst", "4"}).exit_code, 0);
  r = run({"enqueue", "heavy", "noop", "--cost", "5"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("cost"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("burst"), std::string::npos) << r.err;
  EXPECT_EQ(json::parse(run({"--json", "queues"}).out)[0]["scheduled"], 2);  // nothing added
  EXPECT_EQ(run({"enqueue", "heavy", "noop", "--cost", "4", "--delay", "3600"}).exit_code, 0);
}

// --key: stored with each job, shown by jobs show and (as a KEY column only
// when a job of the page has a key) by jobs ls; --json has "key" always.
TEST_F(Cli, EnqueueKey) {
  auto r =
      run({"enqueue", "tenants", "noop", "--key", "tenant-42", "--count", "2", "--delay", "3600"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "enqueued 2 jobs on queue tenants (ids 1..2)\n");
  ASSERT_EQ(run({"enqueue", "tenants", "noop", "--delay", "3600"}).exit_code, 0);
  // A UTF-8 key and one that reads as a number.
  ASSERT_EQ(
      run({"enqueue", "tenants", "noop", "--key", "caf\xc3\xa9", "--delay", "3600"}).exit_code, 0);
  ASSERT_EQ(run({"enqueue", "tenants", "noop", "--key", "7", "--delay", "3600"}).exit_code, 0);
  ASSERT_EQ(run({"enqueue", "plain", "noop", "--delay", "3600"}).exit_code, 0);
  const std::string longest(200, 'k');
  ASSERT_EQ(run({"enqueue", "long", "noop", "--key", longest, "--delay", "3600"}).exit_code, 0);

  json j = json::parse(run({"--json", "jobs", "show", "1"}).out);
  EXPECT_EQ(j["key"], "tenant-42");
  EXPECT_EQ(json::parse(run({"--json", "jobs", "show", "2"}).out)["key"], "tenant-42");
  EXPECT_EQ(json::parse(run({"--json", "jobs", "show", "3"}).out)["key"], "");  // the empty key
  EXPECT_EQ(json::parse(run({"--json", "jobs", "show", "4"}).out)["key"], "caf\xc3\xa9");
  EXPECT_EQ(json::parse(run({"--json", "jobs", "show", "7"}).out)["key"], longest);
  j = json::parse(run({"--json", "jobs", "ls", "--queue", "tenants"}).out);
  ASSERT_EQ(j["jobs"].size(), 5u);
  std::vector<std::string> keys;
  for (const auto& job : j["jobs"]) keys.push_back(job["key"]);
  EXPECT_EQ(keys, (std::vector<std::string>{"tenant-42", "tenant-42", "", "caf\xc3\xa9", "7"}));

  r = run({"jobs", "show", "1"});
  EXPECT_NE(r.out.find("\nkey:              tenant-42\n"), std::string::npos) << r.out;
  r = run({"jobs", "show", "3"});
  EXPECT_NE(r.out.find("\nkey:              (none: the empty key)\n"), std::string::npos) << r.out;

  // ls: a KEY column after QUEUE, "-" for the empty key, left-aligned (even
  // "7"), its width counted in characters (the UTF-8 key lines up).
  r = run({"jobs", "ls", "--queue", "tenants"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines;
  for (size_t at = 0, nl; (nl = r.out.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(r.out.substr(at, nl - at));
  ASSERT_EQ(lines.size(), 6u) << r.out;
  EXPECT_EQ(lines[0].rfind("ID  QUEUE    KEY        KIND  STATE ", 0), 0u) << r.out;
  EXPECT_EQ(lines[1].rfind(" 1  tenants  tenant-42  noop  scheduled ", 0), 0u) << r.out;
  EXPECT_EQ(lines[3].rfind(" 3  tenants  -          noop  scheduled ", 0), 0u) << r.out;
  EXPECT_EQ(lines[4].rfind(" 4  tenants  caf\xc3\xa9       noop  scheduled ", 0), 0u) << r.out;
  EXPECT_EQ(lines[5].rfind(" 5  tenants  7          noop  scheduled ", 0), 0u) << r.out;
  // A page without keys has no KEY column.
  r = run({"jobs", "ls", "--queue", "plain"});
  EXPECT_EQ(r.out.rfind("ID  QUEUE  KIND  STATE ", 0), 0u) << r.out;
  // A long key is cut in the table (jobs show has it whole).
  r = run({"jobs", "ls", "--queue", "long"});
  EXPECT_NE(r.out.find("  " + std::string(37, 'k') + "...  noop"), std::string::npos) << r.out;
  EXPECT_NE(run({"jobs", "show", "7"}).out.find("\nkey:              " + longest + "\n"),
            std::string::npos);
}

// `conveyor keys` on storage: ready jobs per key, busiest first; running
// and throttled are the serving process's, so unknown here.
TEST_F(Cli, KeysListsReadyKeysBusiestFirst) {
  config_ = test::write_sqlite_config(
      dir_, "[queues.tenants]\nkey_rate_limit = { rate = 5, burst = 10 }\nkey_max_workers = 2\n");
  for (const auto& [key, count] :
       std::vector<std::pair<std::string, std::string>>{{"a", "3"}, {"b", "5"}, {"c", "1"}}) {
    auto r = run({"enqueue", "tenants", "noop", "--key", key, "--count", count});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  ASSERT_EQ(run({"enqueue", "tenants", "noop", "--count", "2"}).exit_code, 0);  // the empty key
  // Scheduled jobs are not ready: key d does not show.
  ASSERT_EQ(run({"enqueue", "tenants", "noop", "--key", "d", "--delay", "3600"}).exit_code, 0);

  auto r = run({"keys", "tenants"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "KEY  READY  RUNNING  THROTTLED  LIMIT         SOURCE        WEIGHT\n"
            "b        5        -          -  5/s burst 10  queue-config       1\n"
            "a        3        -          -  5/s burst 10  queue-config       1\n"
            "\"\"       2        -          -  5/s burst 10  queue-config       1\n"
            "c        1        -          -  5/s burst 10  queue-config       1\n"
            "4 of 4 key(s), busiest first\n"
            "key limit: 5/s burst 10 per key, at most 2 running per key (source: queue-config); "
            "fairness: fair\n");
  EXPECT_NE(r.err.find("running and throttled live in the serving process: add --server URL"),
            std::string::npos)
      << r.err;

  r = run({"--json", "keys", "tenants", "--limit", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const json j = json::parse(r.out);
  EXPECT_EQ(j["queue"], "tenants");
  ASSERT_EQ(j["keys"].size(), 2u);
  EXPECT_EQ(j["keys"][0], json::parse(R"({"key":"b","ready":5,"ready_capped":false,
      "running":null,"throttled":null,"weight":1,
      "limit":{"rate":5.0,"burst":10,"scope":"process","source":"queue-config"}})"));
  EXPECT_EQ(j["keys"][1]["key"], "a");
  EXPECT_EQ(j["total_keys"], 4);
  EXPECT_EQ(j["live"], false);
  EXPECT_EQ(j["complete"], true);
  EXPECT_EQ(j["key_limit"], json::parse(R"({"rate":5.0,"burst":10,"scope":"process",
                                            "max_workers":2,"source":"queue-config"})"));

  // A queue without per-key settings and without jobs.
  r = run({"keys", "other"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "queue other: no keys with ready jobs\n"
            "key limit: none (source: none); fairness: fair\n");

  expect_one_line_error(run({"keys", "tenants", "--limit", "0"}), 2,
                        "--limit must be from 1 to 1000 keys, got 0");
  expect_one_line_error(run({"keys", "tenants", "--limit", "1001"}), 2,
                        "--limit must be from 1 to 1000 keys, got 1001");
  expect_one_line_error(run({"keys", "tenants", "--limit", "many"}), 2,
                        "--limit must be a whole number from 1 to 1000");
  expect_one_line_error(run({"keys", "no way"}), 2, "invalid queue name");
}

// Run-time settings of keys on storage: a key's own limit (--key), the
// limit of every key (--per-key) and weights, each shown by `conveyor keys`
// with its source, listed by `ratelimit ls`, removed back to the config.
TEST_F(Cli, KeySettingsSetShowAndRemove) {
  config_ = test::write_sqlite_config(dir_,
                                      "[queues.tenants]\nkey_rate_limit = { rate = 5, burst = 10 "
                                      "}\n[queues.plain]\nfairness = \"fifo\"\n");
  ASSERT_EQ(run({"enqueue", "tenants", "noop", "--key", "a", "--count", "3"}).exit_code, 0);
  ASSERT_EQ(run({"enqueue", "tenants", "noop", "--key", "b", "--count", "2"}).exit_code, 0);
  ASSERT_EQ(run({"enqueue", "tenants", "noop"}).exit_code, 0);  // the empty key
  // KEY LIMIT... words of each key's row, after READY RUNNING THROTTLED.
  const auto key_row = [&](const std::string& key) {
    const auto r = run({"keys", "tenants"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::string> words = words_of_row(r.out, key);
    if (words.size() > 4) words.erase(words.begin() + 1, words.begin() + 4);
    return words;
  };
  using Words = std::vector<std::string>;
  EXPECT_EQ(key_row("a"), (Words{"a", "5/s", "burst", "10", "queue-config", "1"}));

  auto r = run({"ratelimit", "set", "tenants", "--key", "a", "--rate", "2", "--burst", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "queue tenants key \"a\" limited to 2/s (burst 3)\n"
            "scope: process (each process has its own bucket: N processes start up to N x 2/s)\n");
  EXPECT_EQ(key_row("a"), (Words{"a", "2/s", "burst", "3", "override", "1"}));
  EXPECT_EQ(key_row("b"), (Words{"b", "5/s", "burst", "10", "queue-config", "1"}));

  r = run({"ratelimit", "set", "tenants", "--per-key", "--rate", "1", "--scope", "fleet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "every key of queue tenants limited to 1/s (burst 1) each\n"
            "scope: fleet (one bucket per key shared by every process on this storage: at most "
            "1/s per key in all)\n");
  // A key's own limit wins over the one for every key, which wins over
  // key_rate_limit.
  EXPECT_EQ(key_row("a"), (Words{"a", "2/s", "burst", "3", "override", "1"}));
  EXPECT_EQ(key_row("b"), (Words{"b", "1/s", "burst", "1", "(fleet)", "per-key-override", "1"}));
  EXPECT_EQ(key_row("\"\""),
            (Words{"\"\"", "1/s", "burst", "1", "(fleet)", "per-key-override", "1"}));

  r = run({"keys", "weight", "tenants", "b", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "queue tenants key \"b\" weight 3 (3 jobs a round where weight 1 gets one)\n");
  EXPECT_EQ(key_row("b"), (Words{"b", "1/s", "burst", "1", "(fleet)", "per-key-override", "3"}));
  r = run({"--json", "ratelimit", "set", "tenants", "--key", "", "--rate", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out),
            json::parse(R"({"queue":"tenants","key":"","rate":4.0,"burst":4,"scope":"process"})"));

  r = run({"--json", "keys", "tenants"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j["keys"].size(), 3u);
  EXPECT_EQ(j["keys"][0]["key"], "a");
  EXPECT_EQ(j["keys"][0]["limit"],
            json::parse(R"({"rate":2.0,"burst":3,"scope":"process","source":"override"})"));
  EXPECT_EQ(j["keys"][1]["key"], "b");
  EXPECT_EQ(j["keys"][1]["weight"], 3);
  EXPECT_EQ(j["keys"][1]["limit"]["source"], "per-key-override");
  EXPECT_EQ(j["keys"][2]["key"], "");
  EXPECT_EQ(j["keys"][2]["limit"]["source"], "override");
  EXPECT_EQ(j["key_limit"]["source"], "per-key-override");
  EXPECT_EQ(j["key_limit"]["scope"], "fleet");

  // ratelimit ls: the settings of keys under the queues' overrides.
  r = run({"ratelimit", "ls"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("no per-queue overrides\nkey settings (a key's own limit wins over the one "
                       "for every key, which wins over key_rate_limit):\n"
                       "QUEUE    KEY          RATE  BURST  SCOPE    WEIGHT  UPDATED\n"),
            std::string::npos)
      << r.out;
  // A key setting's row without its UPDATED time.
  const auto ls_row = [&](const std::string& key) {
    for (Words& words : words_of_lines(r.out)) {
      if (words.size() >= 2 && words[0] == "tenants" && words[1] == key) {
        words.pop_back();
        return words;
      }
    }
    return Words{};
  };
  EXPECT_EQ(ls_row("\"\""), (Words{"tenants", "\"\"", "4", "4", "process", "-"}));
  EXPECT_EQ(ls_row("a"), (Words{"tenants", "a", "2", "3", "process", "-"}));
  EXPECT_EQ(ls_row("b"), (Words{"tenants", "b", "-", "-", "-", "3"}));
  EXPECT_EQ(ls_row("(every"), (Words{"tenants", "(every", "key)", "1", "1", "fleet", "-"}));
  r = run({"--json", "ratelimit", "ls"});
  j = json::parse(r.out);
  ASSERT_EQ(j["key_settings"].size(), 4u) << r.out;
  EXPECT_EQ(j["key_settings"][1]["key"], "a");
  EXPECT_EQ(j["key_settings"][1]["rate"], 2.0);
  EXPECT_EQ(j["key_settings"][1]["weight"], nullptr);
  EXPECT_EQ(j["key_settings"][2]["weight"], 3);
  EXPECT_EQ(j["key_settings"][2]["rate"], nullptr);
  EXPECT_EQ(j["key_settings"][3]["key"], nullptr);  // every key
  EXPECT_EQ(j["key_settings"][3]["scope"], "fleet");
  EXPECT_TRUE(j["key_settings"][3]["updated_at"].is_string());
  EXPECT_TRUE(j["overrides"].empty());

  // The kill switch wins over every key's limit too.
  ASSERT_EQ(run({"ratelimit", "disable"}).exit_code, 0);
  EXPECT_EQ(key_row("a"), (Words{"a", "unlimited", "disabled", "1"}));
  ASSERT_EQ(run({"ratelimit", "enable"}).exit_code, 0);

  // Removed: back to the next layer.
  r = run({"ratelimit", "rm", "tenants", "--key", "a"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "queue tenants key \"a\" rate limit cleared\n");
  EXPECT_EQ(key_row("a"), (Words{"a", "1/s", "burst", "1", "(fleet)", "per-key-override", "1"}));
  expect_one_line_error(run({"ratelimit", "rm", "tenants", "--key", "a"}), 1,
                        "queue tenants key \"a\" has no rate limit of its own (see: conveyor "
                        "ratelimit ls)");
  r = run({"ratelimit", "rm", "tenants", "--per-key"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "queue tenants rate limit for every key cleared\n");
  EXPECT_EQ(key_row("a"), (Words{"a", "5/s", "burst", "10", "queue-config", "1"}));
  expect_one_line_error(run({"ratelimit", "rm", "tenants", "--per-key"}), 1,
                        "queue tenants has no rate limit for every key (see: conveyor ratelimit "
                        "ls)");
  r = run({"--json", "keys", "weight", "tenants", "b", "--reset"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out),
            json::parse(R"({"queue":"tenants","key":"b","weight":1,"reset":true})"));
  EXPECT_EQ(key_row("b"), (Words{"b", "5/s", "burst", "10", "queue-config", "1"}));
  expect_one_line_error(run({"keys", "weight", "tenants", "b", "--reset"}), 1,
                        "queue tenants key \"b\" has no weight set: its weight is the default, 1");
  r = run({"--json", "ratelimit", "rm", "tenants", "--key", ""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out), json::parse(R"({"queue":"tenants","key":"","cleared":true})"));
  EXPECT_TRUE(json::parse(run({"--json", "ratelimit", "ls"}).out)["key_settings"].empty());
  // Without key settings, ratelimit ls reads as before them.
  EXPECT_EQ(run({"ratelimit", "ls"}).out.find("key settings"), std::string::npos);

  // Refused, exit 2, nothing stored.
  expect_one_line_error(
      run({"ratelimit", "set", "tenants", "--key", "a", "--per-key", "--rate", "1"}), 2,
      "give --key K (that key's own limit) or --per-key (the limit of every key of the queue), "
      "not both");
  expect_one_line_error(run({"ratelimit", "rm", "tenants", "--key", "a", "--per-key"}), 2,
                        "not both");
  expect_one_line_error(run({"ratelimit", "set", "plain", "--key", "a", "--rate", "1"}), 2,
                        "queue plain has fairness = \"fifo\": it claims across keys in claim "
                        "order, so a key has no limit or weight of its own; write fairness = "
                        "\"fair\" in [queues.plain]");
  expect_one_line_error(run({"ratelimit", "set", "plain", "--per-key", "--rate", "1"}), 2,
                        "fairness = \"fifo\"");
  expect_one_line_error(run({"keys", "weight", "plain", "a", "2"}), 2, "fairness = \"fifo\"");
  expect_one_line_error(
      run({"ratelimit", "set", "tenants", "--key", std::string(201, 'k'), "--rate", "1"}), 2,
      "key is 201 bytes; the longest is 200 bytes (UTF-8)");
  expect_one_line_error(run({"ratelimit", "set", "tenants", "--per-key", "--rate", "0"}), 2,
                        "rate");
  expect_one_line_error(run({"keys", "weight", "tenants", "b", "0"}), 2,
                        "weight must be 1..1000, got 0");
  expect_one_line_error(run({"keys", "weight", "tenants", "b", "1001"}), 2,
                        "weight must be 1..1000, got 1001");
  expect_one_line_error(run({"keys", "weight", "tenants", "b", "heavy"}), 2,
                        "weight must be a whole number from 1 to 1000, got \"heavy\"");
  expect_one_line_error(run({"keys", "weight", "tenants", "b"}), 2,
                        "give the key's weight, 1..1000 (conveyor keys weight QUEUE KEY W), or "
                        "--reset to return it to the default, 1");
  expect_one_line_error(run({"keys", "weight", "tenants", "b", "2", "--reset"}), 2, "not both");
  expect_one_line_error(run({"keys", "weight", "tenants", "b", "2", "--limit", "5"}), 2,
                        "no --limit");
  expect_one_line_error(run({"keys"}), 2, "give a queue: conveyor keys QUEUE");
  EXPECT_TRUE(json::parse(run({"--json", "ratelimit", "ls"}).out)["key_settings"].empty());
}

// A plugin without ABI 1.2's slots (the SDK's memory_c example) refuses
// fleet limits, the kill switch and costs above 1, saying which plugin;
// process limits still work on it.
TEST(CliOnAnOlderPlugin, FleetScopeAndTheKillSwitchAreRefused) {
  TempDir dir;
  const auto config = dir / "conveyor.toml";
  std::ofstream(config) << "[storage]\nplugin = \"" << CONVEYOR_TEST_EXAMPLE_PLUGIN_DIR
                        << "/libconveyor-memory_c.so\"\n";
  const auto cli = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--config", config.string()});
    return run_conveyor(args);
  };
  auto r = cli({"ratelimit", "set", "q", "--rate", "5", "--scope", "fleet"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("conveyor: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("scope"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("memory_c"), std::string::npos) << r.err;
  r = cli({"ratelimit", "disable"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("memory_c"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  // A cost above 1 needs enqueue_v3: refused naming the plugin, nothing enqueued.
  r = cli({"enqueue", "q", "noop", "--cost", "2"});
  EXPECT_NE(r.exit_code, 0);
  // (After the warning that memory_c's jobs vanish with the process.)
  const std::string last = r.err.substr(r.err.rfind("\nconveyor: ") + 1);
  EXPECT_NE(last.find("memory_c"), std::string::npos) << r.err;
  EXPECT_NE(last.find("cost"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  // A job key needs ABI 1.4's enqueue_v4: refused naming the plugin, exit 2.
  r = cli({"enqueue", "q", "noop", "--key", "tenant-42"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  const std::string key_error = r.err.substr(r.err.rfind("\nconveyor: ") + 1);
  EXPECT_NE(key_error.find("memory_c"), std::string::npos) << r.err;
  EXPECT_NE(key_error.find("key"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  r = cli({"ratelimit", "set", "q", "--rate", "5"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Settings of keys need ABI 1.5: refused naming the plugin, exit 1.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"ratelimit", "set", "q", "--key", "a", "--rate", "5"},
                                             {"ratelimit", "set", "q", "--per-key", "--rate", "5"},
                                             {"keys", "weight", "q", "a", "2"}}) {
    r = cli(args);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    const std::string last = r.err.substr(r.err.rfind("conveyor: "));
    EXPECT_NE(last.find("memory_c"), std::string::npos) << r.err;
    EXPECT_NE(last.find("(ABI 1." + std::to_string(CONVEYOR_ABI_MINOR) + ")"), std::string::npos)
        << r.err;
    EXPECT_EQ(r.out, "");
  }
  r = cli({"--json", "ratelimit", "ls"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["enabled_source"], "config");
  // Per-key settings need ABI 1.4 too: the engine refuses them at start,
  // naming the queue and the plugin.
  std::ofstream(config, std::ios::app) << "[queues.tenants]\nkey_max_workers = 2\n";
  r = cli({"enqueue", "q", "noop"});
  EXPECT_NE(r.exit_code, 0) << r.err;
  const std::string config_error = r.err.substr(r.err.rfind("conveyor: "));
  EXPECT_NE(config_error.find("[queues.tenants]"), std::string::npos) << r.err;
  EXPECT_NE(config_error.find("memory_c"), std::string::npos) << r.err;
  EXPECT_NE(config_error.find("ABI 1.4"), std::string::npos) << r.err;
}

// --count is one transaction: whoever looks (or kills the process) sees
// none of the jobs or all of them, never the first chunks.
TEST_F(Cli, EnqueueCountIsAllOrNothing) {
  ASSERT_EQ(run({"enqueue", "q", "noop"}).exit_code, 0);  // the database and queue exist
  constexpr int64_t kCount = 200000;
  test::Process enqueue(
      {"--config", config_.string(), "enqueue", "q", "noop", "--count", std::to_string(kCount)});
  std::vector<int64_t> seen;
  const auto pending = [&]() -> int64_t {
    auto r = run({"--json", "queues"});
    if (r.exit_code != 0) return -1;
    return json::parse(r.out)[0]["pending"].get<int64_t>() - 1;
  };
  ASSERT_TRUE(test::wait_until([&] {
    const int64_t n = pending();
    if (n >= 0) seen.push_back(n);
    return n > 0 || enqueue.wait(std::chrono::milliseconds(1)) >= 0;
  }));
  enqueue.signal(SIGKILL);  // mid-run with chunks; after the commit now
  enqueue.wait();
  seen.push_back(pending());
  for (int64_t n : seen) EXPECT_TRUE(n == 0 || n == kCount) << n << " jobs were visible";
}

// SIGHUP (a closed terminal, a supervisor's reload) reloads the config and
// does not stop serve, nor touch its running job; SIGTERM then stops serve
// gracefully: the running job's lease is given back, not left to expire.
TEST_F(Cli, SighupReloadsWithoutStoppingAndSigtermStopsServeGracefullyAndReleasesLeases) {
  std::ofstream(config_, std::ios::app)
      << "[engine]\npoll_interval_ms = 50\nshutdown_timeout_ms = 100\nlease_ms = 600000\n";
  ASSERT_EQ(run({"enqueue", "long", "sleep", "--payload", R"({"ms": 600000})"}).exit_code, 0);
  test::Process serve({"--config", config_.string(), "serve"});
  auto running = [&]() -> int64_t {
    auto r = run({"--json", "queues"});
    if (r.exit_code != 0) return -1;
    for (const auto& q : json::parse(r.out))
      if (q["queue"] == "long") return q["running"].get<int64_t>();
    return -1;
  };
  ASSERT_TRUE(test::wait_until([&] { return running() == 1; })) << serve.stderr_text();
  serve.signal(SIGHUP);
  ASSERT_TRUE(test::wait_until([&] {
    return serve.stderr_text().find("SIGHUP: reloaded ") != std::string::npos ||
           serve.wait(std::chrono::milliseconds(1)) >= 0;
  })) << serve.stderr_text();
  ASSERT_LT(serve.wait(std::chrono::milliseconds(1)), 0) << serve.stderr_text();
  EXPECT_EQ(running(), 1);
  serve.signal(SIGTERM);
  EXPECT_EQ(serve.wait(), 0) << serve.stderr_text();
  EXPECT_NE(serve.stderr_text().find("received SIGTERM, stopping"), std::string::npos)
      << serve.stderr_text();
  auto r = run({"--json", "queues"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_EQ(j.size(), 1u) << r.out;
  EXPECT_EQ(j[0]["running"], 0) << r.out;  // released, not held for lease_ms
  EXPECT_EQ(j[0]["pending"], 1) << r.out;
}

}  // namespace
}  // namespace conveyor
