// conveyor-http-bench: N http jobs in flight at once from one `conveyor serve`
// process, to a downstream on 127.0.0.1 that answers each request 1 s after
// it arrived (one poll() thread in this process). Prints, per N, the serve
// process's threads and RSS while idle and at the peak with all N requests
// held by the downstream, and how long the N took. The goal: threads
// independent of N (libcurl's multi interface, no thread per delivery).
//
//   conveyor-http-bench [--in-flight 100,1000] [--answer-after-ms 1000]
//                       [--conveyor build/bin/conveyor]
#include "spawned_process.hpp"
#include "testing/raw_http_server.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

struct Usage {
  long threads = 0;
  long rss_kb = 0;
};

Usage usage_of(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  Usage u;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) u.threads = std::stol(line.substr(8));
    if (line.rfind("VmRSS:", 0) == 0) u.rss_kb = std::stol(line.substr(6));
  }
  return u;
}

pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  return conveyor::bench_tools::spawn(args, log, /*stdout_to_log=*/false);
}

int run_and_wait(const std::vector<std::string>& args, const std::string& log) {
  return conveyor::bench_tools::wait_for(spawn(args, log));
}

// `conveyor jobs ls` counts completed jobs of queue api (up to 1000 a page).
long completed(const std::string& conveyor, const std::string& config, const fs::path& dir) {
  const std::string out = (dir / "ls.json").string();
  const std::string cmd = fmt::format(
      "'{}' --config '{}' --json jobs ls --queue api --state completed --limit 1000 > '{}'",
      conveyor, config, out);
  if (std::system(cmd.c_str()) != 0) return -1;
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  long n = 0;
  for (size_t at = s.find("\"state\": \"completed\""); at != std::string::npos;
       at = s.find("\"state\": \"completed\"", at + 1))
    ++n;
  return n;
}

struct Result {
  size_t in_flight = 0;
  size_t held = 0;
  Usage idle, peak;
  double seconds = 0;
};

Result measure(const std::string& conveyor, size_t n, std::chrono::milliseconds answer_after) {
  conveyor::http_delivery::testing::RawHttpServer downstream({.answer_after = answer_after});
  const fs::path dir = fs::temp_directory_path() / fmt::format("conveyor-http-bench-{}", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string config = (dir / "conveyor.toml").string();
  std::ofstream(config) << fmt::format(
      "[storage]\nplugin = \"sqlite\"\n[storage.options]\npath = \"{}\"\n"
      "[engine]\npoll_interval_ms = 100\n"
      "[http]\nallow_hosts = [\"127.0.0.1\"]\nmax_connections_per_host = 0\n"
      "[queues.api]\nmax_workers = {}\n"
      "[queues.api.http]\nurl = \"http://127.0.0.1:{}/hook\"\ntimeout_ms = 60000\n",
      (dir / "conveyor.db").string(), n, downstream.port());
  const std::string log = (dir / "serve.log").string();
  const pid_t serve = spawn({conveyor, "--config", config, "serve"}, log);
  std::this_thread::sleep_for(1500ms);  // started and idle: the baseline
  Result r;
  r.in_flight = n;
  r.idle = usage_of(serve);
  const auto start = Clock::now();
  if (run_and_wait(
          {conveyor, "--config", config, "enqueue", "api", "http", "--count", std::to_string(n)},
          log) != 0)
    throw std::runtime_error("enqueue failed; see " + log);
  // Sample while the downstream holds them; the peak is when all n are held.
  while (completed(conveyor, config, dir) < static_cast<long>(n)) {
    const Usage u = usage_of(serve);
    r.peak.threads = std::max(r.peak.threads, u.threads);
    r.peak.rss_kb = std::max(r.peak.rss_kb, u.rss_kb);
    if (Clock::now() - start > 120s) throw std::runtime_error("not all completed; see " + log);
    std::this_thread::sleep_for(20ms);
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.held = downstream.max_held();
  kill(serve, SIGTERM);
  int status = 0;
  waitpid(serve, &status, 0);
  fs::remove_all(dir);
  return r;
}

std::vector<size_t> parse_list(const std::string& text) {
  std::vector<size_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoul(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> counts = {100, 1000};
  std::chrono::milliseconds answer_after = 1000ms;
  std::string conveyor = (fs::path(argv[0]).parent_path() / "conveyor").string();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--in-flight" && has_value) {
      counts = parse_list(argv[++i]);
    } else if (a == "--answer-after-ms" && has_value) {
      answer_after = std::chrono::milliseconds(std::stol(argv[++i]));
    } else if (a == "--conveyor" && has_value) {
      conveyor = argv[++i];
    } else {
      std::cerr << "usage: conveyor-http-bench [--in-flight 100,1000] [--answer-after-ms 1000] "
                   "[--conveyor PATH]\n";
      return 2;
    }
  }
  std::cout << fmt::format(
      "http jobs in flight from one `conveyor serve` (SQLite), downstream answering after {} ms; "
      "machine: {} cores\n",
      answer_after.count(), std::thread::hardware_concurrency());
  std::cout << "in flight | held at once by the downstream | serve threads idle -> peak | "
               "RSS idle -> peak (MiB) | all completed in\n";
  for (size_t n : counts) {
    const Result r = measure(conveyor, n, answer_after);
    std::cout << fmt::format(
        "{:>9} | {:>30} | {:>13} -> {:<10} | {:>8.1f} -> {:<11.1f} | {:.2f} s\n", r.in_flight,
        r.held, r.idle.threads, r.peak.threads, r.idle.rss_kb / 1024.0, r.peak.rss_kb / 1024.0,
        r.seconds);
  }
  return 0;
}
