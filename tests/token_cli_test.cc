// `conveyor token new` and `conveyor token hash`: a fresh token printed once
// with a block the config takes (and a real server then accepts the token,
// scoped), and bad input refused naming what to fix.
#include "test_support.hpp"

#include <conveyor/config.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace conveyor {
namespace {

// The token (the first line that is not a comment) and the block after it.
std::pair<std::string, std::string> split(const std::string& out) {
  std::istringstream in(out);
  std::string line, token, block;
  bool in_block = false;
  while (std::getline(in, line)) {
    if (line.rfind("[server.worker_tokens.", 0) == 0) in_block = true;
    if (in_block) {
      block += line + "\n";
    } else if (token.empty() && !line.empty() && line[0] != '#') {
      token = line;
    }
  }
  return {token, block};
}

TEST(TokenCli, NewPrintsARandomTokenAndABlockWithOnlyItsHash) {
  const test::CommandResult a =
      test::run_conveyor({"token", "new", "mailer", "--queues", "email,sms", "--methods",
                          "claim,complete", "--max-backpressure", "60"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto [token, block] = split(a.out);
  EXPECT_EQ(token.size(), 64u) << a.out;
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
  EXPECT_EQ(block.find(token), std::string::npos) << "the block holds the token: " << block;
  EXPECT_NE(block.find("sha256 = \"" + sha256_hex(token) + "\""), std::string::npos) << block;
  const Config c = parse_config(block, "block", [](const char*) { return std::nullopt; });
  ASSERT_EQ(c.server.worker_tokens.size(), 1u);
  EXPECT_EQ(c.server.worker_tokens[0].queues, (std::vector<std::string>{"email", "sms"}));
  EXPECT_EQ(c.server.worker_tokens[0].methods,
            method_bit(WorkerMethod::kClaim) | method_bit(WorkerMethod::kComplete));
  EXPECT_EQ(c.server.worker_tokens[0].max_backpressure_s, 60u);
  // A second token is another one.
  const test::CommandResult b = test::run_conveyor({"token", "new", "mailer", "--queues", "*"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(split(b.out).first, token);
  EXPECT_NE(split(b.out).second.find("queues = [\"*\"]"), std::string::npos) << b.out;
  EXPECT_EQ(split(b.out).second.find("methods"), std::string::npos) << "the default is implied";
}

TEST(TokenCli, BadInputIsRefusedNamingWhatToFix) {
  test::expect_one_line_error(test::run_conveyor({"token", "new", "mailer"}), 2,
                              "give the queues the token may work: --queues");
  test::expect_one_line_error(
      test::run_conveyor({"token", "new", "mailer", "--queues", "email", "--methods", "drop"}), 2,
      "unknown method \"drop\" (known: claim, complete, fail, heartbeat, release, enqueue, "
      "get_job)");
  test::expect_one_line_error(test::run_conveyor({"token", "new", "bad name", "--queues", "q"}), 2,
                              "a worker token's name must be");
  test::expect_one_line_error(
      test::run_conveyor({"token", "new", "m", "--queues", "q", "--max-backpressure", "-1"}), 2,
      "max_backpressure_s: must be an integer from 0 to 2592000");
}

TEST(TokenCli, HashReadsTheTokenOnStandardInput) {
  test::TempDir dir;
  const auto in = dir / "token.txt";
  std::ofstream(in) << "w-s3cret\n";
  const test::CommandResult r = test::run_conveyor({"token", "hash"}, {}, in.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, sha256_hex("w-s3cret") + "\n");
  std::ofstream(in, std::ios::trunc) << "\n";
  test::expect_one_line_error(test::run_conveyor({"token", "hash"}, {}, in.string()), 2,
                              "no token on standard input");
  std::ofstream(in, std::ios::trunc) << "two words\n";
  test::expect_one_line_error(test::run_conveyor({"token", "hash"}, {}, in.string()), 2,
                              "the token has a space or a control character");
}

}  // namespace
}  // namespace conveyor
