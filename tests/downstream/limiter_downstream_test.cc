// HTTP delivery against real limiters that no one here wrote: nginx
// (limit_req) and HAProxy (a stick table counting every request, refused ones
// too), each started by the test on 127.0.0.1 in front of a recording backend
// (cpp-httplib, in this process), and a real `conveyor serve` process
// (SQLite) whose "http" queue delivers jobs enqueued by the `conveyor` CLI.
//
// Throughput (issue 46): 3,000 jobs, max_workers 50, 60 s of `serve` from the
// enqueue, for each limiter in {nginx 429 without Retry-After, nginx 503
// without Retry-After, HAProxy 429 with Retry-After: 1 counting refusals} and
// each queue limit in {none, rate 20, rate 100 burst 10}:
// - what reached the backend in the window is at least 70% of what the
//   limiter allows in it (20/s x seconds + its burst);
// - no job is lost (completed + pending + scheduled + running == 3,000) and
//   none failed;
// - no backpressure hold is longer than the cap on holds the downstream
//   named no delay for (expect_no_hold_over_cap): neither one `serve` logged
//   nor one `conveyor queues --json` showed (polled once a second: a hold
//   with more than the cap still to go).
// Each scenario prints one summary line.
//
// Redirects (nginx `return 30x /final`, /final proxied to the backend): for
// 301, 302, 303, 307 and 308 and for POST and PUT, a queue with
// follow_redirects = true delivers one job: either the backend got the same
// method and the same body at /final and the job is completed, or the job
// failed saying why (its last_error mentions the redirect). Never completed
// while the backend got another method or no body.
//
// nginx and haproxy come from scripts/install-deps.sh test; without them the
// tests skip (fail under CI=true).
#include "../test_support.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// ---- The harness --------------------------------------------------------------

bool under_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

