// Slow and idle clients against a real `conveyor serve`: with 1,000 idle TCP
// connections held open (reopened as the server closes them), some that
// send half a header and stall, and a POST whose body never comes, another
// client's ListQueues is answered in under a second throughout; the stalled
// ones are closed with 408 by their deadlines; above the connection cap a
// connection is refused with 503; the server's thread count does not grow.
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kIdle = 1000;
constexpr int kStalledHeaders = 10;
const std::string kListQueues = "/conveyor.v1.AdminService/ListQueues";

using test::connect_loopback;
using test::send_all;

// What a socket has to read now, without waiting; closed on EOF or reset.
struct Drained {
  std::string data;
  bool closed = false;
};
Drained drain(int fd) {
  Drained d;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      d.data.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) d.closed = true;
    return d;
  }
}

int threads_of(int pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

// A socket the server should close at a deadline, and what it said.
struct Stalled {
  int fd = -1;
  Clock::time_point sent;
  std::string got;
  bool closed = false;
  Clock::duration closed_after{};
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

TEST(AdminSlowClients, ServesWithAThousandIdleAndSlowConnectionsOpen) {
  // Descriptors for ~1,100 sockets here, and for the server (which inherits
  // the limit and raises its own soft limit as far as its cap needs).
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  const rlim_t wanted = 4096;
  if (limit.rlim_cur < wanted) {
    limit.rlim_cur = std::min(wanted, limit.rlim_max);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  }
  ASSERT_GE(limit.rlim_cur, 1400u) << "the hard RLIMIT_NOFILE is too low for this test; raise it";

  test::TempDir dir;
  test::ServeProcess s(dir, "[engine]\npoll_interval_ms = 50\n", "allow_unauthenticated = true\n");
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  const uint16_t port = s.port();
  std::smatch cap_match;
  const std::string log = s.process().stderr_text();
  ASSERT_TRUE(std::regex_search(log, cap_match, std::regex("at most (\\d+) connections"))) << log;
  const int cap = std::stoi(cap_match[1]);
  ASSERT_GT(cap, kIdle + kStalledHeaders + 5) << "the server's cap leaves no room for the test";
  // One call first: what the first request starts is not counted below.
  ASSERT_EQ(test::http_send(port, test::http_request("POST", kListQueues,
                                                     {"Content-Type: application/json"}, "{}"))
                .status,
            200);
  const int threads_before = threads_of(s.process().pid());

  std::vector<int> idle(kIdle);
  for (int& fd : idle) {
    fd = connect_loopback(port);
    ASSERT_GE(fd, 0) << "connect: " << std::strerror(errno);
  }
  std::vector<Stalled> stalled;
  for (int i = 0; i < kStalledHeaders; ++i) {
    Stalled st;
    st.fd = connect_loopback(port);
    st.sent = Clock::now();
    ASSERT_GE(st.fd, 0);
    send_all(st.fd, "POST " + kListQueues + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty");
    stalled.push_back(st);
  }
  Stalled no_body;
  no_body.fd = connect_loopback(port);
  no_body.sent = Clock::now();
  ASSERT_GE(no_body.fd, 0);
  send_all(no_body.fd, "POST " + kListQueues +
                           " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: 2\r\n\r\n");

  const auto watch = [](Stalled& st) {
    if (st.closed) return;
    Drained d = drain(st.fd);
    st.got += d.data;
    if (d.closed) {
      st.closed = true;
      st.closed_after = Clock::now() - st.sent;
    }
  };

  // Probe ListQueues every ~100 ms until the bodiless POST has been closed
  // (its 30 s body deadline), reopening idle sockets the server closes
  // (their 10 s header deadline), as a client that keeps 1,000 open would.
  std::vector<double> latencies_ms;
  int reopened = 0;
  int threads_with_idle = -1;
  const auto start = Clock::now();
  while (!no_body.closed && Clock::now() - start < 45s) {
    const auto t0 = Clock::now();
    const auto r = test::http_send(
        port, test::http_request("POST", kListQueues, {"Content-Type: application/json"}, "{}"));
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    latencies_ms.push_back(ms);
    EXPECT_EQ(r.status, 200) << "probe " << latencies_ms.size() << ": " << r.body;
    EXPECT_LT(ms, 1000.0) << "probe " << latencies_ms.size() << " took " << ms << " ms";
    if (threads_with_idle < 0) threads_with_idle = threads_of(s.process().pid());

    std::vector<pollfd> fds;
    for (int fd : idle) fds.push_back({fd, POLLIN, 0});
    ASSERT_GE(::poll(fds.data(), fds.size(), 0), 0);
    for (size_t i = 0; i < idle.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const Drained d = drain(idle[i]);
      // A connection that never sent a byte is closed without an answer.
      EXPECT_EQ(d.data, "");
      if (!d.closed) continue;
      ::close(idle[i]);
      idle[i] = connect_loopback(port);
      ASSERT_GE(idle[i], 0) << "reconnect: " << std::strerror(errno);
      ++reopened;
    }
    for (Stalled& st : stalled) watch(st);
    watch(no_body);
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(no_body.closed) << "the POST without its body was not closed in 45 s";

  for (const Stalled& st : stalled) {
    EXPECT_TRUE(st.closed);
    EXPECT_EQ(st.got.rfind("HTTP/1.1 408 ", 0), 0u) << st.got;
    EXPECT_NE(st.got.find("header did not arrive within 10 s"), std::string::npos) << st.got;
    EXPECT_GE(st.closed_after, 9500ms);
    EXPECT_LT(st.closed_after, 13s);
  }
  EXPECT_EQ(no_body.got.rfind("HTTP/1.1 408 ", 0), 0u) << no_body.got;
  EXPECT_NE(no_body.got.find("body did not arrive within 30 s"), std::string::npos) << no_body.got;
  EXPECT_GE(no_body.closed_after, 29500ms);
  EXPECT_LT(no_body.closed_after, 33s);
  // Idle sockets were closed at their deadline (~10 s) and reopened.
  EXPECT_GE(reopened, kIdle);

  // No thread per connection: the same threads with 1,000 sockets open.
  EXPECT_GT(threads_before, 0);
  EXPECT_LE(threads_with_idle, threads_before);

  // Fill the server past its cap: the connections over it get a 503. The
  // idle sockets are reopened first, so none reaches its deadline meanwhile.
  for (int& fd : idle) {
    ::close(fd);
    fd = connect_loopback(port);
    ASSERT_GE(fd, 0);
  }
  std::vector<int> extra;
  for (int i = 0; i < cap - kIdle + 20; ++i) {
    extra.push_back(connect_loopback(port));
    ASSERT_GE(extra.back(), 0);
  }
  int refused = 0;
  std::string refusal;
  test::wait_until(
      [&] {
        for (int& fd : extra) {
          if (fd < 0) continue;
          pollfd p{fd, POLLIN, 0};
          if (::poll(&p, 1, 0) <= 0) continue;
          const Drained d = drain(fd);
          if (d.data.empty()) continue;
          refusal = d.data;
          ++refused;
          ::close(fd);
          fd = -1;
        }
        return refused >= 20;
      },
      5s);
  // 20 over the cap (more if the server has not seen all the closes yet).
  EXPECT_GE(refused, 20);
  EXPECT_EQ(refusal.rfind("HTTP/1.1 503 ", 0), 0u) << refusal;
  EXPECT_NE(refusal.find("Content-Type: application/json\r\n"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("\"code\":\"unavailable\""), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("connections open, its limit; retry later"), std::string::npos) << refusal;

  // With the extra ones gone there is room again.
  for (int fd : extra)
    if (fd >= 0) ::close(fd);
  EXPECT_TRUE(test::wait_until([&] {
    return test::http_send(port, test::http_request("POST", kListQueues,
                                                    {"Content-Type: application/json"}, "{}"))
               .status == 200;
  }));

  std::cout << "threads: " << threads_before << " before, " << threads_with_idle << " with "
            << kIdle << " idle sockets; ListQueues over " << latencies_ms.size() << " probes: p50 "
            << percentile(latencies_ms, 0.50) << " ms, p99 " << percentile(latencies_ms, 0.99)
            << " ms, max " << percentile(latencies_ms, 1.0) << " ms; " << reopened
            << " idle reopened, " << refused << " refused over cap " << cap << "\n";

  for (int fd : idle) ::close(fd);
  for (const Stalled& st : stalled) ::close(st.fd);
  ::close(no_body.fd);
}

}  // namespace
}  // namespace conveyor
