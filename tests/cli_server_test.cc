// `conveyor --server URL ...` against a running `conveyor serve`: the same
// output and exit codes as when the CLI opens storage itself, the token from
// the environment, and errors that say what went wrong.
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

namespace conveyor {
namespace {

using test::expect_one_line_error;

// What `conveyor queues` adds on a local read: holds live in the server.
constexpr const char* kLocalQueuesNote =
    "note: read from storage; a serving process may hold a queue for backpressure (the "
    "downstream asked it to wait): add --server URL to see its holds\n";

using nlohmann::json;

class CliServer : public ::testing::Test {
 protected:
  // Starts `conveyor serve` with these [server] keys; the CLI in server mode
  // (with client_env) answering is the sign it is up.
  void start(const std::string& server_keys, const std::vector<std::string>& client_env = {},
             int poll_interval_ms = 50) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      const uint16_t port = test::free_port();
      url_ = "http://127.0.0.1:" + std::to_string(port);
      config_ = test::write_sqlite_config(
          dir_, "[engine]\npoll_interval_ms = " + std::to_string(poll_interval_ms) +
                    "\n[server]\nlisten = \"127.0.0.1:" + std::to_string(port) + "\"\n" +
                    server_keys);
      server_ = std::make_unique<test::Process>(
          std::vector<std::string>{"--config", config_.string(), "serve"});
      if (test::wait_until([&] {
            return server_->wait(std::chrono::milliseconds(20)) >= 0 ||
                   remote({"queues"}, client_env).exit_code == 0;
          }) &&
          server_->wait(std::chrono::milliseconds(20)) < 0)
        return;
    }
    FAIL() << "server did not start: " << server_->stderr_text();
  }
  // The CLI on the server's API.
  test::CommandResult remote(std::vector<std::string> args, std::vector<std::string> env = {}) {
    args.insert(args.begin(), {"--server", url_});
    return test::run_conveyor(args, env);
  }
  // The CLI on the same storage, opened directly.
  test::CommandResult local(std::vector<std::string> args) {
    args.insert(args.begin(), {"--config", config_.string()});
    return test::run_conveyor(args);
  }

  test::TempDir dir_;
  std::filesystem::path config_;
  std::string url_;
  std::unique_ptr<test::Process> server_;
};

TEST_F(CliServer, SameOutputAsStorageMode) {
  start("allow_unauthenticated = true\n");
  auto r = remote({"ratelimit", "set", "email", "--rate", "50", "--burst", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "queue email limited to 50/s (burst 10)\n"
            "scope: process (each process has its own bucket: N processes start up to N x 50/s)\n");
  r = remote({"ratelimit", "set", "sms", "--rate", "2.5"});
  // burst ceil(rate), as locally
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "queue sms limited to 2.5/s (burst 3)");
  r = remote(
      {"--json", "ratelimit", "set", "push", "--rate", "1", "--burst", "1", "--scope", "fleet"});
  EXPECT_EQ(json::parse(r.out),
            json::parse(R"({"queue":"push","rate":1.0,"burst":1,"scope":"fleet"})"));
  // Jobs that wait an hour keep the counts still while both modes look.
  r = remote({"enqueue", "email", "noop", "--count", "3", "--delay", "3600"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "enqueued 3 jobs on queue email (ids 1..3)\n");
  r = remote({"enqueue", "later", "sleep", "--payload", R"({"ms": 5})", "--delay", "3600",
              "--priority", "2", "--max-attempts", "4"});
  EXPECT_EQ(r.out, "enqueued job 4 on queue later\n");
  r = remote({"--json", "enqueue", "later", "noop", "--delay", "3600", "--cost", "3"});
  EXPECT_EQ(json::parse(r.out),
            json::parse(R"({"queue":"later","kind":"noop","count":1,"first_id":5,"last_id":5})"));
  // The cost went over the API and back.
  EXPECT_EQ(json::parse(remote({"--json", "jobs", "show", "5"}).out)["cost"], 3);
  EXPECT_EQ(json::parse(remote({"--json", "jobs", "show", "4"}).out)["cost"], 1);
  // The key too (issue 36): job 6 has one, the others the empty key.
  r = remote({"enqueue", "later", "noop", "--delay", "3600", "--key", "tenant-\xc3\xa9"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(remote({"--json", "jobs", "show", "6"}).out)["key"], "tenant-\xc3\xa9");
  EXPECT_EQ(json::parse(remote({"--json", "jobs", "show", "5"}).out)["key"], "");

  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"queues"},
                                             {"--json", "queues"},
                                             {"ratelimit", "ls"},
                                             {"--json", "ratelimit", "ls"},
                                             {"jobs", "show", "5"},
                                             {"jobs", "show", "6"},
                                             {"jobs", "ls", "--queue", "later"},
                                             {"--json", "jobs", "ls", "--queue", "later"}}) {
    const auto a = remote(args);
    const auto b = local(args);
    EXPECT_EQ(a.exit_code, 0) << a.err;
    EXPECT_EQ(a.out, b.out) << args.back();
    EXPECT_EQ(a.err, "") << args.back();
    EXPECT_EQ(b.err, args == std::vector<std::string>{"queues"} ? kLocalQueuesNote : "")
        << args.back();
  }
  r = remote({"--json", "queues"});
  json j = json::parse(r.out);
  ASSERT_EQ(j.size(), 4u) << r.out;  // email, later, push, sms
  EXPECT_EQ(j[0]["queue"], "email");
  EXPECT_EQ(j[0]["scheduled"], 3);
  EXPECT_EQ(j[0]["limit"],
            json::parse(R"({"rate":50.0,"burst":10,"scope":"process","source":"override"})"));
  EXPECT_EQ(j[2]["queue"], "push");
  EXPECT_EQ(j[2]["limit"]["scope"], "fleet");
  j = json::parse(remote({"--json", "ratelimit", "ls"}).out);
  EXPECT_EQ(j["enabled_source"], "config");
  EXPECT_EQ(j["overrides"][1]["queue"], "push");
  EXPECT_EQ(j["overrides"][1]["scope"], "fleet");

  r = remote({"ratelimit", "rm", "email"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "queue email rate limit cleared\n");
  // Not found: the same message and exit code in both modes.
  const auto a = remote({"ratelimit", "rm", "email"});
  const auto b = local({"ratelimit", "rm", "email"});
  expect_one_line_error(a, 1,
                        "queue email has no rate-limit override (see: conveyor ratelimit ls)");
  EXPECT_EQ(a.err, b.err);
  EXPECT_EQ(a.exit_code, b.exit_code);
}