// The path of an installed program ("" when there is none): the sbin
// directories first (nginx and haproxy live there, often off a user's PATH).
std::string find_program(const std::string& name) {
  std::vector<std::string> dirs = {"/usr/sbin", "/usr/local/sbin", "/sbin"};
  if (const char* path = std::getenv("PATH")) {
    std::istringstream in(path);
    for (std::string d; std::getline(in, d, ':');)
      if (!d.empty()) dirs.push_back(d);
  }
  for (const auto& d : dirs) {
    const std::string p = d + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// Skips the test (fails it under CI=true) when the program is not installed.
#define REQUIRE_PROGRAM(var, name)                                                          \
  const std::string var = find_program(name);                                               \
  if (var.empty()) {                                                                        \
    if (under_ci()) FAIL() << name << " is not installed (scripts/install-deps.sh test)";   \
    GTEST_SKIP() << name << " is not installed (scripts/install-deps.sh test installs it)"; \
  }

// Whether something accepts TCP connections on 127.0.0.1:port (a bare
// connect: no request, so a limiter counts nothing).
bool accepts_connections(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// The backend behind the limiters: answers 200 to every request and records
// its method, path, body and arrival time.
class Backend {
 public:
  struct Request {
    std::string method;
    std::string path;
    std::string body;
    Clock::time_point at;
  };

  Backend() {
    server_.new_task_queue = [] { return new httplib::ThreadPool(64); };
    const auto record = [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard lock(mu_);
        requests_.push_back({req.method, req.path, req.body, Clock::now()});
      }
      res.set_content("ok", "text/plain");
    };
    server_.Post(".*", record);
    server_.Put(".*", record);
    server_.Get(".*", record);  // also HEAD
    server_.Patch(".*", record);
    server_.Delete(".*", record);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    EXPECT_TRUE(test::wait_until([&] { return server_.is_running(); }));
  }
  ~Backend() {
    server_.stop();
    thread_.join();
  }
  uint16_t port() const { return static_cast<uint16_t>(port_); }
  std::vector<Request> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<Request> requests_;  // mu_
};

// A limiter in front of the backend, run as a child process on a free port of
// 127.0.0.1 with everything it writes in a temporary directory.
class Limiter {
 public:
  virtual ~Limiter() { stop(); }
  bool ready() const { return ready_; }
  uint16_t port() const { return port_; }
  // The answers it gave so far, by status, from its own log.
  virtual std::map<int, size_t> statuses() const = 0;
  // Its logs, for failure messages.
  virtual std::string diagnostics() const = 0;
  void stop() {
    if (!process_) return;
    process_->signal(SIGTERM);
    process_->wait(10s);  // the Process kills it if it is still running
  }

 protected:
  // Starts program with the arguments write_config returns after writing
  // its config for a free port, and waits until it accepts connections; tries
  // a few ports when the one chosen was taken meanwhile.
  void start(const std::string& program,
             const std::function<std::vector<std::string>(uint16_t)>& write_config) {
    for (int attempt = 0; attempt < 3 && !ready_; ++attempt) {
      port_ = test::free_port();
      const auto args = write_config(port_);
      process_ = std::make_unique<test::Process>(test::Process::program(program, args));
      ready_ = test::wait_until(
                   [&] { return process_->wait(20ms) >= 0 || accepts_connections(port_); }, 20s) &&
               process_->wait(20ms) < 0;
    }
  }
  std::string process_stderr() const { return process_ ? process_->stderr_text() : ""; }

  test::TempDir dir_;

 private:
  uint16_t port_ = 0;
  bool ready_ = false;
  std::unique_ptr<test::Process> process_;
};

// Counts lines "STATUS METHOD URI" (the access log formats below).
std::map<int, size_t> count_statuses(const std::string& log) {
  static const std::regex line_re(R"(^([1-5][0-9][0-9]) [A-Z]+ \S*\s*$)");
  std::map<int, size_t> out;
  std::istringstream in(log);
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_match(line, m, line_re)) ++out[std::stoi(m[1].str())];
  return out;
}

// nginx, single process in the foreground (`daemon off; master_process off;`,
// which also never switches user, so it runs as root or not alike), with -p
// the temporary directory: pid, logs and every temp path are inside it.
class Nginx : public Limiter {
 public:
  enum class Config {
    kLimit429,   // limit_req 20r/s burst 5 nodelay, 429 (no Retry-After)
    kLimit503,   // the same answering 503
    kRedirects,  // /rNNN: return NNN /final; /final proxied to the backend
  };

  Nginx(const std::string& program, Config config, uint16_t backend_port) {
    start(program, [&](uint16_t port) {
      const std::string dir = dir_.path().string();
      std::ofstream(dir_ / "nginx.conf") << nginx_conf(config, port, backend_port);
      return std::vector<std::string>{"-p", dir + "/",          "-e", dir + "/error.log",
                                      "-c", dir + "/nginx.conf"};
    });
  }
  std::map<int, size_t> statuses() const override {
    return count_statuses(test::read_file(dir_ / "access.log"));
  }
  std::string diagnostics() const override {
    return "nginx stderr: " + process_stderr() +
           "\nnginx error.log (tail): " + tail(test::read_file(dir_ / "error.log"));
  }

 private:
  static std::string tail(const std::string& s) {
    return s.size() <= 4000 ? s : s.substr(s.size() - 4000);
  }

  static std::string nginx_conf(Config config, uint16_t port, uint16_t backend_port) {
    std::string locations;
    switch (config) {
      case Config::kLimit429:
      case Config::kLimit503:
        locations = fmt::format(
            "    location / {{\n"
            "      limit_req zone=z burst=5 nodelay;\n"
            "      limit_req_status {};\n"
            "      proxy_pass http://backend;\n"
            "    }}\n",
            config == Config::kLimit429 ? 429 : 503);
        break;
      case Config::kRedirects:
        for (int code : {301, 302, 303, 307, 308})
          locations += fmt::format("    location = /r{0} {{ return {0} /final; }}\n", code);
        locations += "    location = /final { proxy_pass http://backend; }\n";
        break;
    }
    return fmt::format(
        "daemon off;\n"
        "master_process off;\n"
        "worker_processes 1;\n"
        "pid nginx.pid;\n"
        // info names why a request was refused as bad (400), which the
        // redirect tests want to show.
        "error_log error.log {};\n"
        "events {{ worker_connections 1024; }}\n"
        "http {{\n"
        "  client_body_temp_path client_body;\n"
        "  proxy_temp_path proxy;\n"
        "  fastcgi_temp_path fastcgi;\n"
        "  uwsgi_temp_path uwsgi;\n"
        "  scgi_temp_path scgi;\n"
        "  log_format counts '$status $request_method $uri';\n"
        "  access_log access.log counts;\n"
        // The key is the server's name: one bucket for every request. (An
        // empty key is not limited at all, so server_name must be set.)
        "  limit_req_zone $server_name zone=z:1m rate=20r/s;\n"
        "  upstream backend {{\n"
        "    server 127.0.0.1:{};\n"
        "    keepalive 16;\n"
        "  }}\n"
        "  proxy_http_version 1.1;\n"
        "  proxy_set_header Connection \"\";\n"
        "  server {{\n"
        "    listen 127.0.0.1:{};\n"
        "    server_name limiter;\n"
        "{}"
        "  }}\n"
        "}}\n",
        config == Config::kRedirects ? "info" : "notice", backend_port, port, locations);
  }
};

// HAProxy 2.6 in the foreground (-db): a stick table with one entry (a
// constant key) tracks every request, so refused ones count too; beyond 20 in
// the last second it answers 429 with Retry-After: 1. Its log (one line per
// request, status first) goes to its stderr.
class Haproxy : public Limiter {
 public:
  Haproxy(const std::string& program, uint16_t backend_port) {
    start(program, [&](uint16_t port) {
      const auto cfg = dir_ / "haproxy.cfg";
      std::ofstream(cfg) << haproxy_cfg(port, backend_port);
      return std::vector<std::string>{"-f", cfg.string(), "-db"};
    });
  }
  std::map<int, size_t> statuses() const override { return count_statuses(process_stderr()); }
  std::string diagnostics() const override {
    const std::string err = process_stderr();
    return "haproxy stderr (tail): " + (err.size() <= 4000 ? err : err.substr(err.size() - 4000));
  }

 private:
  static std::string haproxy_cfg(uint16_t port, uint16_t backend_port) {
    return fmt::format(
        "global\n"
        "  log stderr format raw local0\n"
        "  maxconn 4096\n"
        "defaults\n"
        "  mode http\n"
        "  log global\n"
        "  option dontlognull\n"
        "  log-format \"%ST %HM %HU\"\n"
        "  timeout connect 5s\n"
        "  timeout client 60s\n"
        "  timeout server 60s\n"
        "  timeout http-request 10s\n"
        "  timeout http-keep-alive 60s\n"
        "frontend limiter\n"
        "  bind 127.0.0.1:{}\n"
        "  stick-table type integer size 1 expire 10s store http_req_rate(1s)\n"
        "  http-request track-sc0 int(1)\n"
        "  http-request return status 429 content-type text/plain string \"slow down\" "
        "hdr Retry-After 1 if {{ sc_http_req_rate(0) gt 20 }}\n"
        "  default_backend app\n"
        "backend app\n"
        "  http-reuse always\n"
        "  server app 127.0.0.1:{}\n",
        port, backend_port);
  }
};

// A string field of a JSON object ("" when absent or null).
std::string text_of(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

// ---- Backpressure holds ------------------------------------------------------------

// The entries of a `conveyor serve` log: a line that starts with a date
// starts one; others (a downstream's multi-line body quoted in the message)
// continue it.
std::vector<std::string> log_entries(const std::string& log) {
  static const std::regex entry_start(R"(^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ])");
  std::vector<std::string> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (out.empty() || std::regex_search(line, entry_start))
      out.push_back(line);
    else
      out.back() += "\n" + line;
  }
  return out;
}

struct LoggedHold {
  double ms = 0;
  std::string entry;
};

// The holds `conveyor serve` logged for queue: entries naming "queue <queue>"
// with "held for N ms" (or "N s"), or today's "no dispatch for N ms".
std::vector<LoggedHold> logged_holds(const std::string& log, const std::string& queue) {
  static const std::regex hold_re(
      R"((?:held for|hold of|no dispatch for)\s+([0-9]+(?:\.[0-9]+)?)\s*(ms|s)\b)",
      std::regex::icase);
  const std::string name = "queue " + queue;
  std::vector<LoggedHold> out;
  std::smatch m;
  for (const std::string& entry : log_entries(log)) {
    const size_t at = entry.find(name);
    if (at == std::string::npos) continue;
    const size_t after = at + name.size();
    if (after < entry.size() && (std::isalnum(static_cast<unsigned char>(entry[after])) ||
                                 entry[after] == '.' || entry[after] == '_' || entry[after] == '-'))
      continue;  // another queue whose name starts with this one
    if (!std::regex_search(entry, m, hold_re)) continue;
    const double n = std::stod(m[1].str());
    // The entry's first line (a quoted body may follow) and the hold.
    const std::string first = entry.substr(0, std::min(entry.find('\n'), size_t{200}));
    out.push_back({m[2].str().size() == 2 ? n : n * 1000, first + " [...] " + m.str(0)});
  }
  return out;
}

// Microseconds since the epoch of an RFC 3339 UTC time as the server writes
// it ("2026-01-02T03:04:05[.ffffff]Z"); nullopt for anything else.
std::optional<int64_t> parse_utc(const std::string& text) {
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  int64_t us = static_cast<int64_t>(::timegm(&tm)) * 1'000'000;
  size_t at = static_cast<size_t>(consumed);
  if (at < text.size() && text[at] == '.') {
    int64_t scale = 100'000;
    for (++at; at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])); ++at) {
      us += (text[at] - '0') * scale;
      scale /= 10;
    }
  }
  if (at >= text.size() || text[at] != 'Z') return std::nullopt;
  return us;
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What a run saw of the queue's holds: the server's log, and `conveyor
// queues --json` through the server once a second (its backoff_until: a
// hold that still has more than the cap to go is longer than the cap,
// whatever the log says).
struct HoldObservations {
  std::vector<LoggedHold> logged;
  int polls = 0;
  int polls_held = 0;           // polls that found the queue held
  double longest_to_go_ms = 0;  // the most a poll found left of a hold
  std::string longest_to_go_seen;
};

// The documented cap on a backpressure hold the downstream named no delay
// for. Every hold in these scenarios is either of that kind (nginx names
// none) or 1 s (HAProxy's Retry-After: 1), so no hold may exceed it.
constexpr double kHoldCapMs = 60'000;

// The one place that judges the holds of a run.
void expect_no_hold_over_cap(const HoldObservations& holds) {
  for (const auto& h : holds.logged)
    EXPECT_LE(h.ms, kHoldCapMs) << "a logged hold longer than the 60 s cap: " << h.entry;
  EXPECT_LE(holds.longest_to_go_ms, kHoldCapMs + 1000)  // the poll's own delay
      << "a hold longer than the 60 s cap, seen in `conveyor queues --json`: "
      << holds.longest_to_go_seen;
}

// ---- Throughput scenarios ------------------------------------------------------

constexpr int kJobs = 3000;
constexpr uint32_t kMaxWorkers = 50;
constexpr auto kRun = 60s;
constexpr double kLimiterRate = 20;  // both limiters: 20 requests/s
constexpr double kMinShare = 0.70;   // of what the limiter allows

enum class LimiterKind { kNginx429, kNginx503, kHaproxy429 };

struct QueueLimit {
  std::string label;
  std::string toml;  // the [queues.api] line
};

struct Scenario {
  LimiterKind limiter;
  QueueLimit limit;
};

std::string limiter_name(LimiterKind k) {
  switch (k) {
    case LimiterKind::kNginx429:
      return "nginx limit_req 429";
    case LimiterKind::kNginx503:
      return "nginx limit_req 503";
    case LimiterKind::kHaproxy429:
      return "haproxy 429 Retry-After 1, refusals count";
  }
  return "";
}

void PrintTo(const Scenario& s, std::ostream* os) {
  *os << limiter_name(s.limiter) << ", queue limit " << s.limit.label;
}

// The limiter's burst above its rate, in requests.
double limiter_burst(LimiterKind k) { return k == LimiterKind::kHaproxy429 ? 0 : 5; }
int refusal_status(LimiterKind k) { return k == LimiterKind::kNginx503 ? 503 : 429; }

// `conveyor jobs ls --json` of a queue, every page; nullopt when it fails.
std::optional<nlohmann::json> list_jobs(const std::string& config, const std::string& queue) {
  nlohmann::json jobs = nlohmann::json::array();
  int64_t after = 0;
  for (;;) {
    const auto page =
        test::run_conveyor({"--config", config, "--json", "jobs", "ls", "--queue", queue, "--limit",
                            "1000", "--after", std::to_string(after)});
    if (page.exit_code != 0) return std::nullopt;
    const auto doc = nlohmann::json::parse(page.out);
    for (const auto& j : doc["jobs"]) jobs.push_back(j);
    after = doc["next_after_id"].get<int64_t>();
    if (after == 0) break;
  }
  return jobs;
}

class LimiterThroughput : public testing::TestWithParam<Scenario> {};

TEST_P(LimiterThroughput, DeliversMostOfWhatTheLimiterAllowsAndLosesNoJob) {
  const Scenario s = GetParam();
  Backend backend;
  std::unique_ptr<Limiter> limiter;
  if (s.limiter == LimiterKind::kHaproxy429) {
    REQUIRE_PROGRAM(haproxy, "haproxy");
    limiter = std::make_unique<Haproxy>(haproxy, backend.port());
  } else {
    REQUIRE_PROGRAM(nginx, "nginx");
    limiter = std::make_unique<Nginx>(
        nginx,
        s.limiter == LimiterKind::kNginx429 ? Nginx::Config::kLimit429 : Nginx::Config::kLimit503,
        backend.port());
  }
  ASSERT_TRUE(limiter->ready()) << limiter->diagnostics();

  test::TempDir dir;
  const std::string extra = fmt::format(
      "[engine]\npoll_interval_ms = 100\n"
      "[http]\nallow_hosts = [\"127.0.0.1\"]\n"
      "[queues.api]\nmax_workers = {}\n{}\n"
      "[queues.api.http]\nurl = \"http://127.0.0.1:{}/hook\"\ntimeout_ms = 10000\n",
      kMaxWorkers, s.limit.toml, limiter->port());
  test::ServeProcess serve(dir, extra, "admin_token = \"limiter-test-admin-token\"\n");
  ASSERT_TRUE(serve.ready()) << serve.process().stderr_text();
  const std::string config = (dir / "conveyor.toml").string();

  const auto start = Clock::now();
  const auto enqueued =
      test::run_conveyor({"--config", config, "enqueue", "api", "http", "--payload",
                          R"({"event":"signup"})", "--count", std::to_string(kJobs)});
  ASSERT_EQ(enqueued.exit_code, 0) << enqueued.err;
  // Until the end of the window, once a second: is the queue held, and how
  // much of the hold is left?
  HoldObservations holds;
  const std::string server = fmt::format("http://127.0.0.1:{}", serve.port());
  const std::vector<std::string> token = {"CONVEYOR_ADMIN_TOKEN=limiter-test-admin-token"};
  for (auto next = Clock::now(); next + 1s < start + kRun;) {
    next += 1s;
    std::this_thread::sleep_until(next);
    const auto r = test::run_conveyor({"--server", server, "--json", "queues"}, token);
    if (r.exit_code != 0) continue;
    const auto doc = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_array()) continue;
    ++holds.polls;
    for (const auto& q : doc) {
      if (q.value("queue", "") != "api" || !q.contains("limit")) continue;
      const std::string until = text_of(q["limit"], "backoff_until");
      const auto until_us = parse_utc(until);
      if (!until_us) continue;
      ++holds.polls_held;
      const double to_go_ms = static_cast<double>(*until_us - now_us()) / 1000;
      if (to_go_ms > holds.longest_to_go_ms) {
        holds.longest_to_go_ms = to_go_ms;
        holds.longest_to_go_seen = q["limit"].dump();
      }
    }
  }
  std::this_thread::sleep_until(start + kRun);
  const auto stopped = Clock::now();
  serve.process().signal(SIGTERM);
  EXPECT_EQ(serve.process().wait(60s), 0) << serve.process().stderr_text();
  const std::string serve_log = serve.process().stderr_text();

  // What the limiter let through in the window, as the backend saw it.
  const auto requests = backend.requests();
  size_t delivered = 0, reached_backend = 0;
  double longest_gap_s = 0;
  std::optional<Clock::time_point> previous;
  for (const auto& r : requests) {
    if (r.path != "/hook") continue;
    ++reached_backend;
    if (r.at > stopped) continue;
    ++delivered;
    longest_gap_s = std::max(
        longest_gap_s, std::chrono::duration<double>(r.at - previous.value_or(start)).count());
    previous = r.at;
  }
  longest_gap_s = std::max(
      longest_gap_s, std::chrono::duration<double>(stopped - previous.value_or(start)).count());
  const double window_s = std::chrono::duration<double>(stopped - start).count();
  const double allowed = kLimiterRate * window_s + limiter_burst(s.limiter);
  const auto statuses = limiter->statuses();
  const auto count_of = [&](int status) {
    auto it = statuses.find(status);
    return it == statuses.end() ? size_t{0} : it->second;
  };
  const size_t refusals = count_of(refusal_status(s.limiter));
  size_t others = 0;  // answers neither 200 nor the refusal
  for (const auto& [status, n] : statuses)
    if (status != 200 && status != refusal_status(s.limiter)) others += n;

  // The jobs, from storage (the server has stopped).
  const auto queues = test::run_conveyor({"--config", config, "--json", "queues"});
  ASSERT_EQ(queues.exit_code, 0) << queues.err;
  nlohmann::json api;
  for (const auto& q : nlohmann::json::parse(queues.out))
    if (q["queue"] == "api") api = q;
  ASSERT_TRUE(api.is_object()) << queues.out;
  const auto n = [&](const char* state) { return api.value(state, int64_t{0}); };
  holds.logged = logged_holds(serve_log, "api");
  double longest_hold_ms = 0;
  for (const auto& h : holds.logged) longest_hold_ms = std::max(longest_hold_ms, h.ms);

  std::cout
      << fmt::format(
             "[limiter] {} | queue limit {} | delivered {} of {:.0f} allowed in {:.1f} s "
             "= {:.1f}% | limiter answered {} x {}, {} x 200, {} other; backend got {} in all | "
             "jobs completed {}, "
             "pending {}, scheduled {}, running {}, failed {} | holds logged {}, longest "
             "{:.0f} ms; held at {} of {} polls, longest to go {:.1f} s | longest gap between "
             "deliveries {:.1f} s",
             limiter_name(s.limiter), s.limit.label, delivered, allowed, window_s,
             100.0 * static_cast<double>(delivered) / allowed, refusals, refusal_status(s.limiter),
             count_of(200), others, reached_backend, n("completed"), n("pending"), n("scheduled"),
             n("running"), n("failed"), holds.logged.size(), longest_hold_ms, holds.polls_held,
             holds.polls, holds.longest_to_go_ms / 1000, longest_gap_s)
      << std::endl;

  // The harness itself: the limiter pushed back, and let through what it said.
  EXPECT_GT(refusals, 0u) << "the limiter never refused: the scenario proves nothing; "
                          << limiter->diagnostics();
  EXPECT_LE(static_cast<double>(delivered), allowed * 1.1)
      << "more than the limiter should allow: is it limiting?";

  // Delivery keeps up with the limiter.
  EXPECT_GE(static_cast<double>(delivered), kMinShare * allowed)
      << "delivered " << delivered << " of the " << allowed << " the limiter allows in " << window_s
      << " s";

  // No job lost, none failed; every completed job reached the backend.
  EXPECT_EQ(n("completed") + n("pending") + n("scheduled") + n("running"), kJobs) << api.dump();
  EXPECT_EQ(n("failed"), 0) << api.dump();
  EXPECT_EQ(n("cancelled"), 0) << api.dump();
  EXPECT_LE(n("completed"), static_cast<int64_t>(reached_backend));
  if (n("failed") > 0) {
    const auto failed = test::run_conveyor(
        {"--config", config, "--json", "jobs", "ls", "--queue", "api", "--state", "failed"});
    ADD_FAILURE() << "failed jobs: " << failed.out;
  }

  expect_no_hold_over_cap(holds);
}

