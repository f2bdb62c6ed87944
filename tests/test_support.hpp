// Helpers shared by the integration tests: temporary directories, configs
// pointing at the plugins built in this tree, waiting for a condition with a
// generous deadline, and running the conveyor binary as a real process.
#pragma once

#include <conveyor/config.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
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

// The whole content of a file ("" when it cannot be read).
std::string read_file(const std::filesystem::path& p);

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs build/bin/conveyor with args (and extra environment "K=V" entries),
// waits for it, and captures its output. Its standard input is the file
// stdin_path (default /dev/null).
CommandResult run_conveyor(const std::vector<std::string>& args,
                           const std::vector<std::string>& env = {},
                           const std::filesystem::path& stdin_path = "/dev/null");

// Expects the CLI's error: exit code, and exactly one line on stderr, starting
// with "conveyor: " and containing part.
void expect_one_line_error(const CommandResult& r, int code, const std::string& part);

// A conveyor process left running (e.g. `serve`); killed if still alive when
// destroyed.
class Process {
 public:
  Process(const std::vector<std::string>& args, const std::vector<std::string>& env = {});
  // Another program (found on PATH when it has no slash), e.g. a worker in
  // another language; its stdout goes to /dev/null, its stderr is kept.
  static Process program(const std::string& program, const std::vector<std::string>& args,
                         const std::vector<std::string>& env = {});
  Process(Process&& other) noexcept
      : pid_(std::exchange(other.pid_, -1)),
        exit_code_(other.exit_code_),
        err_path_(std::move(other.err_path_)) {}
  ~Process();
  void signal(int sig);
  // Waits for exit; returns the exit code (128+N if killed by signal N), or -1
  // on timeout.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  std::string stderr_text() const;
  int pid() const { return pid_; }

 private:
  Process() = default;
  int pid_ = -1;
  int exit_code_ = -1;
  std::filesystem::path err_path_;
};

// Writes a TOML config file for the SQLite plugin built in this tree.
std::filesystem::path write_sqlite_config(const TempDir& dir, const std::string& extra = "");

// ---- HTTP to a real `conveyor serve` --------------------------------------------

// A free TCP port on 127.0.0.1 (free when asked; a caller retries on a race).
uint16_t free_port();

// A (blocking) TCP connection to 127.0.0.1:port, or -1.
int connect_loopback(uint16_t port);

// Sends all of data on fd; stops at the first error (the peer may have
// answered and closed before reading it all).
void send_all(int fd, const std::string& data);

struct HttpResponse {
  int status = 0;                              // 0: no answer
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // de-chunked
  std::string header(const std::string& name) const;
};

// An HTTP/1.1 request as raw bytes ("Connection: close"; POST gets a
// Content-Length), so malformed requests can be written exactly.
std::string http_request(const std::string& method, const std::string& path,
                         const std::vector<std::string>& headers, const std::string& body);

// Sends raw bytes to 127.0.0.1:port and reads the answer until the server
// closes; 10 s socket timeouts.
HttpResponse http_send(uint16_t port, const std::string& raw);

// `conveyor serve` on a config written by write_sqlite_config(dir, extra) plus
// a [server] section listening on a free loopback port with server_keys.
class ServeProcess {
 public:
  ServeProcess(const TempDir& dir, const std::string& extra, const std::string& server_keys,
               const std::vector<std::string>& env = {});
  // Whether it answers HTTP (after up to 20 s) and is still running.
  bool ready() const { return ready_; }
  uint16_t port() const { return port_; }
  Process& process() { return *process_; }
  // POST path with a JSON body (Content-Type: application/json unless headers
  // give their own) and extra headers.
  HttpResponse post(const std::string& path, const std::string& body,
                    std::vector<std::string> headers = {});

 private:
  uint16_t port_ = 0;
  bool ready_ = false;
  std::unique_ptr<Process> process_;
};

}  // namespace conveyor::test
