// Fuzzes the admin/task API's request path through the function the HTTP
// handler calls (api_request.hpp handle_api_request: authentication,
// read-only refusal, the body size limit, parse_request_body, then
// ApiService::call), against a real Engine on the real SQLite plugin loaded
// through the real loader. Every answer must be JSON: a 200 with a response
// message object, or a Connect error whose code is known, matches the HTTP
// status and carries a message; nothing may crash, leak, or end as
// "internal"/"unknown" (an exception nobody mapped). The client's response
// decoders (api_messages.hpp), which read what a server sends, are fuzzed on
// the same bytes.
//
// Input: byte 0 picks the target (a method, or a client decoder), byte 1 the
// Authorization header, the server's token settings and whether it is
// read-only, and the spelling of headers the server must accept alike; the
// rest is the body.
#include "api_request.hpp"
#include "api_service.hpp"
#include "proto_json.hpp"

#include <conveyor/api_error.hpp>
#include <conveyor/api_messages.hpp>
#include <conveyor/config.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/validation.hpp>

#include <spdlog/spdlog.h>

#include <unistd.h>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace {

using nlohmann::json;

constexpr const char* kMethods[] = {
    "/conveyor.v1.AdminService/SetQueueRateLimit",
    "/conveyor.v1.AdminService/DeleteQueueRateLimit",
    "/conveyor.v1.AdminService/ListRateLimits",
    "/conveyor.v1.AdminService/ListQueues",
    "/conveyor.v1.AdminService/PauseQueue",
    "/conveyor.v1.AdminService/ResumeQueue",
    "/conveyor.v1.TaskService/Enqueue",
    "/conveyor.v1.TaskService/EnqueueBatch",
    "/conveyor.v1.TaskService/GetJob",
};
constexpr size_t kMethodCount = sizeof kMethods / sizeof kMethods[0];
// Targets after the methods: the client's decoders of response messages.
constexpr size_t kDecoderCount = 5;

constexpr size_t kMaxBodyBytes = 4096;  // as [server] max_body_bytes
constexpr const char* kToken = "fuzz-token";
// Mutations before the database starts afresh: keeps ListQueues and the
// override re-reads fast however long the run.
constexpr int kMutationsPerDatabase = 2000;

