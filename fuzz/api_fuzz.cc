// Fuzzes the admin/task API's request path through the function the HTTP
// handler calls (api_request.hpp handle_api_request: authentication,
// read-only refusal, the body size limit, decoding the request message in
// either Connect codec, then ApiService::call), against a real Engine on the
// real SQLite plugin loaded through the real loader. Every answer must be a
// 200 with a response message in the request's codec that decodes again, or
// a Connect JSON error whose code is known, matches the HTTP status and
// carries a message; nothing may crash, leak, or end as "internal"/"unknown"
// (an exception nobody mapped). The client's side (api_codec decode, then
// api_messages from_proto), which reads what a server sends, is fuzzed on the
// same bytes.
//
// Input: byte 0 picks the target (a method, or a client decoder) as byte 0 %
// 14, and the codec as (byte 0 / 14) % 2: 0 JSON (application/json), 1
// binary (application/proto); byte 1 the Authorization header, the server's
// token settings and whether it is read-only, and the spelling of headers the
// server must accept alike; the rest is the body.
#include "api_codec.hpp"
#include "api_request.hpp"
#include "api_service.hpp"

#include <conveyor/api_error.hpp>
#include <conveyor/api_messages.hpp>
#include <conveyor/config.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/validation.hpp>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <dlfcn.h>
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
constexpr size_t kTargetCount = kMethodCount + kDecoderCount;

using conveyor::api::Codec;

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
    // Keep the plugin mapped for the whole run: each fresh database makes a
    // new Engine, and the last Engine's plugin would be unloaded with it,
    // taking its coverage counters, which libFuzzer still reads, along.
    const std::string plugin = std::string(CONVEYOR_FUZZ_PLUGIN_DIR) + "/libconveyor-sqlite.so";
    if (!dlopen(plugin.c_str(), RTLD_NOW | RTLD_NODELETE)) die("dlopen", dlerror());
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
conveyor::ApiResponse serve(const char* path, Codec codec, std::string_view body, uint8_t flags) {
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
  if (codec == Codec::kJson)
    request.content_type = (flags & 64) ? "Application/JSON; charset=UTF-8" : "application/json";
  else
    request.content_type = (flags & 64) ? "Application/Proto" : "application/proto";
  if (flags & 128) request.connect_protocol_version = "1";
  request.body = body;
  request.remote_addr = "fuzz";
  const conveyor::ApiService::Method* method = world->api->find(path);
  if (!method) die("method not found", path);
  if (method->mutates) ++world->mutations;
  return conveyor::handle_api_request(*world->api, server, request);
}

void fuzz_method(size_t index, Codec codec, std::string_view body, uint8_t flags) {
  const char* path = kMethods[index];
  const conveyor::ApiResponse answer = serve(path, codec, body, flags);
  if (!answer.headers.empty()) die("unexpected header", answer.headers.front().first);
  if (answer.status != 200) {
    if (answer.content_type != "application/json") die("error is not JSON", answer.content_type);
    check_error(answer);
    return;
  }
  if (answer.content_type != conveyor::api::content_type(codec))
    die("answer is not in the request's codec", answer.content_type);
  const conveyor::ApiService::Method* method = world->api->find(path);
  // The answer reads back as its message type, as a client reads it.
  std::unique_ptr<google::protobuf::Message> response(method->response_prototype->New());
  try {
    conveyor::api::decode(codec, answer.body, *response);
  } catch (const conveyor::ApiError& e) {
    die("answer does not decode", e.what());
  }
  if (codec == Codec::kJson && !json::parse(answer.body, nullptr, false).is_object())
    die("response is not a JSON object", path);
  // An accepted job is stored as sent: GetJob finds it on its queue.
  if (index == 6) {
    conveyor::v1::EnqueueRequest request;
    conveyor::api::decode(codec, body, request);
    const auto& enqueued = static_cast<const conveyor::v1::EnqueueResponse&>(*response);
    const auto job = world->engine->get_job(enqueued.id());
    if (!job) die("enqueued job not found", std::string(body));
    const conveyor::JobRequest r = conveyor::api::from_proto(request.job(), "job.");
    if (job->queue != r.queue || job->kind != r.kind || job->payload != r.payload)
      die("enqueued job differs from the request", std::string(body));
  }
}

// What the API client does with a response body: every failure is an
// ApiError (the codec) or a ValidationError (from_proto), nothing else.
void fuzz_decoder(size_t index, Codec codec, std::string_view body) {
  namespace v1 = conveyor::v1;
  using conveyor::api::decode;
  using conveyor::api::from_proto;
  try {
    switch (index) {
      case 0: {
        v1::ListRateLimitsResponse m;
        decode(codec, body, m);
        from_proto(m);
        break;
      }
      case 1: {
        v1::QueueInfo m;
        decode(codec, body, m);
        from_proto(m);
        break;
      }
      case 2: {
        v1::Job m;
        decode(codec, body, m);
        from_proto(m);
        break;
      }
      case 3: {
        v1::RateLimitOverride m;
        decode(codec, body, m);
        from_proto(m);
        break;
      }
      default: {
        // A JSON string's text (as the seeds hold), else the bytes as they are.
        const json doc = json::parse(body, nullptr, false);
        if (doc.is_string())
          conveyor::api::parse_rfc3339(doc.get<std::string>(), "t");
        else
          conveyor::api::parse_rfc3339(body, "t");
        break;
      }
    }
  } catch (const conveyor::ApiError& e) {
    if (e.code() != conveyor::ApiCode::kInvalidArgument)
      die("decoder error is not invalid_argument", e.what());
    if (std::string_view(e.what()).empty()) die("decoder error without a message", "");
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
  const size_t target = data[0] % kTargetCount;
  const Codec codec = (data[0] / kTargetCount) % 2 ? Codec::kProto : Codec::kJson;
  const uint8_t flags = data[1];
  const std::string_view body(reinterpret_cast<const char*>(data + 2), size - 2);
  try {
    if (target < kMethodCount)
      fuzz_method(target, codec, body, flags);
    else
      fuzz_decoder(target - kMethodCount, codec, body);
  } catch (const std::exception& e) {
    die("exception escaped", e.what());
  }
  if (world->mutations >= kMutationsPerDatabase) world->open();
  return 0;
}
