// The config file and environment overrides (config.hpp): what is accepted,
// and that every rejection names the file, line and key.
#include <conveyor/config.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace conveyor {
namespace {

using Env = std::map<std::string, std::string>;

// A fake environment, so tests never read or change the real one.
EnvLookup fake_env(Env vars = {}) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

Config parse(std::string_view text, Env env = {}) {
  return parse_config(text, "test.toml", fake_env(std::move(env)));
}

// The ConfigError message for text, or "" when it parses.
std::string config_error(std::string_view text, Env env = {}) {
  try {
    parse(text, std::move(env));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

constexpr const char* kEngineKeys =
    "rate_limit_enabled, rate_limit_scope, rate_limit_rate_per_sec, rate_limit_burst, max_workers, "
    "worker_threads, claim_batch_max, poll_interval_ms, notified_poll_interval_ms, lease_ms, "
    "rescue_interval_ms, max_attempts, retry_backoff_base_ms, retry_backoff_max_ms, max_backoff_s, "
    "backoff_base_ms, "
    "shutdown_timeout_ms, "
    "retention_s, unknown_kind_grace_s, unknown_kind, job_timeout_s";

TEST(Config, ParsesEveryKey) {
  const Config c = parse(R"(
[storage]
plugin = "postgres"
plugin_dir = "/opt/conveyor/plugins"
[storage.options]
dsn = "postgresql://localhost/jobs"

[engine]
rate_limit_enabled = false
rate_limit_rate_per_sec = 2.5
rate_limit_burst = 7
max_workers = 4
worker_threads = 64
claim_batch_max = 50
poll_interval_ms = 250
notified_poll_interval_ms = 30000
lease_ms = 10000
rescue_interval_ms = 2000
max_attempts = 3
retry_backoff_base_ms = 500
retry_backoff_max_ms = 60000
shutdown_timeout_ms = 0
retention_s = 3600

[queues.email]
max_workers = 50
rate_limit = { rate = 10.0, burst = 20 }

[queues."email:send"]
rate_limit = { rate = 3 }

[server]
listen = "0.0.0.0:9090"
admin_token = "s3cret"
allow_unauthenticated = false
read_only = true
max_body_bytes = 2048
)");
  EXPECT_EQ(c.source, "test.toml");
  EXPECT_EQ(c.storage.plugin, "postgres");
  EXPECT_EQ(c.storage.plugin_dir, "/opt/conveyor/plugins");
  ASSERT_EQ(c.storage.options.size(), 1u);
  EXPECT_EQ(c.storage.options[0],
            std::make_pair(std::string("dsn"), std::string("postgresql://localhost/jobs")));
  const EngineConfig& e = c.engine;
  EXPECT_FALSE(e.rate_limit_enabled);
  EXPECT_EQ(e.rate_limit_rate_per_sec, 2.5);
  EXPECT_EQ(e.rate_limit_burst, 7u);
  EXPECT_EQ(e.max_workers, 4u);
  EXPECT_EQ(e.worker_threads, 64u);
  EXPECT_EQ(e.claim_batch_max, 50u);
  EXPECT_EQ(e.poll_interval_ms, 250u);
  EXPECT_EQ(e.notified_poll_interval_ms, 30000u);
  EXPECT_EQ(e.lease_ms, 10000u);
  EXPECT_EQ(e.rescue_interval_ms, 2000u);
  EXPECT_EQ(e.max_attempts, 3u);
  EXPECT_EQ(e.retry_backoff_base_ms, 500u);
  EXPECT_EQ(e.retry_backoff_max_ms, 60000u);
  EXPECT_EQ(e.shutdown_timeout_ms, 0u);
  EXPECT_EQ(e.retention_s, 3600u);
  ASSERT_EQ(c.queues.size(), 2u);
  EXPECT_EQ(c.queues.at("email").max_workers, 50u);
  EXPECT_EQ(c.queues.at("email").rate_limit, (RateLimit{10.0, 20}));
  EXPECT_EQ(c.queues.at("email:send").max_workers, std::nullopt);
  EXPECT_EQ(c.queues.at("email:send").rate_limit, (RateLimit{3.0, 3}));
  EXPECT_EQ(c.server.listen, "0.0.0.0:9090");
  EXPECT_EQ(c.server.admin_token, "s3cret");
  EXPECT_FALSE(c.server.allow_unauthenticated);
  EXPECT_TRUE(c.server.read_only);
  EXPECT_EQ(c.server.max_body_bytes, 2048u);
}

TEST(Config, DefaultsWhenSectionsAreAbsent) {
  const Config c = parse("");
  const Config d;  // the struct defaults are the documented defaults
  EXPECT_EQ(c.source, "test.toml");
  EXPECT_EQ(d.source, "<defaults>");
  EXPECT_EQ(c.storage.plugin, "sqlite");
  EXPECT_EQ(c.storage.plugin_dir, "");
  EXPECT_TRUE(c.storage.options.empty());
  EXPECT_TRUE(c.engine.rate_limit_enabled);
  EXPECT_EQ(c.engine.rate_limit_rate_per_sec, 0);
  EXPECT_EQ(c.engine.rate_limit_burst, 0u);
  EXPECT_EQ(c.engine.max_workers, d.engine.max_workers);
  EXPECT_EQ(c.engine.claim_batch_max, d.engine.claim_batch_max);
  EXPECT_EQ(c.engine.retry_backoff_max_ms, d.engine.retry_backoff_max_ms);
  EXPECT_TRUE(c.queues.empty());
  EXPECT_EQ(c.server.listen, "");
  EXPECT_EQ(c.server.admin_token, "");
  EXPECT_FALSE(c.server.allow_unauthenticated);
  EXPECT_FALSE(c.server.read_only);
  EXPECT_EQ(c.server.max_body_bytes, 1048576u);
  EXPECT_EQ(c.engine.default_limit(), std::nullopt);
}

TEST(Config, EmptySectionsKeepDefaults) {
  const Config c = parse("[storage]\n[engine]\n[queues]\n[server]\n");
  EXPECT_EQ(c.storage.plugin, "sqlite");
  EXPECT_EQ(c.engine.max_workers, 10u);
  EXPECT_TRUE(c.queues.empty());
  EXPECT_EQ(c.server.listen, "");
}

TEST(Config, TheShippedDefaultConfigParses) {
  const auto path = std::filesystem::path(CONVEYOR_TEST_SOURCE_DIR) / "config" / "conveyor.toml";
  const Config c = load_config_file(path, fake_env());
  EXPECT_EQ(c.source, path.string());
  EXPECT_EQ(c.storage.plugin, "sqlite");
  ASSERT_EQ(c.storage.options.size(), 1u);
  EXPECT_EQ(c.storage.options[0].first, "path");
  EXPECT_EQ(c.storage.options[0].second, "data/conveyor.db");
  EXPECT_TRUE(c.engine.rate_limit_enabled);
  EXPECT_EQ(c.engine.rate_limit_rate_per_sec, 0);
  EXPECT_EQ(c.engine.rate_limit_burst, 0u);
  EXPECT_TRUE(c.queues.empty());
  EXPECT_EQ(c.server.listen, "127.0.0.1:8080");
  EXPECT_TRUE(c.server.allow_unauthenticated);
  EXPECT_TRUE(c.server.unauthenticated_loopback_only);  // never open beyond loopback
  EXPECT_EQ(c.server.admin_token, "");
}

TEST(Config, AllowUnauthenticatedTakesABooleanOrLoopback) {
  Config c = parse("[server]\nallow_unauthenticated = \"loopback\"\n");
  EXPECT_TRUE(c.server.allow_unauthenticated);
  EXPECT_TRUE(c.server.unauthenticated_loopback_only);
  c = parse("[server]\nallow_unauthenticated = true\n");
  EXPECT_TRUE(c.server.allow_unauthenticated);
  EXPECT_FALSE(c.server.unauthenticated_loopback_only);
  EXPECT_THROW(
      {
        try {
          parse("[server]\nallow_unauthenticated = \"yes\"\n");
        } catch (const ConfigError& e) {
          EXPECT_STREQ(e.what(),
                       "test.toml:2: server.allow_unauthenticated: must be true, false or "
                       "\"loopback\", got \"yes\"");
          throw;
        }
      },
      ConfigError);
}

// HTTP strips the spaces around a header value and cannot carry a newline
// or another control character in one: such a token would lock everyone out
// (or split requests), so it is refused where it is configured, saying where
// the bad byte is and never echoing the secret.
TEST(Config, ATokenWithWhitespaceOrControlCharactersIsRefused) {
  const std::string rule =
      " (HTTP cannot carry it in the Authorization header, so no client could send this "
      "token): use printable ASCII without spaces, e.g. the output of openssl rand -hex 32";
  const std::pair<const char*, std::string> cases[] = {
      {" padded ", "a space at byte 0 of 8"},
      {"padded ", "a space at byte 6 of 7"},
      {"\\tpadded", "a tab at byte 0 of 7"},
      {"in side", "a space at byte 2 of 7"},
      {"s3cret\\nX-Injected: 1", "a newline at byte 6 of 20"},
      {"s3cret\\r", "a carriage return at byte 6 of 7"},
      {"s3\\u0001cret", "a control character at byte 2 of 7"},
      {"s3\\u007fcret", "a control character at byte 2 of 7"},
  };
  for (const auto& [token, where] : cases) {
    for (const char* key : {"admin_token", "worker_token"}) {
      const std::string message =
          config_error(std::string("[server]\n") + key + " = \"" + token + "\"\n");
      EXPECT_EQ(message, std::string("test.toml:2: server.") + key +
                             ": must not contain whitespace or control characters, but has " +
                             where + rule)
          << token;
      EXPECT_EQ(message.find("cret"), std::string::npos) << "the secret is echoed: " << message;
    }
  }
  for (const char* var : {"CONVEYOR_ADMIN_TOKEN", "CONVEYOR_WORKER_TOKEN"}) {
    const std::string message = config_error("", {{var, "s3cret\nmore"}});
    EXPECT_EQ(message, std::string("environment variable ") + var +
                           ": must not contain whitespace or control characters, but has a "
                           "newline at byte 6 of 11" +
                           rule);
    EXPECT_EQ(message.find("cret"), std::string::npos) << message;
  }
  EXPECT_EQ(parse("[server]\nadmin_token = \"a-Z_0.9~+/=!\"\n").server.admin_token, "a-Z_0.9~+/=!");
}

// A worker token equal to the admin token would give every remote worker
// the whole API: refused, naming where each came from, not the token.
TEST(Config, AWorkerTokenEqualToTheAdminTokenIsRefused) {
  const std::string rule =
      "), so every remote worker could call the whole API: give the workers a token of their "
      "own (e.g. openssl rand -hex 32)";
  EXPECT_EQ(config_error("[server]\nadmin_token = \"same-s3cret\"\n"
                         "worker_token = \"same-s3cret\"\n"),
            "test.toml: server.worker_token: the worker token is the same as the admin token "
            "(test.toml: server.admin_token" +
                rule);
  EXPECT_EQ(config_error("[server]\nadmin_token = \"same-s3cret\"\n",
                         {{"CONVEYOR_WORKER_TOKEN", "same-s3cret"}}),
            "environment variable CONVEYOR_WORKER_TOKEN: the worker token is the same as the "
            "admin token (test.toml: server.admin_token" +
                rule);
  EXPECT_EQ(config_error("[server]\nworker_token = \"same-s3cret\"\n",
                         {{"CONVEYOR_ADMIN_TOKEN", "same-s3cret"}}),
            "test.toml: server.worker_token: the worker token is the same as the admin token "
            "(environment variable CONVEYOR_ADMIN_TOKEN" +
                rule);
  // The environment replaces the file's token: only the tokens in force count.
  const Config c = parse("[server]\nadmin_token = \"a-s3cret\"\nworker_token = \"w-s3cret\"\n",
                         {{"CONVEYOR_WORKER_TOKEN", "w2-s3cret"}});
  EXPECT_EQ(c.server.worker_token, "w2-s3cret");
  EXPECT_NO_THROW(
      parse("[server]\nadmin_token = \"a-s3cret\"\n",
            {{"CONVEYOR_ADMIN_TOKEN", "b-s3cret"}, {"CONVEYOR_WORKER_TOKEN", "a-s3cret"}}));
}

TEST(Config, ContractExampleParses) {
  const Config c = parse(R"(
[storage]
plugin = "sqlite"
[storage.options]
path = "data/conveyor.db"

[engine]
rate_limit_enabled = true
rate_limit_rate_per_sec = 0
rate_limit_burst = 0

[queues.email]
max_workers = 50
rate_limit = { rate = 10.0, burst = 0 }

[server]
listen = "127.0.0.1:8080"
)");
  EXPECT_EQ(c.queues.at("email").rate_limit, (RateLimit{10.0, 10}));
  EXPECT_EQ(c.max_workers_for("email"), 50u);
  EXPECT_EQ(c.max_workers_for("other"), 10u);
}

// ---- unknown keys -----------------------------------------------------------

TEST(ConfigUnknownKey, AtTheTopLevel) {
  EXPECT_EQ(config_error("[engnie]\n"),
            "test.toml:1: engnie: unknown key (known keys at the top level: storage, engine, "
            "queues, server, log, http); did you mean engine?");
  EXPECT_EQ(config_error("\nverbose = true\n"),
            "test.toml:2: verbose: unknown key (known keys at the top level: storage, engine, "
            "queues, server, log, http)");
}

TEST(ConfigUnknownKey, InEngine) {
  EXPECT_EQ(config_error("[engine]\nrate_limit_burst = 1\nrate_limt_enabled = true\n"),
            std::string("test.toml:3: engine.rate_limt_enabled: unknown key (known keys in "
                        "[engine]: ") +
                kEngineKeys + "); did you mean rate_limit_enabled?");
}

TEST(ConfigUnknownKey, InStorage) {
  EXPECT_EQ(config_error("[storage]\nplugins = \"sqlite\"\n"),
            "test.toml:2: storage.plugins: unknown key (known keys in [storage]: plugin, "
            "plugin_dir, options); did you mean plugin?");
}

TEST(ConfigUnknownKey, InAQueue) {
  EXPECT_EQ(config_error("[queues.email]\nmax_worker = 5\n"),
            "test.toml:2: queues.email.max_worker: unknown key (known keys in [queues.email]: "
            "max_workers, rate_limit, http, key_from, key_rate_limit, key_max_workers, fairness, "
            "job_timeout_s); did "
            "you mean max_workers?");
}

TEST(Config, QueueKeySettings) {
  const Config c = parse(
      "[queues.tenants]\nkey_from = \"/tenant/id\"\n"
      "key_rate_limit = { rate = 2, burst = 1 }\nkey_max_workers = 3\n"
      "[queues.plain]\nfairness = \"fifo\"\n");
  const QueueConfig& t = c.queues.at("tenants");
  EXPECT_EQ(t.key_from, "/tenant/id");
  ASSERT_TRUE(t.key_rate_limit.has_value());
  EXPECT_EQ(t.key_rate_limit->rate_per_sec, 2.0);
  EXPECT_EQ(t.key_rate_limit->burst, 1u);
  EXPECT_EQ(t.key_max_workers, 3u);
  EXPECT_EQ(t.fairness, Fairness::kFair);  // the default
  EXPECT_TRUE(t.uses_keys());
  EXPECT_EQ(c.queues.at("plain").fairness, Fairness::kFifo);
  EXPECT_FALSE(c.queues.at("plain").uses_keys());
}

TEST(Config, HttpHoldIsKeyOrQueue) {
  EXPECT_EQ(parse("[queues.q.http]\nurl = \"https://x.example/\"\n").queues.at("q").http->hold,
            HttpTargetConfig::Hold::kKey);
  EXPECT_EQ(parse("[queues.q.http]\nurl = \"https://x.example/\"\nhold = \"queue\"\n")
                .queues.at("q")
                .http->hold,
            HttpTargetConfig::Hold::kQueue);
  EXPECT_NE(config_error("[queues.q.http]\nurl = \"https://x.example/\"\nhold = \"tenant\"\n")
                .find("must be \"key\""),
            std::string::npos);
}

TEST(Config, BadQueueKeySettingsSayWhatToWrite) {
  EXPECT_NE(config_error("[queues.q]\nkey_from = \"tenant\"\n").find("starting with '/'"),
            std::string::npos);
  EXPECT_NE(config_error("[queues.q]\nkey_from = \"/a~2\"\n").find("not a valid JSON pointer"),
            std::string::npos);
  EXPECT_NE(config_error("[queues.q]\nfairness = \"roundrobin\"\n").find("\"fair\""),
            std::string::npos);
  EXPECT_NE(config_error("[queues.q]\nfairness = \"fifo\"\nkey_max_workers = 2\n")
                .find("cannot hold key_rate_limit or key_max_workers"),
            std::string::npos);
  EXPECT_NE(config_error("[queues.q]\nkey_rate_limit = { burst = 2 }\n")
                .find("write key_rate_limit = { rate"),
            std::string::npos);
  EXPECT_NE(config_error("[queues.q]\nkey_max_workers = 0\n"), "");
}

TEST(ConfigUnknownKey, InAQueueRateLimit) {
  EXPECT_EQ(config_error("[queues.\"a:b\"]\nrate_limit = { rate = 1, brust = 2 }\n"),
            "test.toml:2: queues.\"a:b\".rate_limit.brust: unknown key (known keys in "
            "[queues.\"a:b\".rate_limit]: rate, burst, scope); did you mean burst?");
}

TEST(ConfigUnknownKey, InServer) {
  EXPECT_EQ(config_error("[server]\nlisten = \"127.0.0.1:1\"\nport = 8080\n"),
            "test.toml:3: server.port: unknown key (known keys in [server]: listen, admin_token, "
            "worker_token, worker_tokens, allow_unauthenticated, read_only, max_body_bytes, "
            "metrics_max_queues)");
}

TEST(ConfigUnknownKey, FirstInFileOrderIsReported) {
  // toml++ keeps keys sorted; the message must follow the file instead.
  EXPECT_EQ(config_error("[engine]\nzzz = 1\naaa = 2\n").substr(0, 27),
            "test.toml:2: engine.zzz: un");
}

// ---- wrong types ------------------------------------------------------------

TEST(ConfigWrongType, Booleans) {
  EXPECT_EQ(config_error("[engine]\nrate_limit_enabled = \"yes\"\n"),
            "test.toml:2: engine.rate_limit_enabled: must be true or false, got \"yes\"");
  EXPECT_EQ(config_error("[server]\nread_only = 1\n"),
            "test.toml:2: server.read_only: must be true or false, got 1");
}

TEST(ConfigWrongType, FloatWhereIntegerExpected) {
  EXPECT_EQ(config_error("[engine]\nmax_workers = 2.0\n"),
            "test.toml:2: engine.max_workers: must be an integer >= 1, got 2.0");
  EXPECT_EQ(config_error("[queues.q]\nrate_limit = { rate = 1, burst = 2.5 }\n"),
            "test.toml:2: queues.q.rate_limit.burst: must be an integer >= 0, got 2.5");
}

TEST(ConfigWrongType, IntegerWhereFloatExpectedIsFine) {
  EXPECT_EQ(parse("[engine]\nrate_limit_rate_per_sec = 5\n").engine.rate_limit_rate_per_sec, 5.0);
}

TEST(ConfigWrongType, StringsNumbersAndTables) {
  EXPECT_EQ(config_error("[engine]\nrate_limit_rate_per_sec = \"10\"\n"),
            "test.toml:2: engine.rate_limit_rate_per_sec: must be a number >= 0, got \"10\"");
  EXPECT_EQ(config_error("[storage]\nplugin = 5\n"),
            "test.toml:2: storage.plugin: must be a non-empty string, got 5");
  EXPECT_EQ(config_error("[server]\nlisten = 8080\n"),
            "test.toml:2: server.listen: must be a string, got 8080");
  EXPECT_EQ(config_error("engine = 5\n"),
            "test.toml:1: engine: must be a table ([engine] or { ... }), got 5");
  EXPECT_EQ(config_error("[queues]\nemail = [1]\n"),
            "test.toml:2: queues.email: must be a table ([queues.email] or { ... }), got an "
            "array");
  EXPECT_EQ(config_error("[queues.email]\nrate_limit = 10\n"),
            "test.toml:2: queues.email.rate_limit: must be a table ([queues.email.rate_limit] or "
            "{ ... }), got 10");
  EXPECT_EQ(config_error("[engine]\nmax_workers = 1979-05-27\n"),
            "test.toml:2: engine.max_workers: must be an integer >= 1, got a date/time");
}

TEST(ConfigWrongType, EmptyStringsWhereANameIsNeeded) {
  EXPECT_EQ(config_error("[storage]\nplugin = \"\"\n"),
            "test.toml:2: storage.plugin: must be a non-empty string, got \"\"");
  EXPECT_EQ(config_error("[server]\nadmin_token = \"\"\n"),
            "test.toml:2: server.admin_token: must be a non-empty string, got \"\"");
}

// ---- out of range -----------------------------------------------------------

TEST(ConfigRange, GlobalRate) {
  EXPECT_EQ(config_error("[engine]\nrate_limit_rate_per_sec = -1\n"),
            "test.toml:2: engine.rate_limit_rate_per_sec: must be a number >= 0, got -1");
  EXPECT_EQ(config_error("[engine]\nrate_limit_rate_per_sec = nan\n"),
            "test.toml:2: engine.rate_limit_rate_per_sec: must be a finite number >= 0, got nan");
  EXPECT_EQ(config_error("[engine]\nrate_limit_rate_per_sec = inf\n"),
            "test.toml:2: engine.rate_limit_rate_per_sec: must be a finite number >= 0, got inf");
}

// Rates in the file agree with the environment, the CLI and the API: from
// 0.001/s (1e-320 used to be taken, and stalled the queue after one job) to
// 1e9/s, written in decimal (0x10 used to be taken as 16).
TEST(ConfigRange, RatesShareTheMinimumAndDecimalSyntax) {
  const std::string low =
      "must be at least 0.001 (jobs per second: one job every 1000 s; to stop a queue, pause it";
  EXPECT_EQ(config_error("[engine]\nrate_limit_rate_per_sec = 1e-320\n"),
            "test.toml:2: engine.rate_limit_rate_per_sec: " + low +
                ", or write 0 for no limit), got 1e-320");
  EXPECT_EQ(config_error("[queues.q]\nrate_limit = { rate = 0.0009 }\n"),
            "test.toml:2: queues.q.rate_limit.rate: " + low + "), got 9e-04");
  EXPECT_EQ(config_error("[queues.q]\nkey_rate_limit = { rate = 1e-10 }\n"),
            "test.toml:2: queues.q.key_rate_limit.rate: " + low + "), got 1e-10");
  for (const char* hex : {"0x10", "0o20", "0b10000"}) {
    EXPECT_EQ(config_error(std::string("[engine]\nrate_limit_rate_per_sec = ") + hex + "\n"),
              "test.toml:2: engine.rate_limit_rate_per_sec: must be written in decimal (e.g. 16 "
              "or 2.5), not in hexadecimal, octal or binary")
        << hex;
    EXPECT_EQ(config_error(std::string("[queues.q]\nrate_limit = { rate = ") + hex + " }\n"),
              "test.toml:2: queues.q.rate_limit.rate: must be written in decimal (e.g. 16 or "
              "2.5), not in hexadecimal, octal or binary")
        << hex;
  }
  EXPECT_EQ(parse("[engine]\nrate_limit_rate_per_sec = 0.001\n").engine.rate_limit_rate_per_sec,
            0.001);
  EXPECT_EQ(parse("[engine]\nrate_limit_rate_per_sec = 16\n").engine.rate_limit_rate_per_sec, 16);
  EXPECT_EQ(parse("[engine]\nrate_limit_rate_per_sec = 0\n").engine.default_limit(), std::nullopt);
  EXPECT_EQ(parse("[queues.q]\nrate_limit = { rate = 0.001 }\n").queues.at("q").rate_limit,
            (RateLimit{0.001, 1}));
}

TEST(ConfigRange, IntegerBounds) {
  const std::pair<const char*, const char*> cases[] = {
      {"rate_limit_burst = -1", "engine.rate_limit_burst: must be an integer >= 0, got -1"},
      {"rate_limit_burst = 4294967296",
       "engine.rate_limit_burst: must be an integer from 0 to 4294967295, got 4294967296"},
      {"lease_ms = 5000000000",
       "engine.lease_ms: must be an integer from 100 to 4294967295, got 5000000000"},
      {"max_workers = 0", "engine.max_workers: must be an integer >= 1, got 0"},
      {"worker_threads = 0", "engine.worker_threads: must be an integer >= 1, got 0"},
      {"claim_batch_max = 0", "engine.claim_batch_max: must be an integer from 1 to 10000, got 0"},
      {"claim_batch_max = 10001",
       "engine.claim_batch_max: must be an integer from 1 to 10000, got 10001"},
      {"poll_interval_ms = 0", "engine.poll_interval_ms: must be an integer >= 1, got 0"},
      {"notified_poll_interval_ms = 0",
       "engine.notified_poll_interval_ms: must be an integer >= 1, got 0"},
      {"lease_ms = 99", "engine.lease_ms: must be an integer >= 100, got 99"},
      {"rescue_interval_ms = 0", "engine.rescue_interval_ms: must be an integer >= 1, got 0"},
      {"max_attempts = 0", "engine.max_attempts: must be an integer >= 1, got 0"},
      {"retry_backoff_base_ms = 0", "engine.retry_backoff_base_ms: must be an integer >= 1, got 0"},
      {"shutdown_timeout_ms = -5", "engine.shutdown_timeout_ms: must be an integer >= 0, got -5"},
      {"retention_s = 5000000000",
       "engine.retention_s: must be an integer from 0 to 4294967295, got 5000000000"},
  };
  for (const auto& [line, message] : cases) {
    EXPECT_EQ(config_error(std::string("[engine]\n") + line + "\n"),
              std::string("test.toml:2: ") + message);
  }
  EXPECT_EQ(parse("[engine]\nrate_limit_burst = 4294967295\n").engine.rate_limit_burst,
            4294967295u);
}

TEST(ConfigEngine, UnknownKindPolicyAndGrace) {
  Config c = parse("");
  EXPECT_EQ(c.engine.unknown_kind, EngineConfig::UnknownKind::kFail);
  EXPECT_EQ(c.engine.unknown_kind_grace_s, 60u);
  c = parse("[engine]\nunknown_kind = \"retry\"\nunknown_kind_grace_s = 0\n");
  EXPECT_EQ(c.engine.unknown_kind, EngineConfig::UnknownKind::kRetry);
  EXPECT_EQ(c.engine.unknown_kind_grace_s, 0u);
  EXPECT_EQ(parse("[engine]\nunknown_kind = \"fail\"\n").engine.unknown_kind,
            EngineConfig::UnknownKind::kFail);
  EXPECT_EQ(config_error("[engine]\nunknown_kind = \"ignore\"\n"),
            "test.toml:2: engine.unknown_kind: must be \"fail\" or \"retry\", got \"ignore\"");
  EXPECT_EQ(config_error("[engine]\nunknown_kind = 1\n"),
            "test.toml:2: engine.unknown_kind: must be a non-empty string, got 1");
  EXPECT_EQ(config_error("[engine]\nunknown_kind_grace_s = -1\n"),
            "test.toml:2: engine.unknown_kind_grace_s: must be an integer >= 0, got -1");
}

TEST(ConfigRange, BackoffBaseMustNotExceedTheCap) {
  EXPECT_EQ(config_error("[engine]\nretry_backoff_base_ms = 5000\nretry_backoff_max_ms = 4000\n"),
            "test.toml:2: engine.retry_backoff_base_ms: must be <= engine.retry_backoff_max_ms "
            "(4000), got 5000");
  EXPECT_EQ(config_error("[engine]\n\nretry_backoff_max_ms = 500\n"),
            "test.toml:3: engine.retry_backoff_max_ms: must be >= engine.retry_backoff_base_ms "
            "(1000), got 500");
}

TEST(ConfigRange, QueueSettings) {
  EXPECT_EQ(config_error("[queues.q]\nmax_workers = 0\n"),
            "test.toml:2: queues.q.max_workers: must be an integer >= 1, got 0");
  EXPECT_EQ(config_error("[queues.q]\nrate_limit = { rate = 0 }\n"),
            "test.toml:2: queues.q.rate_limit.rate: must be a number > 0, got 0");
  EXPECT_EQ(config_error("[queues.q]\nrate_limit = { rate = -2.5 }\n"),
            "test.toml:2: queues.q.rate_limit.rate: must be a number > 0, got -2.5");
  EXPECT_EQ(config_error("[queues.q]\nrate_limit = { rate = nan }\n"),
            "test.toml:2: queues.q.rate_limit.rate: must be a finite number > 0, got nan");
  EXPECT_EQ(config_error("[queues.q]\nrate_limit = { burst = 2 }\n"),
            "test.toml:2: queues.q.rate_limit: missing rate (write rate_limit = { rate = 10.0, "
            "burst = 0, scope = \"process\" }; burst 0 = ceil(rate))");
  EXPECT_EQ(config_error("[queues.q]\nrate_limit = { rate = 5, scope = \"fleets\" }\n"),
            "test.toml:2: queues.q.rate_limit.scope: must be \"process\" (a bucket per process) "
            "or \"fleet\" (one bucket for every process on the storage), got \"fleets\"");
}

TEST(ConfigRateLimitScope, QueueAndDefaultLimitsCarryTheirScope) {
  const Config c = parse(
      "[engine]\nrate_limit_rate_per_sec = 20\nrate_limit_scope = \"fleet\"\n"
      "[queues.email]\nrate_limit = { rate = 50, burst = 10, scope = \"fleet\" }\n"
      "[queues.sms]\nrate_limit = { rate = 5 }\n");
  EXPECT_EQ(c.queues.at("email").rate_limit, (RateLimit{50, 10, LimitScope::kFleet}));
  EXPECT_EQ(c.queues.at("sms").rate_limit, (RateLimit{5, 5, LimitScope::kProcess}));
  EXPECT_EQ(c.engine.default_limit(), (RateLimit{20, 20, LimitScope::kFleet}));
}

TEST(ConfigRange, ServerSettings) {
  EXPECT_EQ(config_error("[server]\nmax_body_bytes = 1023\n"),
            "test.toml:2: server.max_body_bytes: must be an integer >= 1024, got 1023");
  EXPECT_EQ(parse("[server]\nmax_body_bytes = 1024\n").server.max_body_bytes, 1024u);
}

TEST(ConfigRange, ListenMustBeHostPort) {
  for (const char* bad : {"8080", ":8080", "localhost", "localhost:", "localhost:0",
                          "localhost:65536", "localhost:80a", "local host:80", "::1:80", ""}) {
    EXPECT_EQ(config_error(std::string("[server]\nlisten = \"") + bad + "\"\n"),
              std::string("test.toml:2: server.listen: must be \"host:port\" with a port from 1 "
                          "to 65535 (e.g. \"127.0.0.1:8080\"), got \"") +
                  bad + "\"")
        << bad;
  }
}

// ---- queues -----------------------------------------------------------------

TEST(ConfigQueues, BurstZeroOrAbsentMeansCeilRate) {
  const Config c = parse(R"(
[queues.a]
rate_limit = { rate = 10.2, burst = 0 }
[queues.b]
rate_limit = { rate = 0.5 }
[queues.c.rate_limit]
rate = 7
burst = 2
)");
  EXPECT_EQ(c.queues.at("a").rate_limit, (RateLimit{10.2, 11}));
  EXPECT_EQ(c.queues.at("b").rate_limit, (RateLimit{0.5, 1}));
  EXPECT_EQ(c.queues.at("c").rate_limit, (RateLimit{7, 2}));
}

TEST(ConfigQueues, NamesAreValidated) {
  EXPECT_EQ(config_error("\n[queues.\"x'); DROP TABLE jobs;--\"]\nmax_workers = 1\n"),
            "test.toml:2: queues.\"x'); DROP TABLE jobs;--\": invalid queue name \"x'); DROP "
            "TABLE jobs;--\": use 1-128 characters from A-Z a-z 0-9 . _ : - starting with a "
            "letter or digit");
  EXPECT_NE(config_error("[queues.\"-lead\"]\n"), "");
  EXPECT_NE(config_error("[queues.\"has space\"]\n"), "");
  EXPECT_NE(config_error("[queues.\"\xc3\xa9\"]\n"), "");
  EXPECT_EQ(parse("[queues.\"email.send\"]\n[queues.\"a:b-c_d\"]\n").queues.size(), 2u);
}

TEST(ConfigQueues, LongNamesAreCutInTheKey) {
  const std::string name(129, 'q');
  const std::string message = config_error("[queues." + name + "]\n");
  const std::string expected_start =
      "test.toml:1: queues.\"" + std::string(64, 'q') + "\"...: invalid queue name";
  EXPECT_EQ(message.rfind(expected_start, 0), 0u) << message;
  EXPECT_EQ(parse("[queues." + std::string(128, 'q') + "]\n").queues.size(), 1u);
}

TEST(ConfigQueues, MaxWorkersFor) {
  const Config c = parse("[engine]\nmax_workers = 3\n[queues.a]\nmax_workers = 8\n[queues.b]\n");
  EXPECT_EQ(c.max_workers_for("a"), 8u);
  EXPECT_EQ(c.max_workers_for("b"), 3u);
  EXPECT_EQ(c.max_workers_for("unknown"), 3u);
}

// ---- storage options --------------------------------------------------------

TEST(ConfigStorage, OptionsBecomeTextInFileOrder) {
  const Config c = parse(R"([storage.options]
zeta = 1
alpha = "x y"
flag = true
off = false
ratio = 2.5
whole = 3.0
negative = -42
)");
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"zeta", "1"},    {"alpha", "x y"}, {"flag", "true"},   {"off", "false"},
      {"ratio", "2.5"}, {"whole", "3.0"}, {"negative", "-42"}};
  EXPECT_EQ(c.storage.options, expected);
}

TEST(ConfigStorage, NestedOptionsAreErrors) {
  EXPECT_EQ(config_error("[storage.options]\npath = \"x\"\npool = { size = 4 }\n"),
            "test.toml:3: storage.options.pool: must be a string, integer, float or boolean (no "
            "nested tables or arrays), got a table");
  EXPECT_EQ(config_error("[storage.options]\nhosts = [\"a\", \"b\"]\n"),
            "test.toml:2: storage.options.hosts: must be a string, integer, float or boolean (no "
            "nested tables or arrays), got an array");
  EXPECT_EQ(config_error("[storage]\noptions = \"path=x\"\n"),
            "test.toml:2: storage.options: must be a table ([storage.options] or { ... }), got "
            "\"path=x\"");
}

// ---- lines and syntax -------------------------------------------------------

TEST(ConfigLines, ErrorOnLineSevenSaysSeven) {
  const std::string text =
      "# comment\n"
      "[storage]\n"
      "plugin = \"sqlite\"\n"
      "\n"
      "[engine]\n"
      "rate_limit_enabled = true\n"
      "rate_limit_rate_per_sec = -1\n";
  try {
    parse_config(text, "config/conveyor.toml", fake_env());
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "config/conveyor.toml:7: engine.rate_limit_rate_per_sec: must be a number >= 0, "
                 "got -1");
  }
}

