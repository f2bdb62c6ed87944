// remote_drain: remote workers against the in-process drain on one backend.
// Built as build/bin/conveyor-remote-bench:
//   conveyor-remote-bench CONFIG.toml [--jobs N] [--clients C] [--batch B]
//                         [--repeat R] [--idle-pollers P]
// CONFIG names the storage ([storage], as for `conveyor serve`); every run
// uses a fresh queue, so nothing needs wiping. Per repeat, interleaved:
//   in-process: an engine with a noop handler drains N jobs;
//   remote:     an engine with no handler for the kind and the admin server
//               on 127.0.0.1; C client threads, each a keep-alive HTTP/1.1
//               connection, loop Claim(maxJobs=B, binary protobuf) then
//               Complete(all its leases) until N jobs are completed.
// Then, with --idle-pollers P, P connections each hold a Claim long-poll
// (30 s, a kind nobody enqueues) and the process's threads and RSS are
// printed before and while they wait (the pollers are sockets here, no
// threads). Medians and the spread are printed at the end.
#include <conveyor/admin_server.hpp>
#include <conveyor/config.hpp>
#include <conveyor/engine.hpp>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "conveyor/v1/worker.pb.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kToken = "bench-worker-token";
constexpr const char* kKind = "bench_noop";

uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

void enqueue(conveyor::Engine& engine, const std::string& queue, int jobs) {
  for (int done = 0; done < jobs;) {
    std::vector<conveyor::NewJob> batch;
    const int n = std::min(1000, jobs - done);
    for (int i = 0; i < n; ++i) {
      conveyor::NewJob j;
      j.queue = queue;
      j.kind = kKind;
      j.payload = "{}";
      batch.push_back(std::move(j));
    }
    engine.enqueue_batch(std::move(batch));
    done += n;
  }
}

int64_t completed(conveyor::Engine& engine, const std::string& queue) {
  for (const auto& s : engine.job_counts())
    if (s.queue == queue) return s.completed;
  return 0;
}

conveyor::Config config_for(const conveyor::Config& base, const std::string& queue) {
  conveyor::Config c = base;
  c.queues[queue].max_workers = 1000;
  return c;
}

double in_process(const conveyor::Config& base, const std::string& queue, int jobs) {
  conveyor::Engine engine(config_for(base, queue));
  engine.register_handler(kKind, [](const conveyor::Job&) {});
  enqueue(engine, queue, jobs);
  const auto start = Clock::now();
  engine.start();
  while (completed(engine, queue) < jobs) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  engine.stop();
  return jobs / s;
}

// One remote worker: claim a batch, complete it, until the queue is drained.
// finished: when the last job was completed (set by the worker that completed it).
void remote_worker(uint16_t port, const std::string& queue, int batch, std::atomic<int64_t>& done,
                   int64_t jobs, std::atomic<int64_t>& finished_ns) {
  httplib::Client client("127.0.0.1", port);
  client.set_keep_alive(true);
  client.set_tcp_nodelay(true);
  client.set_read_timeout(40, 0);
  const httplib::Headers headers{{"Authorization", std::string("Bearer ") + kToken}};
  conveyor::v1::ClaimRequest claim;
  claim.add_queues()->set_queue(queue);
  claim.add_kinds(kKind);
  claim.set_max_jobs(static_cast<uint32_t>(batch));
  claim.set_wait_seconds(1);
  const std::string claim_body = claim.SerializeAsString();
  while (done.load() < jobs) {
    auto r =
        client.Post("/conveyor.v1.WorkerService/Claim", headers, claim_body, "application/proto");
    if (!r || r->status != 200) {
      spdlog::error("claim failed: {}", r ? r->body : httplib::to_string(r.error()));
      return;
    }
    conveyor::v1::ClaimResponse got;
    got.ParseFromString(r->body);
    if (got.jobs_size() == 0) continue;
    conveyor::v1::CompleteRequest complete;
    for (const auto& j : got.jobs()) *complete.add_leases() = j.lease();
    auto c = client.Post("/conveyor.v1.WorkerService/Complete", headers,
                         complete.SerializeAsString(), "application/proto");
    if (!c || c->status != 200) {
      spdlog::error("complete failed: {}", c ? c->body : httplib::to_string(c.error()));
      return;
    }
    const int64_t before = done.fetch_add(got.jobs_size());
    if (before < jobs && before + got.jobs_size() >= jobs)
      finished_ns = Clock::now().time_since_epoch().count();
  }
}

struct Server {
  Server(const conveyor::Config& base, const std::string& queue)
      : engine(config_for(base, queue)), port(free_port()) {
    conveyor::ServerConfig s;
    s.listen = fmt::format("127.0.0.1:{}", port);
    s.admin_token = "bench-admin-token";
    s.worker_token = kToken;
    server = std::make_unique<conveyor::AdminServer>(engine, s);
  }
  conveyor::Engine engine;
  uint16_t port;
  std::unique_ptr<conveyor::AdminServer> server;
};

