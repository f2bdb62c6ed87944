#include "test_support.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <sstream>
#include <thread>

extern char** environ;

namespace conveyor::test {

TempDir::TempDir() {
  std::random_device rd;
  path_ = std::filesystem::temp_directory_path() /
          ("conveyor-test-" + std::to_string(rd()) + std::to_string(rd()));
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Config sqlite_config(const TempDir& dir) {
  Config c;
  c.source = "<test>";
  c.storage.plugin = "sqlite";
  c.storage.plugin_dir = CONVEYOR_TEST_PLUGIN_DIR;
  c.storage.options = {{"path", (dir / "conveyor.db").string()}};
  return c;
}

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int spawn(const std::vector<std::string>& args, const std::vector<std::string>& env,
          const std::filesystem::path& out, const std::filesystem::path& err) {
  std::vector<std::string> argv_s = {std::string(CONVEYOR_TEST_BIN_DIR) + "/conveyor"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (kv.rfind("CONVEYOR_", 0) == 0) continue;  // tests set what they need
    env_s.push_back(kv);
  }
  env_s.insert(env_s.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("posix_spawn failed: " + std::to_string(rc));
  return pid;
}

int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

CommandResult run_conveyor(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  TempDir io;
  int pid = spawn(args, env, io / "out", io / "err");
  int status = 0;
  waitpid(pid, &status, 0);
  return CommandResult{decode(status), read_file(io / "out"), read_file(io / "err")};
}

Process::Process(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  TempDir tmp;  // only for a unique name
  err_path_ = std::filesystem::temp_directory_path() / (tmp.path().filename().string() + ".err");
  pid_ = spawn(args, env, "/dev/null", err_path_);
}

Process::~Process() {
  if (exit_code_ < 0 && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  std::error_code ec;
  std::filesystem::remove(err_path_, ec);
}

void Process::signal(int sig) { ::kill(pid_, sig); }

int Process::wait(std::chrono::milliseconds timeout) {
  if (exit_code_ >= 0) return exit_code_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) return exit_code_ = decode(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

std::string Process::stderr_text() const { return read_file(err_path_); }

std::filesystem::path write_sqlite_config(const TempDir& dir, const std::string& extra) {
  auto path = dir / "conveyor.toml";
  std::ofstream out(path);
  out << "[storage]\nplugin = \"sqlite\"\nplugin_dir = \"" << CONVEYOR_TEST_PLUGIN_DIR << "\"\n"
      << "[storage.options]\npath = \"" << (dir / "conveyor.db").string() << "\"\n"
      << extra;
  return path;
}

}  // namespace conveyor::test