TEST(ConfigLines, InlineTableValuesAndLaterSections) {
  const std::string text =
      "[engine]\n"
      "max_workers = 2\n"
      "[queues.a]\n"
      "max_workers = 1\n"
      "[queues.b]\n"
      "rate_limit = { rate = 1 }\n"
      "\n"
      "[server]\n"
      "listen = \"nope\"\n";
  EXPECT_EQ(config_error(text).substr(0, 27), "test.toml:9: server.listen:");
}

TEST(ConfigSyntax, ReportsLineColumnAndDescription) {
  const std::string message = config_error("[engine]\nmax_workers = = 3\n");
  EXPECT_EQ(message.rfind("test.toml:2:", 0), 0u) << message;
  EXPECT_NE(message.find("invalid TOML: "), std::string::npos) << message;
}

TEST(ConfigSyntax, MessageIsOneLine) {
  // toml++ quotes the bad text including its newline; errors print as one line.
  const std::string message = config_error("[engine]\nrate_limit_enabled = tru\n");
  EXPECT_EQ(message.rfind("test.toml:2:", 0), 0u) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(ConfigSyntax, DuplicateKeysAreSyntaxErrors) {
  const std::string message = config_error("[engine]\nmax_workers = 1\nmax_workers = 2\n");
  EXPECT_EQ(message.rfind("test.toml:3:", 0), 0u) << message;
}

// ---- environment ------------------------------------------------------------

TEST(ConfigEnv, OverridesTheFile) {
  const Config c = parse(
      "[engine]\nrate_limit_enabled = true\nrate_limit_rate_per_sec = 1\n"
      "[server]\nlisten = \"127.0.0.1:8080\"\nadmin_token = \"from-file\"\n",
      {{"CONVEYOR_RATE_LIMIT_ENABLED", "no"},
       {"CONVEYOR_RATE_LIMIT_RATE_PER_SEC", "12.5"},
       {"CONVEYOR_RATE_LIMIT_BURST", "30"},
       {"CONVEYOR_STORAGE_PLUGIN", "/opt/libconveyor-pg.so"},
       {"CONVEYOR_SERVER_LISTEN", "[::1]:9000"},
       {"CONVEYOR_ADMIN_TOKEN", "from-env"}});
  EXPECT_FALSE(c.engine.rate_limit_enabled);
  EXPECT_EQ(c.engine.rate_limit_rate_per_sec, 12.5);
  EXPECT_EQ(c.engine.rate_limit_burst, 30u);
  EXPECT_EQ(c.storage.plugin, "/opt/libconveyor-pg.so");
  EXPECT_EQ(c.server.listen, "[::1]:9000");
  EXPECT_EQ(c.server.admin_token, "from-env");
  EXPECT_EQ(c.engine.default_limit(), (RateLimit{12.5, 30}));
}

TEST(ConfigEnv, BooleanSpellings) {
  for (const char* yes : {"true", "1", "yes", "TRUE", "Yes"}) {
    const Config c =
        parse("[engine]\nrate_limit_enabled = false\n", {{"CONVEYOR_RATE_LIMIT_ENABLED", yes}});
    EXPECT_TRUE(c.engine.rate_limit_enabled) << yes;
  }
  for (const char* no : {"false", "0", "no", "False"}) {
    EXPECT_FALSE(parse("", {{"CONVEYOR_RATE_LIMIT_ENABLED", no}}).engine.rate_limit_enabled) << no;
  }
}

TEST(ConfigEnv, EmptyValuesCountAsUnset) {
  const Config c = parse("[server]\nlisten = \"127.0.0.1:8080\"\n",
                         {{"CONVEYOR_SERVER_LISTEN", ""}, {"CONVEYOR_RATE_LIMIT_BURST", ""}});
  EXPECT_EQ(c.server.listen, "127.0.0.1:8080");
  EXPECT_EQ(c.engine.rate_limit_burst, 0u);
}

TEST(ConfigEnv, InvalidValuesNameTheVariable) {
  EXPECT_EQ(config_error("", {{"CONVEYOR_RATE_LIMIT_ENABLED", "maybe"}}),
            "environment variable CONVEYOR_RATE_LIMIT_ENABLED: must be true, false, 1, 0, yes or "
            "no, got \"maybe\"");
  for (const char* bad : {"-1", "abc", "nan", "inf", "1.5x", " 2", "0x10", "+5", "1e", "."}) {
    EXPECT_EQ(config_error("", {{"CONVEYOR_RATE_LIMIT_RATE_PER_SEC", bad}}),
              std::string("environment variable CONVEYOR_RATE_LIMIT_RATE_PER_SEC: must be a "
                          "plain decimal number of jobs per second from 0.001 to 1000000000 "
                          "(digits with an optional fraction and exponent, e.g. 50, 2.5 or 1e3; "
                          "no sign, hexadecimal, inf or nan), or 0 for no default limit, got \"") +
                  bad + "\"")
        << bad;
  }
  for (const char* bad : {"-1", "1.5", "4294967296", "ten"}) {
    EXPECT_EQ(config_error("", {{"CONVEYOR_RATE_LIMIT_BURST", bad}}),
              std::string("environment variable CONVEYOR_RATE_LIMIT_BURST: must be a whole "
                          "number from 0 to 4294967295, got \"") +
                  bad + "\"")
        << bad;
  }
  EXPECT_EQ(config_error("", {{"CONVEYOR_SERVER_LISTEN", "8080"}}),
            "environment variable CONVEYOR_SERVER_LISTEN: must be \"host:port\" with a port from "
            "1 to 65535 (e.g. \"127.0.0.1:8080\"), got \"8080\"");
}

// The same rates as the file, the CLI and the API: at least 0.001/s (a
// subnormal rate stalled the queue after one job), at most 1e9/s.
TEST(ConfigEnv, RatesOutOfRangeAreRefused) {
  const std::string var = "environment variable CONVEYOR_RATE_LIMIT_RATE_PER_SEC: ";
  EXPECT_EQ(config_error("", {{"CONVEYOR_RATE_LIMIT_RATE_PER_SEC", "1e-320"}}),
            var +
                "rate must be at least 0.001 jobs per second (one job every 1000 s; to stop a "
                "queue, pause it), got 1e-320 (or 0 for no default limit)");
  EXPECT_EQ(config_error("", {{"CONVEYOR_RATE_LIMIT_RATE_PER_SEC", "0.0009"}}),
            var +
                "rate must be at least 0.001 jobs per second (one job every 1000 s; to stop a "
                "queue, pause it), got 9e-04 (or 0 for no default limit)");
  EXPECT_EQ(config_error("", {{"CONVEYOR_RATE_LIMIT_RATE_PER_SEC", "1e999"}}),
            var +
                "rate must be a finite number greater than 0, got inf (or 0 for no default "
                "limit)");
  for (const auto& [text, rate] : std::map<std::string, double>{{"0.001", 0.001},
                                                                {"2.5", 2.5},
                                                                {".5", 0.5},
                                                                {"5.", 5},
                                                                {"1e3", 1000},
                                                                {"25E-1", 2.5},
                                                                {"1000000000", 1e9},
                                                                {"0.0", 0},
                                                                {"0e5", 0}}) {
    EXPECT_EQ(
        parse("", {{"CONVEYOR_RATE_LIMIT_RATE_PER_SEC", text}}).engine.rate_limit_rate_per_sec,
        rate)
        << text;
  }
}

TEST(ConfigEnv, RateLimitScope) {
  EXPECT_EQ(parse("", {{"CONVEYOR_RATE_LIMIT_SCOPE", "fleet"}}).engine.rate_limit_scope,
            LimitScope::kFleet);
  EXPECT_EQ(
      parse("[engine]\nrate_limit_scope = \"fleet\"\n", {{"CONVEYOR_RATE_LIMIT_SCOPE", "process"}})
          .engine.rate_limit_scope,
      LimitScope::kProcess);
  const Config c =
      parse("[engine]\nrate_limit_rate_per_sec = 5\n", {{"CONVEYOR_RATE_LIMIT_SCOPE", "fleet"}});
  EXPECT_EQ(c.engine.default_limit(), (RateLimit{5, 5, LimitScope::kFleet}));
  // Strict, as in the file: no other spelling, case or padding.
  for (const char* bad : {"fleeet", "Fleet", "FLEET", " fleet", "fleet ", "global", "1"}) {
    EXPECT_EQ(config_error("", {{"CONVEYOR_RATE_LIMIT_SCOPE", bad}}),
              std::string("environment variable CONVEYOR_RATE_LIMIT_SCOPE: must be process (a "
                          "bucket per process) or fleet (one bucket for every process on the "
                          "storage), got \"") +
                  bad + "\"")
        << bad;
  }
  // "" counts as unset, as for every variable.
  EXPECT_EQ(parse("[engine]\nrate_limit_scope = \"fleet\"\n", {{"CONVEYOR_RATE_LIMIT_SCOPE", ""}})
                .engine.rate_limit_scope,
            LimitScope::kFleet);
}

// The error for the names in the environment, or "".
std::string env_names_error(std::vector<std::string> names) {
  try {
    parse_config("", "test.toml", fake_env(), names);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

constexpr const char* kKnownEnv =
    "known: CONVEYOR_CONFIG, CONVEYOR_PLUGIN_DIR, CONVEYOR_RATE_LIMIT_ENABLED, "
    "CONVEYOR_RATE_LIMIT_RATE_PER_SEC, CONVEYOR_RATE_LIMIT_BURST, CONVEYOR_RATE_LIMIT_SCOPE, "
    "CONVEYOR_STORAGE_PLUGIN, CONVEYOR_SERVER_LISTEN, CONVEYOR_LOG_LEVEL, CONVEYOR_ADMIN_TOKEN, "
    "CONVEYOR_WORKER_TOKEN)";

// A misspelt variable used to be ignored: the setting silently not applied.
TEST(ConfigEnv, AMisspeltNameIsRefusedNamingTheClosest) {
  const std::pair<const char*, const char*> typos[] = {
      {"CONVEYOR_RATE_LIMT_BURST", "CONVEYOR_RATE_LIMIT_BURST"},
      {"CONVEYOR_RATE_LIMIT_SCOPES", "CONVEYOR_RATE_LIMIT_SCOPE"},
      {"CONVEYOR_RAET_LIMIT_ENABLED", "CONVEYOR_RATE_LIMIT_ENABLED"},
      {"CONVEYOR_ADMIN_TOKENS", "CONVEYOR_ADMIN_TOKEN"},
      {"CONVEYOR_LOGLEVEL", "CONVEYOR_LOG_LEVEL"},
      {"CONVEYOR_CONFIGS", "CONVEYOR_CONFIG"},
      {"CONVEYOR_PLUGINS_DIR", "CONVEYOR_PLUGIN_DIR"}};
  for (const auto& [typo, known] : typos) {
    EXPECT_EQ(env_names_error({"CONVEYOR_TEST_PG_DSN", typo}),
              std::string("environment variable \"") + typo +
                  "\" is not one conveyor reads; did you mean " + known +
                  "? (rename it, or unset it; " + kKnownEnv)
        << typo;
  }
}

TEST(ConfigEnv, AnUnknownNameThatLooksLikeASettingIsRefused) {
  for (const char* name : {"CONVEYOR_RATE_LIMIT_RATE", "CONVEYOR_ENGINE_MAX_WORKERS",
                           "CONVEYOR_SERVER_READ_ONLY", "CONVEYOR_LOG_FORMAT"}) {
    EXPECT_EQ(env_names_error({name}),
              std::string("environment variable \"") + name +
                  "\" is not one conveyor reads, so the setting it looks like would be ignored: "
                  "set it in the config file, or unset it (" +
                  kKnownEnv)
        << name;
  }
}

// Conveyor's own scripts, tests, benchmarks and builds set CONVEYOR_* names
// that are not settings, around the processes they start: never refused.
TEST(ConfigEnv, NamesOfTheToolsPass) {
  const std::vector<std::string> tools = {"CONVEYOR_TEST_PG_DSN",
                                          "CONVEYOR_TEST_PG_PORT",
                                          "CONVEYOR_TEST_PLUGIN_DIR",
                                          "CONVEYOR_BENCH_PLUGIN_DIR",
                                          "CONVEYOR_SOAK_PG_DSN",
                                          "CONVEYOR_BIN",
                                          "CONVEYOR_BINARY",
                                          "CONVEYOR_PROTO_DIR",
                                          "CONVEYOR_REQUIRE_PG",
                                          "CONVEYOR_CHROMIUM",
                                          "CONVEYOR_DASHBOARD_ARTIFACTS",
                                          "CONVEYOR_SANITIZE",
                                          "CONVEYOR_WERROR",
                                          "CONVEYOR_BUILD_TESTS",
                                          "CONVEYOR_SKIP_PARTS",
                                          "CONVEYOR_CONFIG",
                                          "CONVEYOR_PLUGIN_DIR",
                                          "CONVEYOR_LOG_LEVEL",
                                          "PATH",
                                          "conveyor_rate_limt_burst"};
  EXPECT_EQ(env_names_error(tools), "");
  EXPECT_TRUE(check_env_names(tools).empty());
}

// Other unknown names may belong to someone else's tooling: a warning that
// names the variable and the known ones, not an error.
TEST(ConfigEnv, OtherUnknownNamesAreWarnedAbout) {
  EXPECT_EQ(env_names_error({"CONVEYOR_DEPLOY_COLOR"}), "");
  EXPECT_EQ(check_env_names({"CONVEYOR_DEPLOY_COLOR", "CONVEYOR_TEST_PG_DSN"}),
            std::vector<std::string>{
                std::string("environment variable \"CONVEYOR_DEPLOY_COLOR\" starts with "
                            "CONVEYOR_ but is not one conveyor reads; it is ignored (") +
                kKnownEnv});
}

TEST(ConfigEnv, ZeroRateClearsTheDefaultLimit) {
  const Config c =
      parse("[engine]\nrate_limit_rate_per_sec = 4\n", {{"CONVEYOR_RATE_LIMIT_RATE_PER_SEC", "0"}});
  EXPECT_EQ(c.engine.default_limit(), std::nullopt);
}

// ---- default limit, listen, paths, files ------------------------------------

TEST(EngineConfig, DefaultLimit) {
  EngineConfig e;
  EXPECT_EQ(e.default_limit(), std::nullopt);
  e.rate_limit_rate_per_sec = 10.2;
  EXPECT_EQ(e.default_limit(), (RateLimit{10.2, 11}));
  e.rate_limit_burst = 4;
  EXPECT_EQ(e.default_limit(), (RateLimit{10.2, 4}));
  e.rate_limit_enabled = false;  // the kill switch is the resolver's business
  EXPECT_EQ(e.default_limit(), (RateLimit{10.2, 4}));
}

TEST(ListenAddress, ParsesHostAndPort) {
  const ListenAddress v4 = parse_listen_address("127.0.0.1:8080");
  EXPECT_EQ(v4.host, "127.0.0.1");
  EXPECT_EQ(v4.port, 8080);
  const ListenAddress name = parse_listen_address("localhost:1");
  EXPECT_EQ(name.host, "localhost");
  EXPECT_EQ(name.port, 1);
  const ListenAddress v6 = parse_listen_address("[::1]:65535");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 65535);
  try {
    parse_listen_address("nope");
    FAIL() << "no throw";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "listen");
    EXPECT_STREQ(e.what(),
                 "listen must be \"host:port\" with a port from 1 to 65535 (e.g. "
                 "\"127.0.0.1:8080\"), got \"nope\"");
  }
}

TEST(ResolveConfigPath, ExplicitThenEnvThenDefault) {
  EXPECT_EQ(resolve_config_path("my.toml", fake_env({{"CONVEYOR_CONFIG", "env.toml"}})), "my.toml");
  EXPECT_EQ(resolve_config_path(std::nullopt, fake_env({{"CONVEYOR_CONFIG", "env.toml"}})),
            "env.toml");
  EXPECT_EQ(resolve_config_path(std::nullopt, fake_env()), "config/conveyor.toml");
  EXPECT_EQ(resolve_config_path(std::nullopt, fake_env({{"CONVEYOR_CONFIG", ""}})),
            "config/conveyor.toml");
}

class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = std::filesystem::temp_directory_path() /
           ("conveyor_config_test_" + std::to_string(::getpid()) + "_" + test);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path write(const std::string& name, const std::string& text) {
    const auto path = dir_ / name;
    std::ofstream(path) << text;
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(ConfigFile, LoadsAndNamesTheFileInErrors) {
  const auto good = write("good.toml", "[engine]\nmax_workers = 7\n");
  EXPECT_EQ(load_config_file(good, fake_env()).engine.max_workers, 7u);
  const auto bad = write("bad.toml", "[engine]\n\nmax_workers = 0\n");
  try {
    load_config_file(bad, fake_env());
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              bad.string() + ":3: engine.max_workers: must be an integer >= 1, got 0");
  }
}

TEST_F(ConfigFile, MissingFileSaysHowToPointElsewhere) {
  const auto missing = dir_ / "missing.toml";
  try {
    load_config_file(missing, fake_env());
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot read config file " + missing.string() +
                  ": No such file or directory (pass --config FILE or set CONVEYOR_CONFIG)");
  }
}