std::vector<Scenario> throughput_scenarios() {
  const std::vector<QueueLimit> limits = {
      {"none", ""},
      {"rate 20", "rate_limit = { rate = 20 }"},
      {"rate 100 burst 10", "rate_limit = { rate = 100, burst = 10 }"},
  };
  std::vector<Scenario> out;
  for (LimiterKind k : {LimiterKind::kNginx429, LimiterKind::kNginx503, LimiterKind::kHaproxy429})
    for (const auto& l : limits) out.push_back({k, l});
  return out;
}

std::string scenario_name(const testing::TestParamInfo<Scenario>& info) {
  const char* limiter = info.param.limiter == LimiterKind::kNginx429   ? "Nginx429"
                        : info.param.limiter == LimiterKind::kNginx503 ? "Nginx503"
                                                                       : "Haproxy429";
  std::string limit;
  for (char c : info.param.limit.label)
    if (std::isalnum(static_cast<unsigned char>(c))) limit += c;
  return std::string(limiter) + "_QueueLimit_" + limit;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, LimiterThroughput, testing::ValuesIn(throughput_scenarios()),
                         scenario_name);

// ---- Redirects -------------------------------------------------------------------

struct RedirectCase {
  int status;
  std::string method;
};

void PrintTo(const RedirectCase& c, std::ostream* os) { *os << c.method << " to /r" << c.status; }

