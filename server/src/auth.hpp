// Who may call the API: bearer tokens, compared in constant time, and the
// rules of admin_server.hpp ("Access").
#pragma once

#include <conveyor/api_error.hpp>
#include <conveyor/config.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace conveyor {

// a == b, taking time that depends only on the lengths, not on where they differ.
bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

class Authenticator {
 public:
  explicit Authenticator(const ServerConfig& config);
  // The error to answer a request for path with this Authorization header
  // value (nullopt when the header is absent), or nullopt when the call may
  // proceed. A configured token is always required, whatever
  // allow_unauthenticated says. The admin token may call everything; the
  // worker token only the paths worker_may_call accepts.
  std::optional<ApiError> check(std::optional<std::string_view> authorization,
                                std::string_view path = {}) const;
  // WorkerService's methods and TaskService's Enqueue, EnqueueBatch, GetJob.
  static bool worker_may_call(std::string_view path);
  // The error for a request with this Host header (nullopt when absent), or
  // nullopt. Only an unauthenticated server checks it: a browser page from
  // another site can reach a loopback server through a DNS name it controls
  // (DNS rebinding) and would send that name as Host. Accepted: loopback names
  // and addresses, IP literals (no rebinding through them), the listen host.
  std::optional<ApiError> check_host(std::optional<std::string_view> host) const;

 private:
  std::string token_;
  std::string worker_token_;
  bool allow_unauthenticated_;
  std::string listen_host_;  // lower case, without brackets; "" when unknown
};

}  // namespace conveyor
