// Helpers shared by the integration tests: temporary directories, configs
// pointing at the plugins built in this tree, waiting for a condition with a
// generous deadline, and running the conveyor binary as a real process.
#pragma once

#include <conveyor/config.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace conveyor::test {

// A fresh directory removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// A Config on the SQLite plugin built in this tree, with a database in dir.
Config sqlite_config(const TempDir& dir);

// Polls pred every few milliseconds until it holds or timeout passes; returns
// whether it held. For conditions reached asynchronously (another thread or
// process), never as a substitute for synchronisation.
bool wait_until(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds(20));

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs build/bin/conveyor with args (and extra environment "K=V" entries),
// waits for it, and captures its output.
CommandResult run_conveyor(const std::vector<std::string>& args,
                           const std::vector<std::string>& env = {});

// A conveyor process left running (e.g. `serve`); killed if still alive when
// destroyed.
class Process {
 public:
  Process(const std::vector<std::string>& args, const std::vector<std::string>& env = {});
  ~Process();
  void signal(int sig);
  // Waits for exit; returns the exit code (128+N if killed by signal N), or -1
  // on timeout.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  std::string stderr_text() const;
  int pid() const { return pid_; }

 private:
  int pid_ = -1;
  int exit_code_ = -1;
  std::filesystem::path err_path_;
};

// Writes a TOML config file for the SQLite plugin built in this tree.
std::filesystem::path write_sqlite_config(const TempDir& dir, const std::string& extra = "");

}  // namespace conveyor::test