TEST_F(ConfigFile, DirectoryIsNotAConfigFile) {
  try {
    load_config_file(dir_, fake_env());
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read config file " + dir_.string() +
                                         ": it is a directory (pass --config FILE or set "
                                         "CONVEYOR_CONFIG)");
  }
}

namespace conveyor {
namespace {

TEST(ConfigLog, LevelAndFormat) {
  Config c = parse("");
  EXPECT_FALSE(c.log.level) << "unset: the command's default";
  EXPECT_EQ(c.log.format, LogFormat::kText);
  c = parse("[log]\nlevel = \"debug\"\nformat = \"json\"\n");
  EXPECT_EQ(c.log.level, LogLevel::kDebug);
  EXPECT_EQ(c.log.format, LogFormat::kJson);
  EXPECT_EQ(parse("[log]\nlevel = \"WARNING\"\n").log.level, LogLevel::kWarn);
}

TEST(ConfigLog, AnUnknownLevelOrFormatNamesIt) {
  EXPECT_EQ(config_error("[log]\nlevel = \"verbose\"\n"),
            "test.toml:2: log.level: must be one of trace, debug, info, warn, error, critical, "
            "off, got \"verbose\"");
  EXPECT_EQ(config_error("[log]\nformat = \"xml\"\n"),
            "test.toml:2: log.format: must be \"text\" or \"json\", got \"xml\"");
  EXPECT_EQ(config_error("[log]\nlevle = \"info\"\n"),
            "test.toml:2: log.levle: unknown key (known keys in [log]: level, format); did you "
            "mean level?");
}

TEST(ConfigLog, TheEnvironmentVariableAnyCaseOverridesTheFile) {
  EXPECT_EQ(parse("[log]\nlevel = \"info\"\n", {{"CONVEYOR_LOG_LEVEL", "WARN"}}).log.level,
            LogLevel::kWarn);
  EXPECT_EQ(parse("", {{"CONVEYOR_LOG_LEVEL", "Error"}}).log.level, LogLevel::kError);
  EXPECT_EQ(config_error("", {{"CONVEYOR_LOG_LEVEL", "bogus"}}),
            "environment variable CONVEYOR_LOG_LEVEL: must be one of trace, debug, info, warn, "
            "error, critical, off (any case), got \"bogus\"");
}

TEST(ConfigLog, LevelNames) {
  for (LogLevel l : {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn,
                     LogLevel::kError, LogLevel::kCritical, LogLevel::kOff})
    EXPECT_EQ(parse_log_level(to_string(l)), l);
  EXPECT_FALSE(parse_log_level("inf"));
  EXPECT_FALSE(parse_log_level(""));
}

}  // namespace
}  // namespace conveyor

