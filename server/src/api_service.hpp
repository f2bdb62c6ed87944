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
struct WorkerScope;  // auth.hpp

class ApiService {
 public:
  using Message = google::protobuf::Message;

  // An asynchronous method's answer; runs once, on any thread.
  using Done = std::function<void(std::unique_ptr<Message> response)>;
  // Gives up a waiting asynchronous call (the client went away): true when
  // it was still waiting, and then its Done never runs.
  using Cancel = std::function<bool()>;

  struct Method {
    bool mutates = false;  // refused in read-only mode
    bool audited = true;   // a mutating call is logged at info (else debug)
    // The request type's default instance (New() makes one to decode into).
    const Message* request_prototype = nullptr;
    const Message* response_prototype = nullptr;  // the answer's type, likewise
    // Exactly one of call and call_async is set. call_async answers through
    // Done, possibly later (a long-poll); a failure to start it throws.
    // scope: the caller's worker token (null: the admin, or an open server).
    std::function<std::unique_ptr<Message>(const Message& request, const WorkerScope* scope)> call;
    std::function<Cancel(const Message& request, Done done, const WorkerScope* scope)> call_async;

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
  // scope: a worker token's (refusals are ApiError kPermissionDenied); null:
  // the admin's calls.
  std::unique_ptr<Message> call(const Method& method, const Message& request,
                                const WorkerScope* scope = nullptr) const;
  // Starts an asynchronous method; errors on the way in come out as
  // ApiError, as from call().
  Cancel start(const Method& method, const Message& request, Done done,
               const WorkerScope* scope = nullptr) const;

  // Answers every waiting long-poll now, and later ones at once (the server
  // stops). Thread-safe.
  void close_long_polls();

  // "/conveyor.v1.AdminService/SetQueueRateLimit", ... in a stable order.
  std::vector<std::string> paths() const;

 private:
  template <typename Request, typename Response>
  void add(std::string_view service, const char* name, bool mutates,
           std::function<void(const Request&, Response&)> fn);
  // A method a worker token may call: fn gets the caller's scope (null: admin).
  template <typename Request, typename Response>
  void add_scoped(std::string_view service, const char* name, bool mutates,
                  std::function<void(const Request&, Response&, const WorkerScope*)> fn);
  // WorkerService (worker_service.cc).
  void add_worker_methods();

  Engine& engine_;
  std::map<std::string, Method, std::less<>> methods_;
};

template <typename Request, typename Response>
void ApiService::add(std::string_view service, const char* name, bool mutates,
                     std::function<void(const Request&, Response&)> fn) {
  Method m;
  m.mutates = mutates;
  m.request_prototype = &Request::default_instance();
  m.response_prototype = &Response::default_instance();
  m.call = [fn = std::move(fn)](const Message& request, const WorkerScope*) {
    auto response = std::make_unique<Response>();
    fn(static_cast<const Request&>(request), *response);
    return response;
  };
  methods_[std::string(service) + name] = std::move(m);
}

template <typename Request, typename Response>
void ApiService::add_scoped(std::string_view service, const char* name, bool mutates,
                            std::function<void(const Request&, Response&, const WorkerScope*)> fn) {
  Method m;
  m.mutates = mutates;
  m.request_prototype = &Request::default_instance();
  m.response_prototype = &Response::default_instance();
  m.call = [fn = std::move(fn)](const Message& request, const WorkerScope* scope) {
    auto response = std::make_unique<Response>();
    fn(static_cast<const Request&>(request), *response, scope);
    return response;
  };
  methods_[std::string(service) + name] = std::move(m);
}

}  // namespace conveyor
