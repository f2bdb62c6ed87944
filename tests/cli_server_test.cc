// `conveyor --server URL ...` against a running `conveyor serve`: the same
// output and exit codes as when the CLI opens storage itself, the token from
// the environment, and errors that say what went wrong.
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace conveyor {
namespace {

using nlohmann::json;

class CliServer : public ::testing::Test {
 protected:
  // Starts `conveyor serve` with these [server] keys; the CLI in server mode
  // (with client_env) answering is the sign it is up.
  void start(const std::string& server_keys, const std::vector<std::string>& client_env = {}) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      const uint16_t port = test::free_port();
      url_ = "http://127.0.0.1:" + std::to_string(port);
      config_ = test::write_sqlite_config(
          dir_, "[engine]\npoll_interval_ms = 50\n[server]\nlisten = \"127.0.0.1:" +
                    std::to_string(port) + "\"\n" + server_keys);
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
  static void expect_one_line_error(const test::CommandResult& r, int code,
                                    const std::string& part) {
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_EQ(r.err.rfind("conveyor: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << "expected '" << part << "' in: " << r.err;
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
  EXPECT_EQ(r.out, "queue email limited to 50/s (burst 10)\n");
  r = remote({"ratelimit", "set", "sms", "--rate", "2.5"});
  EXPECT_EQ(r.out, "queue sms limited to 2.5/s (burst 3)\n");  // burst ceil(rate), as locally
  r = remote({"--json", "ratelimit", "set", "push", "--rate", "1", "--burst", "1"});
  EXPECT_EQ(json::parse(r.out), json::parse(R"({"queue":"push","rate":1.0,"burst":1})"));
  // Jobs that wait an hour keep the counts still while both modes look.
  r = remote({"enqueue", "email", "noop", "--count", "3", "--delay", "3600"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "enqueued 3 jobs on queue email (ids 1..3)\n");
  r = remote({"enqueue", "later", "sleep", "--payload", R"({"ms": 5})", "--delay", "3600",
              "--priority", "2", "--max-attempts", "4"});
  EXPECT_EQ(r.out, "enqueued job 4 on queue later\n");
  r = remote({"--json", "enqueue", "later", "noop", "--delay", "3600"});
  EXPECT_EQ(json::parse(r.out),
            json::parse(R"({"queue":"later","kind":"noop","count":1,"first_id":5,"last_id":5})"));

  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"queues"}, {"--json", "queues"}, {"ratelimit", "ls"}, {"--json", "ratelimit", "ls"}}) {
    const auto a = remote(args);
    const auto b = local(args);
    EXPECT_EQ(a.exit_code, 0) << a.err;
    EXPECT_EQ(a.out, b.out) << args.back();
    EXPECT_EQ(a.err, b.err) << args.back();
  }
  r = remote({"--json", "queues"});
  json j = json::parse(r.out);
  ASSERT_EQ(j.size(), 4u) << r.out;  // email, later, push, sms
  EXPECT_EQ(j[0]["queue"], "email");
  EXPECT_EQ(j[0]["scheduled"], 3);
  EXPECT_EQ(j[0]["limit"], json::parse(R"({"rate":50.0,"burst":10,"source":"override"})"));

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
  EXPECT_EQ(r.out, "queue q limited to 1/s (burst 1)\n");
}

TEST_F(CliServer, ReadOnlyServerRefusesChanges) {
  start("allow_unauthenticated = true\nread_only = true\n");
  expect_one_line_error(remote({"ratelimit", "set", "q", "--rate", "1"}), 1, "read-only");
  expect_one_line_error(remote({"enqueue", "q", "noop"}), 1, "read-only");
  auto r = remote({"ratelimit", "ls"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "no per-queue overrides\ndefault: none (queues without a limit are unlimited)\n"
            "rate limiting: enabled\n");
}

}  // namespace
}  // namespace conveyor
