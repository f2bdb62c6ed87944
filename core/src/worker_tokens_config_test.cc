// [server.worker_tokens.NAME]: named, scoped worker tokens, and every way the
// file can get one wrong.
#include <conveyor/config.hpp>

#include <gtest/gtest.h>

#include <map>

namespace conveyor {
namespace {

using Env = std::map<std::string, std::string>;

Config parse(std::string_view text, Env env = {}) {
  return parse_config(text, "test.toml", [env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

std::string config_error(std::string_view text, Env env = {}) {
  try {
    parse(text, std::move(env));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

const std::string kHash = sha256_hex("w-s3cret");

TEST(WorkerTokensConfig, Sha256OfAKnownText) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(WorkerTokensConfig, DefaultsAreTheWorkerMethodsOnTheListedQueues) {
  const Config c = parse("[server.worker_tokens.mailer]\nsha256 = \"" + kHash +
                             "\"\nqueues = [\"sms\", \"email\"]\n"
                             "[server.worker_tokens.all]\ntoken_env = \"ALL_TOKEN\"\n"
                             "queues = [\"*\"]\nmethods = [\"claim\", \"enqueue\", \"get_job\"]\n"
                             "max_backpressure_s = 30\n",
                         {{"ALL_TOKEN", "all-s3cret"}});
  ASSERT_EQ(c.server.worker_tokens.size(), 2u);
  const WorkerTokenConfig& mailer = c.server.worker_tokens[0];
  EXPECT_EQ(mailer.name, "mailer");
  EXPECT_EQ(mailer.sha256, kHash);
  EXPECT_EQ(mailer.queues, (std::vector<std::string>{"email", "sms"}));
  EXPECT_FALSE(mailer.every_queue);
  EXPECT_EQ(mailer.methods, kWorkerRunMethods);
  EXPECT_FALSE(mailer.methods & method_bit(WorkerMethod::kEnqueue));
  EXPECT_FALSE(mailer.methods & method_bit(WorkerMethod::kGetJob));
  EXPECT_FALSE(mailer.max_backpressure_s);
  const WorkerTokenConfig& all = c.server.worker_tokens[1];
  EXPECT_EQ(all.sha256, sha256_hex("all-s3cret")) << "token_env's token is kept hashed only";
  EXPECT_TRUE(all.every_queue);
  EXPECT_EQ(all.methods, method_bit(WorkerMethod::kClaim) | method_bit(WorkerMethod::kEnqueue) |
                             method_bit(WorkerMethod::kGetJob));
  EXPECT_EQ(all.max_backpressure_s, 30u);
  // Upper-case hex is the same hash.
  std::string upper = kHash;
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  EXPECT_EQ(parse("[server.worker_tokens.a]\nsha256 = \"" + upper + "\"\nqueues = [\"q\"]\n")
                .server.worker_tokens.at(0)
                .sha256,
            kHash);
}

TEST(WorkerTokensConfig, MistakesAreRefusedNamingTheKeyAndWhatToDo) {
  const std::string head = "[server.worker_tokens.t]\n";
  const std::string hash = "sha256 = \"" + kHash + "\"\n";
  const std::pair<std::string, std::string> cases[] = {
      {head + "queues = [\"q\"]\n",
       "test.toml:1: server.worker_tokens.t: missing the token: write sha256"},
      {head + hash, "test.toml:1: server.worker_tokens.t: missing queues: list the queues"},
      {head + hash + "queues = []\n",
       "test.toml:3: server.worker_tokens.t.queues: must not be empty"},
      {head + hash + "queues = [\"q\", \"q\"]\n",
       "test.toml:3: server.worker_tokens.t.queues[1]: \"q\" is listed twice"},
      {head + hash + "queues = [\"*\", \"q\"]\n",
       "test.toml:3: server.worker_tokens.t.queues: \"*\" (every queue) cannot be listed with"},
      {head + hash + "queues = [\"bad queue\"]\n",
       "test.toml:3: server.worker_tokens.t.queues[0]: "},
      {head + hash + "queues = \"q\"\n",
       "test.toml:3: server.worker_tokens.t.queues: must be an array of strings"},
      {head + hash + "queues = [\"q\"]\nmethods = [\"claim\", \"delete_jobs\"]\n",
       "test.toml:4: server.worker_tokens.t.methods[1]: unknown method \"delete_jobs\" (known: "
       "claim, complete, fail, heartbeat, release, enqueue, get_job)"},
      {head + hash + "queues = [\"q\"]\nmethods = []\n",
       "test.toml:4: server.worker_tokens.t.methods: must not be empty"},
      {head + "sha256 = \"abc\"\nqueues = [\"q\"]\n",
       "test.toml:2: server.worker_tokens.t.sha256: must be the 64 hex digits of the token's "
       "SHA-256 (printf %s TOKEN | conveyor token hash), got 3 characters"},
      {head + "sha256 = \"" + std::string(63, 'a') + "g\"\nqueues = [\"q\"]\n",
       "test.toml:2: server.worker_tokens.t.sha256: must be the 64 hex digits"},
      {head + hash + "token_env = \"T\"\nqueues = [\"q\"]\n",
       "test.toml:1: server.worker_tokens.t: give sha256 or token_env, not both"},
      {head + "token_env = \"UNSET_VAR\"\nqueues = [\"q\"]\n",
       "test.toml:2: server.worker_tokens.t.token_env: environment variable UNSET_VAR is not set"},
      {head + "token_env = \"1X\"\nqueues = [\"q\"]\n",
       "test.toml:2: server.worker_tokens.t.token_env: must be the name of an environment "
       "variable"},
      {head + hash + "queues = [\"q\"]\nmax_backpressure_s = -1\n",
       "test.toml:4: server.worker_tokens.t.max_backpressure_s: must be an integer from 0 to "
       "2592000"},
      {head + hash + "queues = [\"q\"]\nqueue = [\"q\"]\n",
       "test.toml:4: server.worker_tokens.t.queue: unknown key (known keys in "
       "[server.worker_tokens.t]: sha256, token_env, queues, methods, max_backpressure_s); did "
       "you mean queues?"},
      {"[server.worker_tokens.\"bad name\"]\n" + hash + "queues = [\"q\"]\n",
       "test.toml:1: server.worker_tokens.\"bad name\": a worker token's name must be"},
      {head + hash + "queues = [\"q\"]\n[server.worker_tokens.u]\n" + hash + "queues = [\"q\"]\n",
       "test.toml:4: server.worker_tokens.u: is the same token as server.worker_tokens.t: give "
       "every worker token a secret of its own"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string message = config_error(text, {{"T", "x-s3cret"}});
    EXPECT_EQ(message.rfind(expected, 0), 0u) << "config:\n" << text << "message: " << message;
  }
}

// A named token equal to the admin token (or the legacy worker token) is
// refused, naming the token by NAME, never echoing the secret.
TEST(WorkerTokensConfig, ATokenEqualToTheAdminOrLegacyWorkerTokenIsRefused) {
  const std::string block =
      "[server.worker_tokens.ops]\nsha256 = \"" + kHash + "\"\nqueues = [\"q\"]\n";
  std::string message = config_error("[server]\nadmin_token = \"w-s3cret\"\n" + block);
  EXPECT_EQ(message.rfind("test.toml: server.worker_tokens.ops: the token is the admin token", 0),
            0u)
      << message;
  EXPECT_EQ(message.find("w-s3cret"), std::string::npos) << message;
  message = config_error(block, {{"CONVEYOR_ADMIN_TOKEN", "w-s3cret"}});
  EXPECT_NE(message.find("the token is the admin token"), std::string::npos) << message;
  message = config_error("[server]\nworker_token = \"w-s3cret\"\n" + block);
  EXPECT_NE(message.find("the token is [server] worker_token"), std::string::npos) << message;
  EXPECT_EQ(config_error("[server]\nadmin_token = \"other\"\n" + block), "");
}

}  // namespace
}  // namespace conveyor