class NginxRedirect : public testing::TestWithParam<RedirectCase> {};

TEST_P(NginxRedirect, DeliversTheSameMethodAndBodyOrFailsSayingWhy) {
  const RedirectCase c = GetParam();
  REQUIRE_PROGRAM(nginx_program, "nginx");
  Backend backend;
  Nginx nginx(nginx_program, Nginx::Config::kRedirects, backend.port());
  ASSERT_TRUE(nginx.ready()) << nginx.diagnostics();

  const std::string queue = fmt::format("redirect{}{}", c.status, c.method);
  test::TempDir dir;
  const std::string extra = fmt::format(
      "[http]\nallow_hosts = [\"127.0.0.1\"]\n"
      "[queues.{0}.http]\nurl = \"http://127.0.0.1:{1}/r{2}\"\nfollow_redirects = true\n"
      "timeout_ms = 10000\n{3}",
      queue, nginx.port(), c.status, c.method == "POST" ? "" : "method = \"" + c.method + "\"\n");
  test::ServeProcess serve(dir, extra, "admin_token = \"redirect-test-admin-token\"\n");
  ASSERT_TRUE(serve.ready()) << serve.process().stderr_text();
  const std::string config = (dir / "conveyor.toml").string();

  const std::string payload =
      fmt::format(R"({{"test":"redirect","status":{},"method":"{}","marker":"conveyor-{}-{}"}})",
                  c.status, c.method, ::getpid(), queue);
  // One attempt: the outcome is final at once, whatever it is.
  const auto enqueued = test::run_conveyor(
      {"--config", config, "enqueue", queue, "http", "--payload", payload, "--max-attempts", "1"});
  ASSERT_EQ(enqueued.exit_code, 0) << enqueued.err;

  nlohmann::json job;
  ASSERT_TRUE(test::wait_until(
      [&] {
        const auto jobs = list_jobs(config, queue);
        if (!jobs || jobs->size() != 1) return false;
        job = (*jobs)[0];
        return job["state"] == "completed" || job["state"] == "failed";
      },
      60s))
      << "the job did not end: " << job.dump() << "\n"
      << serve.process().stderr_text();
  serve.process().signal(SIGTERM);
  EXPECT_EQ(serve.process().wait(), 0) << serve.process().stderr_text();

  const auto requests = backend.requests();
  std::string received;
  for (const auto& r : requests)
    received += fmt::format("\n  {} {} body '{}'", r.method, r.path, r.body);
  const auto statuses = nginx.statuses();
  std::string answers;
  for (const auto& [status, n] : statuses) answers += fmt::format(" {} x {}", n, status);
  std::cout << fmt::format(
                   "[redirect] {} {}: job {} (last_error '{}'); nginx answered{}; the "
                   "backend received {} request(s){}",
                   c.method, c.status, text_of(job, "state"), text_of(job, "last_error"), answers,
                   requests.size(), received)
            << std::endl;

  const auto expected_body = nlohmann::json::parse(payload);
  if (job["state"] == "completed") {
    // Completed: the backend got the job's call, as configured, at /final.
    ASSERT_FALSE(requests.empty()) << "completed, yet the backend received nothing";
    for (const auto& r : requests) {
      EXPECT_EQ(r.path, "/final");
      EXPECT_EQ(r.method, c.method)
          << "completed, yet the redirect turned " << c.method << " into " << r.method;
      EXPECT_FALSE(r.body.empty()) << "completed, yet the backend got no body";
      const auto body = nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
      EXPECT_EQ(body, expected_body) << "completed, yet the backend got another body: " << r.body;
    }
  } else {
    // Failed: its last_error says why, naming the redirect.
    const std::string error = text_of(job, "last_error");
    std::string lower = error;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    EXPECT_TRUE(lower.find("redirect") != std::string::npos ||
                lower.find(std::to_string(c.status)) != std::string::npos)
        << "failed without naming the redirect: '" << error << "'\n"
        << nginx.diagnostics();
  }
}

std::vector<RedirectCase> redirect_cases() {
  std::vector<RedirectCase> out;
  for (int status : {301, 302, 303, 307, 308})
    for (const char* method : {"POST", "PUT"}) out.push_back({status, method});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Statuses, NginxRedirect, testing::ValuesIn(redirect_cases()),
                         [](const testing::TestParamInfo<RedirectCase>& info) {
                           return fmt::format("{}_{}", info.param.method, info.param.status);
                         });

}  // namespace
}  // namespace conveyor
