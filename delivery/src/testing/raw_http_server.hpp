// A minimal HTTP/1.1 server on raw sockets, one poll() thread, for tests
// that need what cpp-httplib's thread-pool server cannot do: never answer,
// hold a thousand requests open at once, answer each a second late, stream a
// huge body, count connections. Keep-alive: several requests may arrive on one connection.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>

namespace conveyor::http_delivery::testing {

class RawHttpServer {
 public:
  struct Options {
    // Answer nothing (the client must time out).
    bool never_answer = false;
    // Hold every request until this many are held at once, then answer all
    // (0: answer each at once).
    size_t hold_until = 0;
    // A 200 response whose body is this many bytes, written as fast as the
    // client reads (0: an empty 200 response).
    size_t body_bytes = 0;
    // SO_SNDBUF for accepted connections (0: the system's default).
    int send_buffer = 0;
    // Answer each request this long after it arrived (0: at once); the
    // requests waiting count as held (max_held).
    std::chrono::milliseconds answer_after{0};
    // > 0: the response's Content-Length promises this many bytes more than
    // body_bytes; the server sends body_bytes and then closes the connection
    // (with a reset when reset_when_short, else an orderly close).
    size_t short_by = 0;
    bool reset_when_short = false;
  };

  explicit RawHttpServer(Options options);
  ~RawHttpServer();
  RawHttpServer(const RawHttpServer&) = delete;
  RawHttpServer& operator=(const RawHttpServer&) = delete;

  int port() const { return port_; }
  size_t connections_accepted() const { return connections_.load(); }
  size_t requests_seen() const { return requests_.load(); }
  size_t max_held() const { return max_held_.load(); }
  // The most connections that were open at once.
  size_t max_open() const { return max_open_.load(); }
  size_t body_bytes_sent() const { return body_sent_.load(); }
  // Connections the client closed (or reset) before its response was all sent.
  size_t cut_short() const { return cut_short_.load(); }

 private:
  void run();

  Options options_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<size_t> connections_{0}, requests_{0}, max_held_{0}, body_sent_{0}, cut_short_{0},
      max_open_{0};
  std::thread thread_;
};

}  // namespace conveyor::http_delivery::testing