[[noreturn]] void die(const char* what, const std::string& detail) {
  std::fprintf(stderr, "api_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

// A real engine (never started: no dispatch) on a SQLite file in a temp dir.
struct World {
  std::filesystem::path dir;
  std::unique_ptr<conveyor::Engine> engine;
  std::unique_ptr<conveyor::ApiService> api;
  int mutations = 0;

  World() {
    char tmpl[] = "/tmp/conveyor-api-fuzz-XXXXXX";
    if (!mkdtemp(tmpl)) die("mkdtemp", "failed");
    dir = tmpl;
    open();
  }
  ~World() {
    api.reset();
    engine.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  void open() {
    api.reset();
    engine.reset();
    std::error_code ec;
    for (const char* f : {"fuzz.db", "fuzz.db-wal", "fuzz.db-shm"})
      std::filesystem::remove(dir / f, ec);
    conveyor::Config c;
    c.source = "<fuzz>";
    c.storage.plugin = "sqlite";
    c.storage.plugin_dir = CONVEYOR_FUZZ_PLUGIN_DIR;
    c.storage.options = {{"path", (dir / "fuzz.db").string()}, {"synchronous", "OFF"}};
    engine = std::make_unique<conveyor::Engine>(std::move(c));
    api = std::make_unique<conveyor::ApiService>(*engine);
    mutations = 0;
  }
};

World* world = nullptr;

void remove_world() {
  delete world;
  world = nullptr;
}

// A refusal must be a Connect error the server and its clients agree on.
void check_error(const conveyor::ApiResponse& response) {
  const json body = json::parse(response.body, nullptr, false);
  if (!body.is_object() || body.size() != 2 || !body.contains("code") ||
      !body["code"].is_string() || !body.contains("message") || !body["message"].is_string())
    die("error body is not {code, message}", response.body);
  const auto code = conveyor::parse_api_code(body["code"].get<std::string>());
  if (!code) die("unknown error code", response.body);
  if (std::string_view(conveyor::to_string(*code)) != body["code"].get<std::string>())
    die("error code does not round-trip", response.body);
  if (response.status < 400 || response.status > 599 ||
      conveyor::http_status(*code) != response.status)
    die("error status does not match its code", response.body);
  if (body["message"].get<std::string>().empty()) die("error without a message", response.body);
  // Nothing a request can send is an internal failure: that means an
  // exception no layer mapped to a code, or storage choking on input that
  // validation let through.
  if (*code == conveyor::ApiCode::kInternal || *code == conveyor::ApiCode::kUnknown)
    die("internal error", response.body);
}

std::optional<std::string> authorization(uint8_t flags) {
  switch (flags & 7) {
    case 0:
      return std::nullopt;
    case 1:
      return std::string("Bearer ") + kToken;
    case 2:
      return std::string("bearer   ") + kToken + "  ";
    case 3:
      return std::string("Bearer ") + kToken + "x";
    case 4:
      return std::string("Basic ") + kToken;
    case 5:
      return std::string("Bearer");
    default:
      return std::string("Bearer ") + kToken;
  }
}

// The answer the admin server would send for this POST.
conveyor::ApiResponse serve(const char* path, std::string_view body, uint8_t flags) {
  conveyor::ServerConfig server;
  server.listen = "127.0.0.1:0";
  server.admin_token = (flags & 8) ? "" : kToken;
  server.allow_unauthenticated = (flags & 16) != 0;
  server.read_only = (flags & 32) != 0;
  server.max_body_bytes = kMaxBodyBytes;
  const auto header = authorization(flags);
  conveyor::ApiRequest request;
  request.path = path;
  if (header) request.authorization = *header;
  // Spellings the server must accept alike.
  request.content_type = (flags & 64) ? "Application/JSON; charset=UTF-8" : "application/json";
  if (flags & 128) request.connect_protocol_version = "1";
  request.body = body;
  request.remote_addr = "fuzz";
  const conveyor::ApiService::Method* method = world->api->find(path);
  if (!method) die("method not found", path);
  if (method->mutates) ++world->mutations;
  return conveyor::handle_api_request(*world->api, server, request);
}

void fuzz_method(size_t index, std::string_view body, uint8_t flags) {
  const char* path = kMethods[index];
  const conveyor::ApiResponse answer = serve(path, body, flags);
  if (answer.content_type != "application/json") die("answer is not JSON", answer.content_type);
  if (!answer.headers.empty()) die("unexpected header", answer.headers.front().first);
  if (answer.status != 200) {
    check_error(answer);
    return;
  }
  const json response = json::parse(answer.body, nullptr, false);
  if (!response.is_object()) die("response is not a JSON object", path);
  // An accepted job is stored as sent: GetJob finds it on its queue.
  if (index == 6) {
    const json request = conveyor::api::parse_request_body(body);
    const auto job = world->engine->get_job(std::stoll(response.at("id").get<std::string>()));
    if (!job) die("enqueued job not found", std::string(body));
    const json& sent = request.contains("job") ? request["job"] : json::object();
    const conveyor::JobRequest r = conveyor::api::parse_new_job(sent, "job.");
    if (job->queue != r.queue || job->kind != r.kind || job->payload != r.payload)
      die("enqueued job differs from the request", std::string(body));
  }
}

// What the API client does with a response body: every failure is a
// ValidationError, nothing else.
void fuzz_decoder(size_t index, std::string_view body) {
  const json doc = json::parse(body, nullptr, false);
  if (doc.is_discarded()) return;
  try {
    switch (index) {
      case 0:
        conveyor::api::parse_listing(doc);
        break;
      case 1:
        conveyor::api::parse_queue_info(doc);
        break;
      case 2:
        conveyor::api::parse_job(doc);
        break;
      case 3:
        conveyor::api::parse_override(doc);
        break;
      default:
        if (doc.is_string()) conveyor::api::parse_rfc3339(doc.get<std::string>(), "t");
        break;
    }
  } catch (const conveyor::ValidationError& e) {
    if (std::string_view(e.what()).empty()) die("decoder error without a message", "");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // the service logs each refusal
  world = new World();
  std::atexit(remove_world);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t target = data[0] % (kMethodCount + kDecoderCount);
  const uint8_t flags = data[1];
  const std::string_view body(reinterpret_cast<const char*>(data + 2), size - 2);
  try {
    if (target < kMethodCount)
      fuzz_method(target, body, flags);
    else
      fuzz_decoder(target - kMethodCount, body);
  } catch (const std::exception& e) {
    die("exception escaped", e.what());
  }
  if (world->mutations >= kMutationsPerDatabase) world->open();
  return 0;
}
