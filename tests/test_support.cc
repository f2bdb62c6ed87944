#include "test_support.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>

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

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

// Spawns program (build/bin/conveyor when empty; searched on PATH without a slash).
int spawn(const std::vector<std::string>& args, const std::vector<std::string>& env,
          const std::filesystem::path& out, const std::filesystem::path& err,
          const std::string& program = "", const std::filesystem::path& in = "/dev/null") {
  std::vector<std::string> argv_s = {
      program.empty() ? std::string(CONVEYOR_TEST_BIN_DIR) + "/conveyor" : program};
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
  posix_spawn_file_actions_addopen(&fa, 0, in.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
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

CommandResult run_conveyor(const std::vector<std::string>& args,
                           const std::vector<std::string>& env,
                           const std::filesystem::path& stdin_path) {
  TempDir io;
  int pid = spawn(args, env, io / "out", io / "err", "", stdin_path);
  int status = 0;
  waitpid(pid, &status, 0);
  return CommandResult{decode(status), read_file(io / "out"), read_file(io / "err")};
}

Process::Process(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  TempDir tmp;  // only for a unique name
  err_path_ = std::filesystem::temp_directory_path() / (tmp.path().filename().string() + ".err");
  pid_ = spawn(args, env, "/dev/null", err_path_);
}

Process Process::program(const std::string& program, const std::vector<std::string>& args,
                         const std::vector<std::string>& env) {
  Process p;
  TempDir tmp;  // only for a unique name
  p.err_path_ = std::filesystem::temp_directory_path() / (tmp.path().filename().string() + ".err");
  p.pid_ = spawn(args, env, "/dev/null", p.err_path_, program);
  return p;
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

void expect_one_line_error(const CommandResult& r, int code, const std::string& part) {
  EXPECT_EQ(r.exit_code, code) << r.err;
  EXPECT_EQ(r.err.rfind("conveyor: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << "expected '" << part << "' in: " << r.err;
}

uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

int connect_loopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

namespace {
std::string lower_case(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

std::string HttpResponse::header(const std::string& name) const {
  auto it = headers.find(lower_case(name));
  return it == headers.end() ? "" : it->second;
}

std::string http_request(const std::string& method, const std::string& path,
                         const std::vector<std::string>& headers, const std::string& body) {
  std::string raw = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& h : headers) raw += h + "\r\n";
  if (method == "POST") raw += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return raw + "\r\n" + body;
}

HttpResponse http_send(uint16_t port, const std::string& raw) {
  HttpResponse out;
  const int fd = connect_loopback(port);  // on loopback, refused or accepted at once
  if (fd < 0) return out;
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  send_all(fd, raw);  // the server may answer (413) before reading it all
  std::string data;
  char buf[8192];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  const size_t head_end = data.find("\r\n\r\n");
  if (head_end == std::string::npos) return out;
  std::istringstream head(data.substr(0, head_end));
  std::string line;
  std::getline(head, line);
  if (line.rfind("HTTP/1.1 ", 0) != 0) return out;
  out.status = std::stoi(line.substr(9, 3));
  while (std::getline(head, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    out.headers[lower_case(line.substr(0, colon))] = value;
  }
  out.body = data.substr(head_end + 4);
  if (lower_case(out.header("transfer-encoding")) == "chunked") {
    std::string decoded;
    size_t pos = 0;
    for (;;) {
      const size_t eol = out.body.find("\r\n", pos);
      if (eol == std::string::npos) break;
      const size_t size = std::stoul(out.body.substr(pos, eol - pos), nullptr, 16);
      if (size == 0) break;
      decoded += out.body.substr(eol + 2, size);
      pos = eol + 2 + size + 2;
    }
    out.body = decoded;
  }
  return out;
}

ServeProcess::ServeProcess(const TempDir& dir, const std::string& extra,
                           const std::string& server_keys, const std::vector<std::string>& env) {
  for (int attempt = 0; attempt < 3 && !ready_; ++attempt) {
    port_ = free_port();
    const auto config = write_sqlite_config(dir, extra + "\n[server]\nlisten = \"127.0.0.1:" +
                                                     std::to_string(port_) + "\"\n" + server_keys);
    process_ = std::make_unique<Process>(
        std::vector<std::string>{"--config", config.string(), "serve"}, env);
    ready_ = wait_until([&] {
               if (process_->wait(std::chrono::milliseconds(20)) >= 0) return true;  // exited
               return http_send(port_, http_request("GET", "/", {}, "")).status != 0;
             }) &&
             process_->wait(std::chrono::milliseconds(20)) < 0;
  }
}

HttpResponse ServeProcess::post(const std::string& path, const std::string& body,
                                std::vector<std::string> headers) {
  bool typed = false;
  for (const auto& h : headers) typed = typed || lower_case(h).rfind("content-type:", 0) == 0;
  if (!typed) headers.push_back("Content-Type: application/json");
  return http_send(port_, http_request("POST", path, headers, body));
}

}  // namespace conveyor::test