TEST(ConfigHttp, QueueTargetAndGuardParse) {
  const Config c = parse(R"(
[http]
allow_private = true
allow_hosts = ["hooks.internal", "127.0.0.1"]
max_response_bytes = 4096
max_connections_per_host = 8

[queues.hooks.http]
url = "https://api.example.com/hook"
method = "PUT"
timeout_ms = 2500
headers = { "Content-Type" = "application/json", X-Team = "billing" }
secret_env = "HOOK_SECRET"
follow_redirects = true
)");
  EXPECT_TRUE(c.http.allow_private);
  EXPECT_EQ(c.http.allow_hosts, (std::vector<std::string>{"hooks.internal", "127.0.0.1"}));
  EXPECT_EQ(c.http.max_response_bytes, 4096u);
  EXPECT_EQ(c.http.max_connections_per_host, 8u);
  const HttpTargetConfig& h = c.queues.at("hooks").http.value();
  EXPECT_EQ(h.url, "https://api.example.com/hook");
  EXPECT_EQ(h.method, "PUT");
  EXPECT_EQ(h.timeout_ms, 2500u);
  // Headers in file order (an inline table keeps it too).
  ASSERT_EQ(h.headers.size(), 2u);
  EXPECT_EQ(h.headers[0],
            (std::pair<std::string, std::string>{"Content-Type", "application/json"}));
  EXPECT_EQ(h.headers[1], (std::pair<std::string, std::string>{"X-Team", "billing"}));
  EXPECT_EQ(h.secret_env, "HOOK_SECRET");
  EXPECT_TRUE(h.follow_redirects);
}

