// The RPC methods of AdminService and TaskService over an Engine, apart from
// HTTP and wire format: a generated request message in, a response message
// out, ApiError for failures. api_request.cc adds the codecs (api_codec.hpp),
// auth and limits; admin_server.cc the transport.
#pragma once

#include <conveyor/api_error.hpp>

#include <google/protobuf/message.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor {

class Engine;

class ApiService {
 public:
  using Message = google::protobuf::Message;

  struct Method {
    bool mutates = false;  // refused in read-only mode
    // The request type's default instance (New() makes one to decode into).
    const Message* request_prototype = nullptr;
    const Message* response_prototype = nullptr;  // the answer's type, likewise
    std::function<std::unique_ptr<Message>(const Message& request)> call;

    std::unique_ptr<Message> new_request() const {
      return std::unique_ptr<Message>(request_prototype->New());
    }
  };

  explicit ApiService(Engine& engine);

  // The method served at path ("/conveyor.v1.AdminService/ListQueues"), or null.
  const Method* find(std::string_view path) const;

  // Runs a method on a request of its type: every failure comes out as
  // ApiError (validation -> invalid_argument naming the field, storage ->
  // unavailable/internal, ...).
  std::unique_ptr<Message> call(const Method& method, const Message& request) const;

  // "/conveyor.v1.AdminService/SetQueueRateLimit", ... in a stable order.
  std::vector<std::string> paths() const;

 private:
  template <typename Request, typename Response>
  void add(std::string_view service, const char* name, bool mutates,
           std::function<void(const Request&, Response&)> fn);

  Engine& engine_;
  std::map<std::string, Method, std::less<>> methods_;
};

}  // namespace conveyor