double remote(const conveyor::Config& base, const std::string& queue, int jobs, int clients,
              int batch) {
  Server s(base, queue);
  enqueue(s.engine, queue, jobs);
  s.engine.start();
  s.server->start();
  std::atomic<int64_t> done{0}, finished_ns{0};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i)
    threads.emplace_back(remote_worker, s.port, queue, batch, std::ref(done), jobs,
                         std::ref(finished_ns));
  // The others' last claims wait out their long-poll: not part of the drain.
  for (auto& t : threads) t.join();
  if (completed(s.engine, queue) < jobs) spdlog::error("remote drain: jobs left over");
  const double secs =
      std::chrono::duration<double>(Clock::time_point(Clock::duration(finished_ns.load())) - start)
          .count();
  s.server->stop();
  s.engine.stop();
  return jobs / secs;
}

// "Threads" and "VmRSS" of /proc/self/status.
std::pair<long, long> threads_and_rss_kb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  long threads = 0, rss = 0;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) threads = std::stol(line.substr(8));
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stol(line.substr(6));
  }
  return {threads, rss};
}

void idle_pollers(const conveyor::Config& base, int pollers) {
  Server s(base, "bench-idle");
  s.engine.start();
  s.server->start();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto [threads0, rss0] = threads_and_rss_kb();
  conveyor::v1::ClaimRequest claim;
  claim.add_queues()->set_queue("bench-idle");
  claim.add_kinds("never_enqueued");
  claim.set_max_jobs(10);
  claim.set_wait_seconds(30);
  const std::string body = claim.SerializeAsString();
  const std::string request = fmt::format(
      "POST /conveyor.v1.WorkerService/Claim HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "
      "Bearer {}\r\nContent-Type: application/proto\r\nContent-Length: {}\r\n\r\n{}",
      kToken, body.size(), body);
  std::vector<int> fds;
  for (int i = 0; i < pollers; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(s.port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      spdlog::error("poller {}: connect failed", i);
      ::close(fd);
      continue;
    }
    (void)!::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const auto [threads1, rss1] = threads_and_rss_kb();
  fmt::print(
      "idle pollers: {} long-polls waiting; process threads {} -> {}, RSS {:.1f} -> {:.1f} MiB "
      "(+{:.1f} KiB per poller)\n",
      fds.size(), threads0, threads1, rss0 / 1024.0, rss1 / 1024.0,
      fds.empty() ? 0.0 : static_cast<double>(rss1 - rss0) / static_cast<double>(fds.size()));
  for (int fd : fds) ::close(fd);
  s.server->stop();
  s.engine.stop();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr,
               "usage: conveyor-remote-bench CONFIG.toml [--jobs N] [--clients C] [--batch B] "
               "[--repeat R] [--idle-pollers P]\n");
    return 2;
  }
  int jobs = 50000, clients = 4, batch = 100, repeat = 3, pollers = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (flag == "--jobs")
      jobs = v;
    else if (flag == "--clients")
      clients = v;
    else if (flag == "--batch")
      batch = v;
    else if (flag == "--repeat")
      repeat = v;
    else if (flag == "--idle-pollers")
      pollers = v;
    else {
      fmt::print(stderr, "unknown option {}\n", flag);
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::warn);
  const conveyor::Config base = conveyor::load_config_file(argv[1]);
  const std::string run = std::to_string(::getpid());
  std::vector<double> local, far;
  for (int r = 0; r < repeat; ++r) {
    local.push_back(in_process(base, fmt::format("bench-{}-local-{}", run, r), jobs));
    far.push_back(remote(base, fmt::format("bench-{}-remote-{}", run, r), jobs, clients, batch));
    fmt::print("repeat {}: in-process {:.0f} jobs/s, remote {:.0f} jobs/s ({:.0f}%)\n", r + 1,
               local.back(), far.back(), 100 * far.back() / local.back());
  }
  const auto [lmin, lmax] = std::minmax_element(local.begin(), local.end());
  const auto [rmin, rmax] = std::minmax_element(far.begin(), far.end());
  fmt::print(
      "storage {}: {} jobs, remote {} clients x batch {}; in-process median {:.0f} jobs/s "
      "({:.0f}-{:.0f}), remote median {:.0f} jobs/s ({:.0f}-{:.0f}): remote/in-process {:.0f}%\n",
      base.storage.plugin, jobs, clients, batch, median(local), *lmin, *lmax, median(far), *rmin,
      *rmax, 100 * median(far) / median(local));
  if (pollers > 0) idle_pollers(base, pollers);
  return 0;
}