TEST(ConfigHttp, DefaultsAreSafe) {
  const Config c = parse("[queues.hooks.http]\nurl = \"http://a.example/\"\n");
  EXPECT_FALSE(c.http.allow_private);
  EXPECT_TRUE(c.http.allow_hosts.empty());
  const HttpTargetConfig& h = c.queues.at("hooks").http.value();
  EXPECT_EQ(h.method, "POST");
  EXPECT_EQ(h.timeout_ms, 30000u);
  EXPECT_FALSE(h.follow_redirects);
  EXPECT_FALSE(parse("").queues.count("hooks"));
}

TEST(ConfigHttp, BadTargetsSayWhatToWrite) {
  EXPECT_EQ(
      config_error("[queues.h.http]\nmethod = \"POST\"\n"),
      "test.toml:1: queues.h.http: missing url (write url = \"https://api.example.com/hook\"; "
      "the job's payload is then the request body)");
  EXPECT_EQ(config_error("[queues.h.http]\nurl = \"ftp://x/\"\n"),
            "test.toml:2: queues.h.http.url: must be an http:// or https:// URL with a host, got "
            "\"ftp://x/\"");
  EXPECT_EQ(config_error("[queues.h.http]\nurl = \"http://x/\"\nmethod = \"post\"\n"),
            "test.toml:3: queues.h.http.method: must be an HTTP method in upper case (GET, POST, "
            "PUT, PATCH, DELETE, ...), got \"post\"");
  EXPECT_EQ(config_error("[queues.h.http]\nurl = \"http://x/\"\ntimeout_ms = 0\n"),
            "test.toml:3: queues.h.http.timeout_ms: must be an integer from 1 to 3600000, got 0");
  EXPECT_EQ(
      config_error("[queues.h.http]\nurl = \"http://x/\"\nheaders = { \"Bad Name\" = \"v\" }\n"),
      "test.toml:3: queues.h.http.headers.\"Bad Name\": header name must be a token (letters, "
      "digits and !#$%&'*+-.^_`|~), got \"Bad Name\"");
  EXPECT_EQ(config_error("[queues.h.http]\nurl = \"http://x/\"\nsecret_env = \"1X\"\n"),
            "test.toml:3: queues.h.http.secret_env: must be the name of an environment variable "
            "(letters, digits and _, not starting with a digit), got \"1X\"");
  EXPECT_EQ(config_error("[queues.h.http]\nurl = \"http://x/\"\nsecret = \"s\"\n").substr(0, 48),
            "test.toml:3: queues.h.http.secret: unknown key (");
}

