#include "testing/raw_http_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <deque>
#include <map>
#include <stdexcept>
#include <vector>

namespace conveyor::http_delivery::testing {
namespace {

struct Connection {
  std::string in;
  std::string out;
  size_t body_left = 0;  // streamed body still to write after `out`
  bool held = false;
  bool close_when_sent = false;  // a short response: hang up once it is out
};

// The length of the first complete request in buf, or 0 if incomplete.
size_t complete_request(const std::string& buf) {
  size_t end = buf.find("\r\n\r\n");
  if (end == std::string::npos) return 0;
  std::string head = buf.substr(0, end);
  std::transform(head.begin(), head.end(), head.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  size_t length = 0;
  size_t at = head.find("\r\ncontent-length:");
  if (at != std::string::npos) length = std::stoul(head.substr(at + 17));
  size_t total = end + 4 + length;
  return buf.size() >= total ? total : 0;
}

}  // namespace

RawHttpServer::RawHttpServer(Options options) : options_(options) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listen_fd_, 4096) != 0) {
    throw std::runtime_error("RawHttpServer: bind/listen on 127.0.0.1 failed");
  }
  socklen_t len = sizeof addr;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("pipe2 failed");
  thread_ = std::thread([this] { run(); });
}

RawHttpServer::~RawHttpServer() {
  char c = 1;
  (void)!write(wake_[1], &c, 1);
  thread_.join();
  close(listen_fd_);
  close(wake_[0]);
  close(wake_[1]);
}

void RawHttpServer::run() {
  std::map<int, Connection> conns;
  std::vector<int> held;
  // answer_after: (when due, connection), in arrival order (one delay for all).
  std::deque<std::pair<std::chrono::steady_clock::time_point, int>> delayed;
  std::string chunk(64 * 1024, 'x');
  auto respond = [&](Connection& c) {
    c.out += "HTTP/1.1 200 OK\r\nContent-Length: " +
             std::to_string(options_.body_bytes + options_.short_by) + "\r\n\r\n";
    c.body_left = options_.body_bytes;
    c.close_when_sent = options_.short_by > 0;
  };
  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& [fd, c] : conns) {
      short events = POLLIN;
      if (!c.out.empty() || c.body_left > 0) events |= POLLOUT;
      fds.push_back({fd, events, 0});
    }
    int timeout_ms = -1;
    if (!delayed.empty()) {
      const auto wait = delayed.front().first - std::chrono::steady_clock::now();
      timeout_ms = static_cast<int>(
          std::max<int64_t>(0, std::chrono::ceil<std::chrono::milliseconds>(wait).count()));
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0) continue;
    if (fds[0].revents != 0) break;
    if (fds[1].revents & POLLIN) {
      for (;;) {
        int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        if (options_.send_buffer > 0) {
          setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &options_.send_buffer, sizeof(int));
        }
        connections_.fetch_add(1);
        conns.emplace(fd, Connection{});
        max_open_.store(std::max(max_open_.load(), conns.size()));
      }
    }
    std::vector<int> closed;
    for (size_t i = 2; i < fds.size(); ++i) {
      int fd = fds[i].fd;
      Connection& c = conns[fd];
      bool dead = false;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[16 * 1024];
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
          dead = true;
        } else {
          c.in.append(buf, static_cast<size_t>(n));
          while (size_t len = complete_request(c.in)) {
            c.in.erase(0, len);
            requests_.fetch_add(1);
            if (options_.never_answer) continue;
            if (options_.answer_after.count() > 0) {
              delayed.emplace_back(std::chrono::steady_clock::now() + options_.answer_after, fd);
              max_held_.store(std::max(max_held_.load(), delayed.size()));
              continue;
            }
            if (options_.hold_until > 0) {
              c.held = true;
              held.push_back(fd);
              max_held_.store(std::max(max_held_.load(), held.size()));
              if (held.size() >= options_.hold_until) {
                for (int h : held) {
                  if (conns.count(h) != 0) respond(conns[h]);
                }
                held.clear();
              }
            } else {
              respond(c);
            }
          }
        }
      }
      if (!dead && (fds[i].revents & POLLOUT)) {
        while (!c.out.empty() || c.body_left > 0) {
          const char* data;
          size_t size;
          bool body = c.out.empty();
          if (body) {
            data = chunk.data();
            size = std::min(chunk.size(), c.body_left);
          } else {
            data = c.out.data();
            size = c.out.size();
          }
          ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
          if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) dead = true;
            break;
          }
          if (body) {
            c.body_left -= static_cast<size_t>(n);
            body_sent_.fetch_add(static_cast<size_t>(n));
          } else {
            c.out.erase(0, static_cast<size_t>(n));
          }
        }
      }
      if (!dead && c.close_when_sent && c.out.empty() && c.body_left == 0) {
        if (options_.reset_when_short) {
          linger reset{1, 0};  // close() then sends RST, not FIN
          setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
        }
        closed.push_back(fd);
        continue;
      }
      if (dead) {
        if (!c.out.empty() || c.body_left > 0) cut_short_.fetch_add(1);
        closed.push_back(fd);
      }
    }
    for (int fd : closed) {
      if (conns[fd].held) std::erase(held, fd);
      std::erase_if(delayed, [fd](const auto& d) { return d.second == fd; });
      close(fd);
      conns.erase(fd);
    }
    const auto now = std::chrono::steady_clock::now();
    while (!delayed.empty() && delayed.front().first <= now) {
      respond(conns.at(delayed.front().second));  // written when poll says it can be
      delayed.pop_front();
    }
  }
  for (auto& [fd, c] : conns) close(fd);
}

}  // namespace conveyor::http_delivery::testing
