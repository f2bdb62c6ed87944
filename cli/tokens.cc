// `conveyor token new|hash` and the SIGHUP reload of `conveyor serve`
// (docs/reference.md, "Worker tokens" and "Signals").
#include "commands.hpp"

#include <conveyor/admin_server.hpp>
#include <conveyor/config.hpp>
#include <conveyor/internal/log.hpp>
#include <conveyor/validation.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <iostream>
#include <sstream>

namespace conveyor::cli {
namespace {

// A TOML basic string: quotes, backslashes and control characters escaped.
std::string toml_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// "a,b" and repeated options as one list, empty parts dropped.
std::vector<std::string> split_lists(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const std::string& value : values) {
    std::stringstream in(value);
    std::string part;
    while (std::getline(in, part, ','))
      if (!part.empty()) out.push_back(part);
  }
  return out;
}

std::string toml_array(const std::vector<std::string>& values) {
  std::vector<std::string> quoted;
  for (const std::string& v : values) quoted.push_back(toml_string(v));
  return "[" + fmt::format("{}", fmt::join(quoted, ", ")) + "]";
}

}  // namespace

int token_new(const TokenNewArgs& a) {
  const std::vector<std::string> queues = split_lists(a.queues);
  if (queues.empty())
    throw UsageError(
        "give the queues the token may work: --queues email,sms (or --queues '*' for every "
        "queue; there is no default, so a token reaches no queue by accident)");
  std::string block = "[server.worker_tokens." + toml_string(a.name) + "]\n";
  std::string hex;
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1)
    throw std::runtime_error("cannot make a random token: OpenSSL RAND_bytes failed");
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  block += "sha256 = \"" + sha256_hex(hex) + "\"\n";
  block += "queues = " + toml_array(queues) + "\n";
  if (!a.methods.empty()) block += "methods = " + toml_array(split_lists(a.methods)) + "\n";
  if (a.max_backpressure_s)
    block += "max_backpressure_s = " + std::to_string(*a.max_backpressure_s) + "\n";
  // The config reader checks the block, so the file will take it.
  try {
    (void)parse_config(block, "the new token", [](const char*) { return std::nullopt; });
  } catch (const ConfigError& e) {
    std::string message = e.what();
    if (const size_t at = message.find(": server.worker_tokens."); at != std::string::npos)
      message = message.substr(at + 2);
    throw UsageError(message + " (see conveyor token new --help)");
  }
  std::cout << "# The token, shown this once (give it to the worker, e.g. as "
               "CONVEYOR_WORKER_TOKEN):\n"
            << hex
            << "\n\n# Add this to the config file, then send SIGHUP to conveyor serve (kill -HUP "
               "PID):\n"
            << block;
  return 0;
}

int token_hash() {
  std::string token;
  std::getline(std::cin, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == '\n')) token.pop_back();
  if (token.empty())
    throw UsageError(
        "no token on standard input: printf %s TOKEN | conveyor token hash (one line)");
  for (const char c : token)
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f)
      throw UsageError(
          "the token has a space or a control character, which no HTTP client can send: use "
          "printable ASCII without spaces (conveyor token new makes one)");
  std::cout << sha256_hex(token) << "\n";
  return 0;
}

void reload_config(const GlobalOptions& g, Config& running, AdminServer* server) {
  Config fresh;
  try {
    fresh = load_config_file(resolve_config_path(g.config_path));
  } catch (const std::exception& e) {
    spdlog::error(
        "SIGHUP: the config file cannot be used, so nothing changed (the running "
        "config is kept): {}",
        e.what());
    return;
  }
  // Applied live: who may call the worker methods, and the log level.
  if (server) server->reload_worker_tokens(fresh.server);
  set_log_level(fresh.log.level.value_or(LogLevel::kInfo));
  std::vector<std::string> tokens;
  for (const WorkerTokenConfig& t : fresh.server.worker_tokens) tokens.push_back(t.name);
  spdlog::info("SIGHUP: reloaded {}: worker tokens [{}]{}, log level {}", fresh.source,
               fmt::join(tokens, ", "),
               fresh.server.worker_token.empty() ? "" : " and [server] worker_token",
               to_string(fresh.log.level.value_or(LogLevel::kInfo)));
  // Everything else needs a restart: name what changed.
  std::vector<std::string> restart;
  fresh.storage.option_lines = running.storage.option_lines;  // lines move, values matter
  if (fresh.storage != running.storage) restart.push_back("[storage]");
  if (fresh.engine != running.engine) restart.push_back("[engine]");
  if (fresh.queues != running.queues) restart.push_back("[queues]");
  if (fresh.http != running.http) restart.push_back("[http]");
  ServerConfig server_rest = fresh.server;
  server_rest.worker_token = running.server.worker_token;
  server_rest.worker_tokens = running.server.worker_tokens;
  if (server_rest != running.server)
    restart.push_back("[server] (other than worker_token and worker_tokens)");
  if (fresh.log.format != running.log.format) restart.push_back("[log] format");
  if (!restart.empty())
    spdlog::warn(
        "SIGHUP: {} changed in {} but apply only after a restart; they are not in "
        "force",
        fmt::join(restart, ", "), fresh.source);
  running.server.worker_token = fresh.server.worker_token;
  running.server.worker_tokens = fresh.server.worker_tokens;
  running.log.level = fresh.log.level;
}

}  // namespace conveyor::cli
