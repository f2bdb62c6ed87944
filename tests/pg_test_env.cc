#include "pg_test_env.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace conveyor::test {
namespace {

constexpr const char* kPgBin = "/usr/lib/postgresql/15/bin";

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// Whether nothing listens on 127.0.0.1:port (a bind succeeds).
bool port_is_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return free;
}

std::string pg_cluster_script() {
  return std::string(CONVEYOR_TEST_SOURCE_DIR) + "/scripts/pg-cluster.sh";
}

}  // namespace

std::optional<std::string> pg_dsn() {
  const char* v = std::getenv("CONVEYOR_TEST_PG_DSN");
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

bool running_in_ci() {
  const char* v = std::getenv("CI");
  return v != nullptr && std::string(v) == "true";
}

std::string fresh_schema_name(const std::string& prefix) {
  std::random_device rd;
  return prefix + std::to_string(rd()) + std::to_string(rd());
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::filesystem::path write_postgres_config(const TempDir& dir, const std::string& plugin,
                                            const std::string& dsn, const std::string& schema,
                                            const std::string& extra) {
  auto path = dir / "conveyor.toml";
  std::ofstream(path) << "[storage]\nplugin = " << toml_string(plugin)
                      << "\nplugin_dir = " << toml_string(CONVEYOR_TEST_PLUGIN_DIR) << "\n"
                      << "[storage.options]\ndsn = " << toml_string(dsn) << "\n"
                      << "schema = " << toml_string(schema) << "\n"
                      << extra;
  return path;
}

CommandResult run_program(const std::vector<std::string>& args) {
  TempDir io;
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, (io / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&fa, 2, (io / "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("cannot run " + args[0] + ": " + std::strerror(rc));
  int status = 0;
  ::waitpid(pid, &status, 0);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return CommandResult{code, read_file(io / "out"), read_file(io / "err")};
}

std::vector<std::string> psql(const std::string& dsn, const std::string& sql) {
  const std::string bin = std::string(kPgBin) + "/psql";
  auto r = run_program({::access(bin.c_str(), X_OK) == 0 ? bin : "psql", "-X", "-A", "-t", "-q",
                        "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c", sql});
  if (r.exit_code != 0) throw std::runtime_error("psql failed: " + r.err + "\nSQL: " + sql);
  std::vector<std::string> lines;
  std::stringstream ss(r.out);
  for (std::string line; std::getline(ss, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

int64_t psql_int(const std::string& dsn, const std::string& sql) {
  auto lines = psql(dsn, sql);
  if (lines.size() != 1) throw std::runtime_error("expected one value from: " + sql);
  return std::stoll(lines[0]);
}

void drop_schema(const std::string& dsn, const std::string& schema) {
  if (schema.empty()) return;
  try {
    psql(dsn, "DROP SCHEMA IF EXISTS \"" + schema + "\" CASCADE");
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
}

bool ThrowawayCluster::available() {
  return ::access((std::string(kPgBin) + "/initdb").c_str(), X_OK) == 0;
}

ThrowawayCluster::ThrowawayCluster(int first_port, int last_port) {
  std::string errors;
  for (int port = first_port; port <= last_port && !started_; ++port) {
    if (!port_is_free(port)) continue;
    const auto cluster = dir_ / std::to_string(port);
    auto r =
        run_program({"bash", pg_cluster_script(), "start", cluster.string(), std::to_string(port)});
    if (r.exit_code == 0) {
      started_ = true;
      port_ = port;
      dsn_ = trim(r.out);
      dir_path_ = cluster;
    } else {
      // Another process may have taken the port in between: try the next.
      errors += "port " + std::to_string(port) + ": " + r.err + "\n";
      run_program({"bash", pg_cluster_script(), "stop", cluster.string()});
    }
  }
  if (!started_)
    throw std::runtime_error("no throwaway PostgreSQL cluster could start on ports " +
                             std::to_string(first_port) + "-" + std::to_string(last_port) + ":\n" +
                             errors);
}

ThrowawayCluster::~ThrowawayCluster() {
  if (started_) run_program({"bash", pg_cluster_script(), "stop", dir_path_.string()});
}

void ThrowawayCluster::run_script(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"bash", pg_cluster_script()};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_program(argv);
  if (r.exit_code != 0)
    throw std::runtime_error("pg-cluster.sh " + args[0] + " failed: " + r.err + "\nserver log:\n" +
                             server_log());
}

void ThrowawayCluster::halt(const std::string& mode) {
  run_script({"halt", dir_path_.string(), mode});
}

void ThrowawayCluster::resume() { run_script({"resume", dir_path_.string()}); }

std::string ThrowawayCluster::server_log() const { return read_file(dir_path_ / "server.log"); }

}  // namespace conveyor::test
