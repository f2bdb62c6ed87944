// A tests/crash_worker process (the engine with a "record" job kind that
// appends "<job id> <pid>" to a record file for every execution), and reading
// that record back. Shared by the crash and PostgreSQL restart tests.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace conveyor::test {

class CrashWorker {
 public:
  // Starts crash_worker CONFIG RECORD; its output (the engine's log) goes to
  // log, or nowhere when log is empty. Throws when it cannot be started.
  CrashWorker(const std::filesystem::path& config, const std::filesystem::path& record,
              const std::filesystem::path& log = {});
  // SIGKILLs the process if it is still running.
  ~CrashWorker();
  CrashWorker(const CrashWorker&) = delete;
  CrashWorker& operator=(const CrashWorker&) = delete;

  // Sends sig and waits for the process to end (SIGTERM: a graceful stop).
  void kill(int sig);
  // Whether the process is still running (it has not exited or crashed).
  bool alive();
  pid_t pid() const { return pid_; }
  // The raw wait status once ended (-1 before).
  int exit_status() const { return exit_status_; }

 private:
  pid_t pid_ = -1;
  int exit_status_ = -1;
};

// Executions recorded by the "record" handler: job id -> pids that ran it,
// in order.
std::map<int64_t, std::vector<int>> read_executions(const std::filesystem::path& record);

}  // namespace conveyor::test
