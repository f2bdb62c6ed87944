#include "crash_worker_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstring>
#include <fstream>
#include <stdexcept>

extern char** environ;

namespace conveyor::test {

CrashWorker::CrashWorker(const std::filesystem::path& config, const std::filesystem::path& record,
                         const std::filesystem::path& log) {
  std::vector<std::string> args = {std::string(CONVEYOR_TEST_BIN_DIR) + "/crash_worker",
                                   config.string(), record.string()};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out = log.empty() ? "/dev/null" : log.string();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  // The child starts with SIGINT and SIGTERM blocked: a stop sent before its
  // main blocks them itself (a worker started just as the drain ends) waits
  // for its sigwait instead of killing it by the default action.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  posix_spawnattr_setsigmask(&attr, &stop_signals);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  const int rc = posix_spawn(&pid_, argv[0], &fa, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    pid_ = -1;
    throw std::runtime_error("cannot start crash_worker: " + std::string(std::strerror(rc)));
  }
}

CrashWorker::~CrashWorker() { kill(SIGKILL); }

void CrashWorker::kill(int sig) {
  if (pid_ <= 0) return;
  ::kill(pid_, sig);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  exit_status_ = status;
  pid_ = -1;
}

bool CrashWorker::alive() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return true;
  exit_status_ = status;
  pid_ = -1;
  return false;
}

std::map<int64_t, std::vector<int>> read_executions(const std::filesystem::path& record) {
  std::map<int64_t, std::vector<int>> by_job;
  std::ifstream in(record);
  int64_t id;
  int pid;
  while (in >> id >> pid) by_job[id].push_back(pid);
  return by_job;
}

}  // namespace conveyor::test