TEST(ConfigHttp, BadGuardSettingsSayWhatToWrite) {
  EXPECT_EQ(
      config_error("[http]\nallow_hosts = \"a\"\n"),
      "test.toml:2: http.allow_hosts: must be an array of host names ([\"api.internal\"]), got "
      "\"a\"");
  EXPECT_EQ(config_error("[http]\nallow_hosts = [\"a\", 3]\n"),
            "test.toml:2: http.allow_hosts[1]: must be a non-empty string, got 3");
  EXPECT_EQ(config_error("[http]\nallow_private = 1\n"),
            "test.toml:2: http.allow_private: must be true or false, got 1");
}

// A directory with the files the TLS keys name (contents are not read at load).
class ConfigHttpTls : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "conveyor-config-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    for (const char* name : {"ca.pem", "queue-ca.pem", "client.pem", "client.key"})
      std::ofstream(dir_ / name) << "PEM\n";
    std::filesystem::create_directory(dir_ / "certs");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(ConfigHttpTls, GlobalAndQueueKeysParse) {
  const Config c = parse(fmt::format(R"(
[http]
ca_file = "{}"
ca_dir = "{}"
client_cert = "{}"
client_key = "{}"

[queues.hooks.http]
url = "https://api.example.com/hook"
ca_file = "{}"
)",
                                     path("ca.pem"), path("certs"), path("client.pem"),
                                     path("client.key"), path("queue-ca.pem")));
  EXPECT_EQ(c.http.tls.ca_file, path("ca.pem"));
  EXPECT_EQ(c.http.tls.ca_dir, path("certs"));
  EXPECT_EQ(c.http.tls.client_cert, path("client.pem"));
  EXPECT_EQ(c.http.tls.client_key, path("client.key"));
  const HttpTlsConfig& q = c.queues.at("hooks").http.value().tls;
  EXPECT_EQ(q.ca_file, path("queue-ca.pem"));
  EXPECT_EQ(q.ca_dir, "");
  EXPECT_EQ(q.client_cert, "");
}

