// Starting and waiting for the processes a benchmark tool drives (a
// `conveyor serve`, the CLI, a copy of the tool itself), header-only: each
// tool is one source file.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace conveyor::bench_tools {

// Starts args[0] (a path) with args. Its stderr is appended to log, and so
// is its stdout unless stdout_to_log is false (then /dev/null). Throws
// std::runtime_error when it cannot start.
inline pid_t spawn(const std::vector<std::string>& args, const std::string& log,
                   bool stdout_to_log = true) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  if (stdout_to_log)
    posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  else
    posix_spawn_file_actions_addopen(&files, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&files, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  if (rc != 0) throw std::runtime_error("cannot start " + args[0]);
  return pid;
}

// Waits for pid: its exit code, or 128 + the signal that ended it.
inline int wait_for(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace conveyor::bench_tools
