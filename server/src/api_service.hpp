// The RPC methods of AdminService and TaskService over an Engine, apart from
// HTTP: a request message in (JSON), a response message out, ApiError for
// failures. The HTTP layer (admin_server.cc) adds transport, auth and limits.
#pragma once

#include <conveyor/api_error.hpp>

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace conveyor {

class Engine;

class ApiService {
 public:
  struct Method {
    bool mutates = false;  // refused in read-only mode
    std::function<nlohmann::json(const nlohmann::json& request)> call;
  };

  explicit ApiService(Engine& engine);

  // The method served at path ("/conveyor.v1.AdminService/ListQueues"), or null.
  const Method* find(std::string_view path) const;

  // Runs a method: every failure comes out as ApiError (validation ->
  // invalid_argument naming the field, storage -> unavailable/internal, ...).
  nlohmann::json call(const Method& method, const nlohmann::json& request) const;

  // "/conveyor.v1.AdminService/SetQueueRateLimit", ... in a stable order.
  std::vector<std::string> paths() const;

 private:
  nlohmann::json set_queue_rate_limit(const nlohmann::json& request);
  nlohmann::json delete_queue_rate_limit(const nlohmann::json& request);
  nlohmann::json list_rate_limits(const nlohmann::json& request);
  nlohmann::json list_queues(const nlohmann::json& request);
  nlohmann::json set_paused(const nlohmann::json& request, bool paused);
  nlohmann::json enqueue(const nlohmann::json& request);
  nlohmann::json enqueue_batch(const nlohmann::json& request);
  nlohmann::json get_job(const nlohmann::json& request);

  Engine& engine_;
  std::map<std::string, Method, std::less<>> methods_;
};

}  // namespace conveyor