TEST_F(ConfigHttpTls, DefaultsAreEmpty) {
  const Config c = parse("[queues.hooks.http]\nurl = \"https://a.example/\"\n");
  EXPECT_EQ(c.http.tls.ca_file, "");
  EXPECT_EQ(c.http.tls.ca_dir, "");
  EXPECT_EQ(c.queues.at("hooks").http->tls.client_key, "");
}

TEST_F(ConfigHttpTls, MissingFilesAreErrorsNamingTheKeyAndLine) {
  const std::string missing = path("nope.pem");
  EXPECT_EQ(config_error(fmt::format("[http]\nca_file = \"{}\"\n", missing)),
            fmt::format("test.toml:2: http.ca_file: file \"{}\" does not exist (give the path of "
                        "an existing file; a relative path is taken from the directory conveyor "
                        "starts in)",
                        missing));
  EXPECT_EQ(config_error(
                fmt::format("[queues.h.http]\nurl = \"https://x/\"\n\nca_dir = \"{}\"\n", missing)),
            fmt::format("test.toml:4: queues.h.http.ca_dir: directory \"{}\" does not exist (give "
                        "the path of an existing directory; a relative path is taken from the "
                        "directory conveyor starts in)",
                        missing));
  EXPECT_EQ(config_error(fmt::format("[http]\nca_dir = \"{}\"\n", path("ca.pem"))),
            fmt::format("test.toml:2: http.ca_dir: \"{}\" is not a directory (ca_dir takes a "
                        "directory of CA certificates hashed by c_rehash or openssl rehash; a "
                        "single PEM bundle goes in ca_file)",
                        path("ca.pem")));
  EXPECT_EQ(config_error(fmt::format("[http]\nca_file = \"{}\"\n", path("certs"))),
            fmt::format("test.toml:2: http.ca_file: \"{}\" is a directory, not a file (give the "
                        "PEM file itself; a hashed directory of CAs goes in ca_dir)",
                        path("certs")));
  EXPECT_EQ(config_error("[http]\nca_file = \"\"\n"),
            "test.toml:2: http.ca_file: must be a non-empty string, got \"\"");
}

TEST_F(ConfigHttpTls, ClientCertAndKeyGoTogether) {
  EXPECT_EQ(config_error(fmt::format("[http]\nallow_private = true\nclient_cert = \"{}\"\n",
                                     path("client.pem"))),
            "test.toml:3: http.client_cert: is set without client_key in the same table (set "
            "both, the PEM client certificate and its private key, or neither)");
  EXPECT_EQ(config_error(fmt::format("[queues.h.http]\nurl = \"https://x/\"\nclient_key = \"{}\"\n",
                                     path("client.key"))),
            "test.toml:3: queues.h.http.client_key: is set without client_cert in the same table "
            "(set both, the PEM client certificate and its private key, or neither)");
}

TEST_F(ConfigHttpTls, AnUnreadableFileIsAnError) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads any file";
  std::filesystem::permissions(dir_ / "ca.pem", std::filesystem::perms::none);
  EXPECT_EQ(config_error(fmt::format("[http]\nca_file = \"{}\"\n", path("ca.pem"))),
            fmt::format("test.toml:2: http.ca_file: file \"{}\" is not readable: Permission "
                        "denied (let the user conveyor runs as read it)",
                        path("ca.pem")));
}

}  // namespace
}  // namespace conveyor
