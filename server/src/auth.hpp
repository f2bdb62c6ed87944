// Who may call the API: bearer tokens, compared in constant time, and the
// rules of admin_server.hpp ("Access").
#pragma once

#include <conveyor/api_error.hpp>
#include <conveyor/config.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor {

// a == b, taking time that depends only on the lengths, not on where they differ.
bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

// The worker method a path is, or nullopt for every other path (admin only):
// WorkerService's five methods, TaskService's Enqueue and EnqueueBatch
// (enqueue) and GetJob (get_job).
std::optional<WorkerMethod> worker_method_of(std::string_view path);

// What a worker token may do. The methods refuse what it does not cover with
// ApiError(kPermissionDenied) naming the token (never the secret) and what
// it lacks.
struct WorkerScope {
  std::string name;  // the token's NAME; "" for the legacy [server] worker_token
  bool every_queue = true;
  std::vector<std::string> queues;  // sorted; unless every_queue
  uint32_t methods = kAllWorkerMethods;
  std::optional<std::chrono::milliseconds> max_backpressure;

  static WorkerScope of(const WorkerTokenConfig& token);
  // "worker token \"NAME\"", or "the worker token ([server] worker_token)".
  std::string who() const;
  bool covers(std::string_view queue) const;
  // Throws unless the token may call method.
  void require(WorkerMethod method) const;
  // Throws unless the token may act on queue; what says on what ("claim from").
  void require_queue(std::string_view queue, std::string_view what) const;
};

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
  // As check, and for a worker token also its scope (nullopt: the admin
  // token or an open server, who may do everything).
  struct Access {
    std::optional<ApiError> error;
    std::optional<WorkerScope> scope;
  };
  Access authorize(std::optional<std::string_view> authorization, std::string_view path = {}) const;
  // WorkerService's methods and TaskService's Enqueue, EnqueueBatch, GetJob.
  static bool worker_may_call(std::string_view path);
  // The error for a request with this Host header (nullopt when absent), or
  // nullopt. Only an unauthenticated server checks it: a browser page from
  // another site can reach a loopback server through a DNS name it controls
  // (DNS rebinding) and would send that name as Host. Accepted: loopback names
  // and addresses, IP literals (no rebinding through them), the listen host.
  std::optional<ApiError> check_host(std::optional<std::string_view> host) const;

 private:
  // The admin token's rules (after no worker token matched).
  std::optional<ApiError> check_admin(std::optional<std::string_view> authorization,
                                      std::optional<std::string_view> presented) const;

  std::string token_;
  std::string worker_token_;
  std::vector<WorkerTokenConfig> worker_tokens_;
  bool allow_unauthenticated_;
  std::string listen_host_;  // lower case, without brackets; "" when unknown
};

}  // namespace conveyor