// SQLite notifies: a job the CLI (another process, on the file itself)
// enqueues into a queue the server has never seen runs long before the
// server's next poll (a minute away).
TEST_F(CliServer, AJobEnqueuedByAnotherProcessRunsWithoutWaitingForThePoll) {
  start("allow_unauthenticated = true\n", {}, /*poll_interval_ms=*/60'000);
  const auto enqueued = std::chrono::steady_clock::now();
  auto r = local({"enqueue", "fresh", "noop"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto completed = [&] {
    auto q = remote({"--json", "queues"});
    if (q.exit_code != 0) return false;
    for (const json& row : json::parse(q.out))
      if (row.at("queue") == "fresh") return row.at("completed").get<int64_t>() == 1;
    return false;
  };
  ASSERT_TRUE(test::wait_until(completed, std::chrono::seconds(20)))
      << "the job waited for the poll: " << server_->stderr_text();
  EXPECT_LT(std::chrono::steady_clock::now() - enqueued, std::chrono::seconds(30));
}

TEST_F(CliServer, EnqueueManyGoesInBatches) {
  start("allow_unauthenticated = true\n");
  auto r = remote({"enqueue", "bulk", "noop", "--count", "2500", "--delay", "3600"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "enqueued 2500 jobs on queue bulk (ids 1..2500)\n");
  json j = json::parse(local({"--json", "queues"}).out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["scheduled"], 2500);
}

TEST_F(CliServer, ValidationHappensBeforeAnyRequestWithTheSameMessages) {
  // Nothing listens at this URL: these fail on the input alone.
  url_ = "http://127.0.0.1:" + std::to_string(test::free_port());
  config_ = test::write_sqlite_config(dir_);
  const std::vector<std::vector<std::string>> bad = {
      {"ratelimit", "set", "email", "--rate", "0"},
      {"ratelimit", "set", "email", "--rate", "nan"},
      {"ratelimit", "set", "email", "--rate", "5", "--burst", "0"},
      {"ratelimit", "set", "bad queue", "--rate", "5"},
      {"ratelimit", "rm", "bad queue"},
      {"enqueue", "q", "noop", "--payload", "{not json"},
      {"enqueue", "q", "noop", "--count", "0"},
      {"enqueue", "q", "noop", "--max-attempts", "0"},
      {"enqueue", "q", "noop", "--delay", "-1"},
      {"enqueue", "q", "bad kind"},
      {"enqueue", "q", "noop", "--cost", "0"},
      {"enqueue", "q", "noop", "--cost", "1000001"},
      {"enqueue", "q", "noop", "--cost", "many"},
      {"enqueue", "q", "noop", "--key", std::string(201, 'k')},
      {"enqueue", "q", "noop", "--key", "bad\xff"},
      {"ratelimit", "set", "email", "--rate", "5", "--scope", "galaxy"},
      {"ratelimit", "set", "email", "--key", "a", "--per-key", "--rate", "5"},
      {"ratelimit", "set", "email", "--key", std::string(201, 'k'), "--rate", "5"},
      {"ratelimit", "rm", "email", "--key", "a", "--per-key"},
      {"keys", "weight", "email", "a", "0"},
      {"keys", "weight", "email", "a", "many"},
      {"keys", "weight", "email", "a"},
      {"keys", "weight", "email", "a", "2", "--reset"},
  };
  for (const auto& args : bad) {
    const auto a = remote(args);
    const auto b = local(args);
    EXPECT_EQ(a.exit_code, 2) << a.err;
    EXPECT_EQ(a.err, b.err);
    EXPECT_EQ(std::count(a.err.begin(), a.err.end(), '\n'), 1) << a.err;
  }
}

TEST_F(CliServer, UnreachableServerOrBadUrl) {
  url_ = "http://127.0.0.1:" + std::to_string(test::free_port());
  expect_one_line_error(remote({"queues"}), 1, "cannot reach conveyor server at " + url_);
  expect_one_line_error(test::run_conveyor({"--server", "127.0.0.1:8080/admin", "queues"}), 2,
                        "--server must be a URL like http://127.0.0.1:8080");
  expect_one_line_error(test::run_conveyor({"--server", "http://127.0.0.1:1", "serve"}), 2,
                        "--server does not apply to serve");
}

TEST_F(CliServer, TokenFromTheEnvironment) {
  start("admin_token = \"s3cret\"\n", {"CONVEYOR_ADMIN_TOKEN=s3cret"});
  expect_one_line_error(remote({"queues"}), 1, "missing Authorization header");
  expect_one_line_error(
      remote({"ratelimit", "set", "q", "--rate", "1"}, {"CONVEYOR_ADMIN_TOKEN=wrong"}), 1,
      "wrong admin token");
  auto r = remote({"ratelimit", "set", "q", "--rate", "1"}, {"CONVEYOR_ADMIN_TOKEN=s3cret"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "queue q limited to 1/s (burst 1)");
}

TEST_F(CliServer, ReadOnlyServerRefusesChanges) {
  start("allow_unauthenticated = true\nread_only = true\n");
  expect_one_line_error(remote({"ratelimit", "set", "q", "--rate", "1"}), 1, "read-only");
  expect_one_line_error(remote({"enqueue", "q", "noop"}), 1, "read-only");
  expect_one_line_error(remote({"ratelimit", "disable"}), 1, "read-only");
  auto r = remote({"ratelimit", "ls"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "no per-queue overrides\ndefault: none (queues without a limit are unlimited)\n"
            "rate limiting: enabled (source: config, [engine] rate_limit_enabled; nothing "
            "stored)\n");
}

// `ratelimit disable` / `enable` through the server: stored, so the storage
// the server runs on says so too, and the server's own queues show it.
TEST_F(CliServer, TheKillSwitchThroughTheApi) {
  start("allow_unauthenticated = true\n");
  ASSERT_EQ(remote({"ratelimit", "set", "email", "--rate", "5"}).exit_code, 0);
  auto r = remote({"ratelimit", "disable"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "rate limiting disabled: no limit throttles any queue (backpressure holds still "
            "apply); stored in storage, every process on it follows within a second\n");
  // The server follows at once; the storage holds it for every other process.
  EXPECT_EQ(json::parse(remote({"--json", "queues"}).out)[0]["limit"]["source"], "disabled");
  for (auto* mode : {"remote", "local"}) {
    const auto ls = std::string(mode) == "remote" ? remote({"--json", "ratelimit", "ls"})
                                                  : local({"--json", "ratelimit", "ls"});
    ASSERT_EQ(ls.exit_code, 0) << ls.err;
    const json j = json::parse(ls.out);
    EXPECT_EQ(j["enabled"], false) << mode;
    EXPECT_EQ(j["enabled_source"], "storage") << mode;
  }
  EXPECT_EQ(remote({"ratelimit", "ls"}).out, local({"ratelimit", "ls"}).out);
  r = remote({"--json", "ratelimit", "enable"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out), json::parse(R"({"enabled":true,"enabled_source":"storage"})"));
  EXPECT_EQ(json::parse(remote({"--json", "queues"}).out)[0]["limit"]["source"], "override");
  EXPECT_EQ(json::parse(local({"--json", "ratelimit", "ls"}).out)["enabled"], true);
  // Disabled from the storage side (another process): the server follows
  // within a second.
  ASSERT_EQ(local({"ratelimit", "disable"}).exit_code, 0);
  EXPECT_TRUE(test::wait_until([&] {
    const auto q = remote({"--json", "queues"});
    return q.exit_code == 0 && json::parse(q.out)[0]["limit"]["source"] == "disabled";
  })) << server_->stderr_text();
}

// `conveyor --server URL jobs ...` and `queues pause/resume`: the same output
// and exit codes as on storage, each id's outcome through the API.
TEST_F(CliServer, JobsCommandsThroughTheApi) {
  start("admin_token = \"tok\"\n", {"CONVEYOR_ADMIN_TOKEN=tok"});
  const std::vector<std::string> env = {"CONVEYOR_ADMIN_TOKEN=tok"};
  auto api = [&](std::vector<std::string> args) { return remote(std::move(args), env); };
  ASSERT_EQ(api({"enqueue", "email", "noop", "--count", "2", "--delay", "3600"}).exit_code, 0);
  ASSERT_EQ(api({"enqueue", "email", "http", "--payload", R"({"url":"http://127.0.0.1:9/"})",
                 "--count", "3"})
                .exit_code,
            0);
  ASSERT_EQ(api({"enqueue", "other", "noop", "--delay", "3600"}).exit_code, 0);
  // The server fails 3..5 for good (an http job to loopback is refused at once).
  ASSERT_TRUE(test::wait_until([&] {
    auto r = api({"--json", "queues"});
    return r.exit_code == 0 && json::parse(r.out)[0]["failed"] == 3;
  })) << server_->stderr_text();
  // Nothing moves now: both modes print the same.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"jobs", "ls"},
           {"--json", "jobs", "ls"},
           {"jobs", "ls", "--limit", "4"},
           {"--json", "jobs", "ls", "--limit", "4", "--after", "4"},
           {"jobs", "ls", "--queue", "email", "--state", "failed", "--kind", "http"},
           {"jobs", "show", "3"},
           {"--json", "jobs", "show", "6"},
           {"jobs", "show", "999"},
           {"jobs", "ls", "--limit", "1001"},
           {"jobs", "ls", "--state", "dead"},
           {"queues"}}) {
    const auto a = api(args);
    const auto b = local(args);
    EXPECT_EQ(a.exit_code, b.exit_code) << args.back() << ": " << a.err;
    EXPECT_EQ(a.out, b.out) << args.back();
    if (args == std::vector<std::string>{"queues"}) {
      EXPECT_EQ(a.err, "");
      EXPECT_EQ(b.err, kLocalQueuesNote);
    } else {
      EXPECT_EQ(a.err, b.err) << args.back();
    }
  }
  auto r = api({"--json", "jobs", "ls", "--limit", "4"});
  EXPECT_EQ(json::parse(r.out)["next_after_id"], 4);
  EXPECT_EQ(json::parse(r.out)["jobs"].size(), 4u);

  r = api({"jobs", "retry", "3", "1", "999"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "job 3 retried\n1 of 3 jobs retried\n");
  EXPECT_EQ(r.err,
            "conveyor: job 1 not retried: only failed or cancelled jobs can be retried\n"
            "conveyor: job 999 not found\n");
  r = api({"--json", "jobs", "retry", "--queue", "email", "--state", "failed", "--after", "3"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const json bulk = json::parse(r.out);
  EXPECT_EQ(bulk["queue"], "email");
  // 4 and 5; 3 too if it already failed again (after 3: not retried twice).
  EXPECT_EQ(bulk["retried"], 2) << r.out;

  r = api({"jobs", "cancel", "6", "999"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "job 6 cancelled\n");
  EXPECT_EQ(r.err, "conveyor: job 999 not found\n");
  r = api({"jobs", "cancel", "6"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "conveyor: job 6 not cancelled: it is already cancelled\n");
  r = api({"--json", "jobs", "rm", "6", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(json::parse(r.out), json::parse(R"({"outcomes":[{"id":6,"outcome":"ok"},
      {"id":1,"outcome":"wrong_state"}],"removed":1})"));
  expect_one_line_error(api({"jobs", "show", "6"}), 1, "job 6 not found");

  r = api({"queues", "pause", "email"});
  EXPECT_EQ(r.out, "queue email paused (no new claims in any process)\n");
  EXPECT_EQ(json::parse(local({"--json", "queues"}).out)[0]["paused"], true);
  r = api({"--json", "queues", "resume", "email"});
  EXPECT_EQ(json::parse(r.out), json::parse(R"({"queue":"email","paused":false})"));
  EXPECT_EQ(json::parse(local({"--json", "queues"}).out)[0]["paused"], false);

  // Bad input is refused before any request, as locally; a wrong token by the server.
  expect_one_line_error(api({"jobs", "rm", "x"}), 2, "a job id must be a whole number >= 1");
  expect_one_line_error(remote({"jobs", "ls"}, {"CONVEYOR_ADMIN_TOKEN=wrong"}), 1,
                        "wrong admin token");
  expect_one_line_error(remote({"jobs", "retry", "3"}, {"CONVEYOR_ADMIN_TOKEN=wrong"}), 1,
                        "wrong admin token");
}

// `conveyor keys --server`: the server's running counts and throttled keys
// beside storage's ready counts; without --server they are unknown.
TEST_F(CliServer, KeysThroughTheApiShowRunningAndThrottledKeys) {
  start(
      "allow_unauthenticated = true\n"
      "[queues.tenants]\nkey_rate_limit = { rate = 0.01, burst = 1 }\n");
  // a: 4 long jobs, its bucket allows one start (the rest wait throttled);
  // b: one long job.
  ASSERT_EQ(remote({"enqueue", "tenants", "sleep", "--payload", R"({"ms":20000})", "--key", "a",
                    "--count", "4"})
                .exit_code,
            0);
  ASSERT_EQ(remote({"enqueue", "tenants", "sleep", "--payload", R"({"ms":20000})", "--key", "b"})
                .exit_code,
            0);
  json j;
  ASSERT_TRUE(test::wait_until([&] {
    auto r = remote({"--json", "keys", "tenants"});
    if (r.exit_code != 0) return false;
    j = json::parse(r.out);
    return j["keys"].size() == 2 && j["keys"][0]["running"] == 1 &&
           j["keys"][0]["throttled"] == true && j["keys"][1]["running"] == 1;
  })) << j.dump()
      << server_->stderr_text();
  EXPECT_EQ(j["live"], true);
  EXPECT_EQ(j["keys"][0]["key"], "a");
  EXPECT_EQ(j["keys"][0]["ready"], 3);
  EXPECT_EQ(j["keys"][1], json::parse(R"({"key":"b","ready":0,"ready_capped":false,
      "running":1,"throttled":false,"weight":1,
      "limit":{"rate":0.01,"burst":1,"scope":"process","source":"queue-config"}})"));
  EXPECT_EQ(j["key_limit"]["source"], "queue-config");
  EXPECT_EQ(j["key_limit"]["rate"], 0.01);
  EXPECT_EQ(j["key_limit"]["max_workers"], nullptr);
  auto r = remote({"keys", "tenants"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("KEY  READY  RUNNING  THROTTLED  LIMIT           SOURCE        WEIGHT\n"
                        "a        3        1  yes        0.01/s burst 1  queue-config       1\n"
                        "b        0        1  no         0.01/s burst 1  queue-config       1\n"
                        "2 of 2 key(s), busiest first\n",
                        0),
            0u)
      << r.out;
  EXPECT_EQ(r.err, "");  // live: no note
  // On storage: the same ready counts, running unknown.
  r = local({"--json", "keys", "tenants"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json here = json::parse(r.out);
  EXPECT_EQ(here["live"], false);
  ASSERT_EQ(here["keys"].size(), 1u);  // b has nothing ready
  EXPECT_EQ(here["keys"][0]["ready"], 3);
  EXPECT_EQ(here["keys"][0]["running"], nullptr);
  EXPECT_EQ(remote({"keys", "tenants", "--limit", "1001"}).exit_code, 2);
}

// Settings of keys through the API: the same output as on storage, and the
// serving engine follows a change another process makes on the storage:
// its keys show it, and its dispatch holds the key to its new limit.
TEST_F(CliServer, KeySettingsThroughTheApiAndFromAnotherProcess) {
  start(
      "allow_unauthenticated = true\n"
      "[queues.tenants]\nkey_rate_limit = { rate = 100, burst = 100 }\n"
      "[queues.plain]\nfairness = \"fifo\"\n");
  auto r = remote({"ratelimit", "set", "tenants", "--key", "a", "--rate", "2", "--burst", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "queue tenants key \"a\" limited to 2/s (burst 3)\n"
            "scope: process (each process has its own bucket: N processes start up to N x 2/s)\n");
  r = remote({"--json", "ratelimit", "set", "tenants", "--per-key", "--rate", "50"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out), json::parse(R"({"queue":"tenants","per_key":true,"rate":50.0,
                                                 "burst":50,"scope":"process"})"));
  r = remote({"keys", "weight", "tenants", "b", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "queue tenants key \"b\" weight 4 (4 jobs a round where weight 1 gets one)\n");
  // Stored: the storage says the same to a process that opens it.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"ratelimit", "ls"}, {"--json", "ratelimit", "ls"}}) {
    const auto a = remote(args);
    const auto b = local(args);
    EXPECT_EQ(a.exit_code, 0) << a.err;
    EXPECT_EQ(a.out, b.out) << args.back();
    EXPECT_NE(a.out.find("tenants"), std::string::npos) << a.out;
  }
  EXPECT_EQ(json::parse(local({"--json", "ratelimit", "ls"}).out)["key_settings"].size(), 3u);

  // Each key shows its limit, source and weight through the server.
  ASSERT_EQ(remote({"queues", "pause", "tenants"}).exit_code, 0);
  for (const char* key : {"a", "b", "c"})
    ASSERT_EQ(remote({"enqueue", "tenants", "noop", "--key", key, "--count", "3"}).exit_code, 0);
  r = remote({"--json", "keys", "tenants"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j["keys"].size(), 3u) << r.out;
  EXPECT_EQ(j["keys"][0]["limit"],
            json::parse(R"({"rate":2.0,"burst":3,"scope":"process","source":"override"})"));
  EXPECT_EQ(j["keys"][1]["limit"]["source"], "per-key-override");
  EXPECT_EQ(j["keys"][1]["weight"], 4);
  EXPECT_EQ(j["keys"][2]["limit"]["rate"], 50.0);
  // The same words as on storage, running and throttled apart.
  const json here = json::parse(local({"--json", "keys", "tenants"}).out);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(here["keys"][i]["limit"], j["keys"][i]["limit"]) << i;
    EXPECT_EQ(here["keys"][i]["weight"], j["keys"][i]["weight"]) << i;
  }

  // Another process (the CLI on the storage itself) gives key c a limit of
  // one job now and then none for 100 s: the server follows within a second.
  r = local({"ratelimit", "set", "tenants", "--key", "c", "--rate", "0.01", "--burst", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(test::wait_until([&] {
    const auto k = remote({"--json", "keys", "tenants"});
    if (k.exit_code != 0) return false;
    j = json::parse(k.out);
    for (const json& key : j["keys"])
      if (key["key"] == "c") return key["limit"]["source"] == "override";
    return false;
  })) << j.dump()
      << remote({"ratelimit", "ls"}).out << local({"ratelimit", "ls"}).out
      << server_->stderr_text();
  // Its dispatch holds c to it: a and b drain, c runs one job and waits.
  ASSERT_EQ(remote({"queues", "resume", "tenants"}).exit_code, 0);
  ASSERT_TRUE(test::wait_until([&] {
    const auto k = remote({"--json", "keys", "tenants"});
    if (k.exit_code != 0) return false;
    j = json::parse(k.out);
    return j["keys"].size() == 1 && j["keys"][0]["key"] == "c" && j["keys"][0]["ready"] == 2 &&
           j["keys"][0]["throttled"] == true;
  })) << j.dump()
      << server_->stderr_text();
  const auto completed = [&]() -> int64_t {
    const auto q = remote({"--json", "queues"});
    if (q.exit_code != 0) return -1;
    for (const json& row : json::parse(q.out))
      if (row["queue"] == "tenants") return row["completed"].get<int64_t>();
    return -1;
  };
  EXPECT_EQ(completed(), 7);

  // Removed by the other process: the server lets c go at once.
  ASSERT_EQ(local({"ratelimit", "rm", "tenants", "--key", "c"}).exit_code, 0);
  ASSERT_TRUE(test::wait_until([&] { return completed() == 9; })) << server_->stderr_text();

  // Not found: the same message and exit code in both modes.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"ratelimit", "rm", "tenants", "--key", "c"},
                                             {"keys", "weight", "tenants", "c", "--reset"}}) {
    const auto a = remote(args);
    const auto b = local(args);
    EXPECT_EQ(a.exit_code, 1) << a.err;
    EXPECT_EQ(a.err, b.err);
    EXPECT_EQ(a.exit_code, b.exit_code);
  }
  r = remote({"--json", "ratelimit", "rm", "tenants", "--per-key"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out),
            json::parse(R"({"queue":"tenants","per_key":true,"cleared":true})"));
  r = remote({"keys", "weight", "tenants", "b", "--reset"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "queue tenants key \"b\" weight reset to 1\n");
  // A fifo queue has no turns between keys: refused by the server, exit 2.
  r = remote({"ratelimit", "set", "plain", "--key", "a", "--rate", "1"});
  expect_one_line_error(r, 2, "queue plain has fairness = \"fifo\"");
  EXPECT_EQ(json::parse(local({"--json", "ratelimit", "ls"}).out)["key_settings"].size(), 1u);
}

// An enqueue larger than the server's max_body_bytes: the server refuses it
// as soon as it has the header and closes the connection while the CLI is
// still sending the body. The CLI must say so (exit 1), not die of SIGPIPE
// (exit 141 with nothing on stderr), and nothing is enqueued.
TEST_F(CliServer, EnqueueOverMaxBodyBytesSaysSoAndEnqueuesNothing) {
  start("allow_unauthenticated = true\nmax_body_bytes = 1024\n");
  const std::string payload = "\"" + std::string(100 * 1000, 'x') + "\"";
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           // Far more than the server drains before it closes (1 MiB).
           {"enqueue", "q", "noop", "--count", "1000000"},
           {"enqueue", "q", "noop", "--count", "100", "--payload", payload},
           // Small enough that the whole body is sent before the answer.
           {"enqueue", "q", "noop", "--count", "100"}}) {
    const auto r = remote(args);
    EXPECT_NE(r.exit_code, 141) << "killed by SIGPIPE: " << args[4];
    expect_one_line_error(r, 1, "[server] max_body_bytes");
    EXPECT_NE(r.err.find("nothing was enqueued (--count " + args[4] + " is one request"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("enqueue them in several runs with a smaller --count"), std::string::npos)
        << r.err;
  }
  // One job over the limit: no --count advice.
  const auto r = remote({"enqueue", "q", "noop", "--payload", payload});
  expect_one_line_error(r, 1, "max_body_bytes");
  EXPECT_NE(r.err.find("nothing was enqueued; use a smaller payload"), std::string::npos) << r.err;
  // The server is still up and nothing was stored.
  const auto ls = remote({"jobs", "ls"});
  EXPECT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_EQ(ls.out, "no jobs\n");
}

// --payload-file through the server, from a file and from standard input:
// payloads over the 128 KiB a command-line argument may hold.
TEST_F(CliServer, EnqueuePayloadFileThroughTheApi) {
  start("allow_unauthenticated = true\n");
  const std::string payload = "{\"blob\": \"" + std::string(200 * 1024, 'x') + "\"}";
  const auto file = dir_ / "payload.json";
  std::ofstream(file) << payload << "\n";
  auto r = remote({"enqueue", "blobs", "noop", "--payload-file", file.string(), "--delay", "3600"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "enqueued job 1 on queue blobs\n");
  r = test::run_conveyor({"--server", url_, "enqueue", "blobs", "noop", "--payload-file", "-",
                          "--count", "2", "--delay", "3600"},
                         {}, file);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "enqueued 2 jobs on queue blobs (ids 2..3)\n");
  for (const char* id : {"1", "2", "3"}) {
    r = remote({"--json", "jobs", "show", id});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)["payload"], payload) << id;
  }
  // Both --payload and --payload-file: refused, nothing enqueued.
  expect_one_line_error(
      remote({"enqueue", "blobs", "noop", "--payload", "{}", "--payload-file", file.string()}), 2,
      "give the payload with --payload JSON or with --payload-file PATH, not both");
  const auto bad = dir_ / "bad.json";
  std::ofstream(bad) << "[1,";
  expect_one_line_error(remote({"enqueue", "blobs", "noop", "--payload-file", bad.string()}), 2,
                        "payload is not valid JSON");
  r = remote({"--json", "queues"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)[0]["scheduled"], 3) << r.out;
}

TEST_F(CliServer, ReadOnlyServerRefusesJobChanges) {
  start("allow_unauthenticated = true\nread_only = true\n");
  expect_one_line_error(remote({"jobs", "retry", "1"}), 1, "read-only");
  expect_one_line_error(remote({"jobs", "cancel", "1"}), 1, "read-only");
  expect_one_line_error(remote({"jobs", "rm", "1"}), 1, "read-only");
  expect_one_line_error(remote({"queues", "pause", "q"}), 1, "read-only");
  expect_one_line_error(remote({"ratelimit", "set", "q", "--key", "a", "--rate", "1"}), 1,
                        "read-only");
  expect_one_line_error(remote({"keys", "weight", "q", "a", "2"}), 1, "read-only");
  auto r = remote({"jobs", "ls"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "no jobs\n");
}

// Day-two operations (issue 41), through the API and on storage directly:
// jobs cancel/rm --queue in batches with counts, bad states and a missing
// --queue refused, a bad sleep payload refused at enqueue, and queues rm:
// refused while a job runs, then --force removes jobs, override, key
// settings and the paused flag; a configured queue stays listed, empty.
TEST_F(CliServer, BulkJobOperationsAndQueueRemoval) {
  start("allow_unauthenticated = true\n[queues.configured]\nmax_workers = 2\n");
  auto counts = [&](const std::string& queue) {
    const auto r = remote({"--json", "queues"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    for (const json& q : json::parse(r.out))
      if (q["queue"] == queue) return q;
    return json();
  };
  // A bad sleep payload is refused at enqueue, through the API and locally.
  for (bool api : {true, false}) {
    for (const char* payload : {R"({"ms":-1})", R"({"ms":"5"})", R"({"ms":4000000})", "[1]"}) {
      std::vector<std::string> args{"enqueue", "bulk", "sleep", "--payload", payload};
      const auto r = api ? remote(args) : local(args);
      EXPECT_EQ(r.exit_code, 2) << payload << r.out;
      EXPECT_NE(r.err.find("sleep job payload"), std::string::npos) << r.err;
    }
  }
  const auto raw = test::http_send(
      std::stoi(url_.substr(url_.rfind(':') + 1)),
      test::http_request("POST", "/conveyor.v1.TaskService/Enqueue",
                         {"Content-Type: application/json"},
                         R"({"job":{"queue":"bulk","kind":"sleep","payload":"{\"ms\":-1}"}})"));
  EXPECT_EQ(raw.status, 400);
  EXPECT_NE(raw.body.find("job.payload: sleep job payload: ms must be a whole number from 0 to "
                          "3600000 (milliseconds), got -1"),
            std::string::npos)
      << raw.body;
  EXPECT_TRUE(counts("bulk").is_null());  // nothing enqueued

  for (bool api : {true, false}) {
    SCOPED_TRACE(api ? "through the API" : "on storage");
    auto cli = [&](std::vector<std::string> args) { return api ? remote(args) : local(args); };
    const std::string q = api ? "bulk-api" : "bulk-local";
    ASSERT_EQ(cli({"enqueue", q, "noop", "--count", "25", "--delay", "3600"}).exit_code, 0);
    ASSERT_EQ(cli({"enqueue", "keep", "noop", "--delay", "3600"}).exit_code, 0);
    // Refused: no queue, a final state for cancel, no or a non-final state for rm.
    auto r = cli({"jobs", "cancel"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("never on every queue"), std::string::npos) << r.err;
    r = cli({"jobs", "rm", "--state", "cancelled"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("conveyor jobs rm --queue Q --state S"), std::string::npos) << r.err;
    r = cli({"jobs", "cancel", "--queue", q, "--state", "completed"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("--state of jobs cancel must be"), std::string::npos) << r.err;
    r = cli({"jobs", "rm", "--queue", q});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("give --state"), std::string::npos) << r.err;
    r = cli({"jobs", "rm", "--queue", q, "--state", "scheduled"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(counts(q)["scheduled"], 25);  // nothing done
    // Cancel in batches of 10: 25 cancelled, progress with the cursor.
    r = cli({"--json", "jobs", "cancel", "--queue", q, "--batch", "10"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json j = json::parse(r.out);
    EXPECT_EQ(j["cancelled"], 25);
    EXPECT_EQ(j["refused"], 0);
    EXPECT_EQ(j["batches"], 3);
    EXPECT_EQ(counts(q)["cancelled"], 25);
    EXPECT_EQ(counts("keep")["scheduled"].get<int>(), api ? 1 : 2);
    r = cli({"jobs", "rm", "--queue", q, "--state", "failed,cancelled", "--batch", "7"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("deleted 25 failed/cancelled jobs of queue " + q), std::string::npos)
        << r.out;
    EXPECT_NE(r.err.find("(resume with --after "), std::string::npos) << r.err;
    const json left = counts(q);  // a queue with no jobs left may not be listed
    EXPECT_TRUE(left.is_null() || left["cancelled"] == 0) << left;
  }

  // queues rm: a running job refuses it, nothing changed.
  ASSERT_EQ(remote({"enqueue", "gone", "sleep", "--payload", R"({"ms":60000})"}).exit_code, 0);
  ASSERT_EQ(remote({"enqueue", "gone", "noop", "--count", "3", "--delay", "3600"}).exit_code, 0);
  ASSERT_EQ(remote({"ratelimit", "set", "gone", "--rate", "5"}).exit_code, 0);
  ASSERT_EQ(remote({"keys", "weight", "gone", "a", "3"}).exit_code, 0);
  ASSERT_TRUE(test::wait_until([&] { return counts("gone")["running"] == 1; }));
  for (bool api : {true, false}) {
    const std::vector<std::string> args{"queues", "rm", "gone"};
    const auto r = api ? remote(args) : local(args);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("queue gone has 1 running job(s): nothing removed"), std::string::npos)
        << r.err;
  }
  EXPECT_EQ(counts("gone")["scheduled"], 3);
  EXPECT_EQ(counts("gone")["limit"]["source"], "override");
  EXPECT_EQ(counts("gone")["paused"], false);
  ASSERT_EQ(remote({"queues", "pause", "gone"}).exit_code, 0);
  auto r = remote({"--json", "queues", "rm", "gone", "--force"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["deleted"], 4);
  EXPECT_EQ(j["running_cancelled"], 1);
  EXPECT_EQ(j["override_removed"], true);
  EXPECT_EQ(j["key_settings_removed"], 1);
  EXPECT_EQ(j["was_paused"], true);
  EXPECT_EQ(j["configured"], false);
  json gone = counts("gone");
  if (!gone.is_null()) {  // storage still knows the name: empty, unpaused, unlimited
    EXPECT_EQ(gone["scheduled"], 0);
    EXPECT_EQ(gone["running"], 0);
    EXPECT_EQ(gone["paused"], false);
    EXPECT_NE(gone["limit"]["source"], "override");
  }
  r = remote({"--json", "ratelimit", "ls"});
  EXPECT_EQ(json::parse(r.out)["key_settings"].size(), 0u) << r.out;
  // Unknown: exit 1; configured: it stays listed, empty, and says so.
  r = remote({"queues", "rm", "never-seen"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("queue never-seen not found"), std::string::npos) << r.err;
  ASSERT_EQ(remote({"enqueue", "configured", "noop", "--delay", "3600"}).exit_code, 0);
  r = local({"queues", "rm", "configured"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("queue configured removed: 1 job(s) deleted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[queues.configured] is in the config"), std::string::npos) << r.out;
  EXPECT_EQ(counts("configured")["scheduled"], 0);
}

}  // namespace
}  // namespace conveyor
