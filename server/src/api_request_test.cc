// One API call through handle_api_request, without HTTP, on a real engine
// over the real SQLite plugin: the HTTP status, headers and Connect body the
// admin server sends for each outcome.
#include "api_request.hpp"
#include "test_support.hpp"

#include "conveyor/v1/admin.pb.h"
#include "conveyor/v1/task.pb.h"

#include <conveyor/engine.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

namespace conveyor {
namespace {

using nlohmann::json;

constexpr const char* kToken = "s3cret-token";
constexpr const char* kBearer = "Bearer s3cret-token";
constexpr const char* kList = "/conveyor.v1.AdminService/ListQueues";
constexpr const char* kListLimits = "/conveyor.v1.AdminService/ListRateLimits";
constexpr const char* kSet = "/conveyor.v1.AdminService/SetQueueRateLimit";
constexpr const char* kPause = "/conveyor.v1.AdminService/PauseQueue";
constexpr const char* kEnqueue = "/conveyor.v1.TaskService/Enqueue";
constexpr const char* kGet = "/conveyor.v1.TaskService/GetJob";

class ApiRequestTest : public ::testing::Test {
 protected:
  ApiRequestTest() {
    engine_ = std::make_unique<Engine>(test::sqlite_config(dir_));
    api_ = std::make_unique<ApiService>(*engine_);
    config_.listen = "127.0.0.1:0";
    config_.admin_token = kToken;
    config_.max_body_bytes = 1024;
  }
  ~ApiRequestTest() override {
    api_.reset();
    engine_.reset();
  }

  // A well-formed call with the right token; tests change what they test.
  static ApiRequest request(std::string_view path, std::string_view body) {
    ApiRequest r;
    r.path = path;
    r.authorization = kBearer;
    r.content_type = "application/json";
    r.body = body;
    r.remote_addr = "127.0.0.1";
    return r;
  }

  ApiResponse handle(const ApiRequest& r) const { return handle_api_request(*api_, config_, r); }

  // A successful answer's message.
  json ok(const ApiRequest& r) const {
    const ApiResponse response = handle(r);
    EXPECT_EQ(response.status, 200) << response.body;
    EXPECT_EQ(response.content_type, "application/json");
    EXPECT_TRUE(response.headers.empty());
    const json message = json::parse(response.body, nullptr, false);
    EXPECT_TRUE(message.is_object()) << response.body;
    return message;
  }

  // Asserts a Connect error answer: status, code, and a message containing text.
  static void expect_error(const ApiResponse& response, int status, const std::string& code,
                           const std::string& text) {
    EXPECT_EQ(response.status, status) << response.body;
    EXPECT_EQ(response.content_type, "application/json");
    const json body = json::parse(response.body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << response.body;
    EXPECT_EQ(body.size(), 2u) << response.body;
    EXPECT_EQ(body.value("code", ""), code) << response.body;
    EXPECT_NE(body.value("message", "").find(text), std::string::npos) << response.body;
  }

  test::TempDir dir_;  // removed after the engine
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ApiService> api_;
  ServerConfig config_;
};

TEST_F(ApiRequestTest, AGoodCallIs200WithTheResponseMessage) {
  EXPECT_EQ(ok(request(kList, "{}"))["queues"], json::array());
  // An empty body is the empty message.
  EXPECT_EQ(ok(request(kListLimits, ""))["overrides"], json::array());

  const json enqueued = ok(
      request(kEnqueue, R"({"job": {"queue": "email", "kind": "noop", "payload": "{\"n\": 1}"}})"));
  ASSERT_TRUE(enqueued["id"].is_string()) << enqueued;
  const auto stored = engine_->get_job(std::stoll(enqueued["id"].get<std::string>()));
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->queue, "email");
  EXPECT_EQ(stored->kind, "noop");
  EXPECT_EQ(json::parse(stored->payload), (json{{"n", 1}}));

  const std::string get = json{{"id", enqueued["id"]}}.dump();
  const json job = ok(request(kGet, get))["job"];
  EXPECT_EQ(job["id"], enqueued["id"]);
  EXPECT_EQ(job["queue"], "email");
}

TEST_F(ApiRequestTest, MissingOrWrongTokenIs401) {
  ApiRequest r = request(kSet, R"({"queue": "q", "ratePerSec": 5, "burst": 1})");
  r.authorization = std::nullopt;
  expect_error(handle(r), 401, "unauthenticated", "missing Authorization header");
  r.authorization = "Bearer s3cret-tokeN";
  expect_error(handle(r), 401, "unauthenticated", "wrong admin token");
  r.authorization = "Basic czNjcmV0";
  expect_error(handle(r), 401, "unauthenticated", "Bearer <admin token>");
  // Unknown methods are not revealed without the token either.
  r.path = "/conveyor.v1.AdminService/Nope";
  expect_error(handle(r), 401, "unauthenticated", "Bearer");
  // Nothing was set by the refused calls.
  EXPECT_EQ(ok(request(kListLimits, "{}"))["overrides"], json::array());

  // No token configured and no permission: refused, saying what to set.
  config_.admin_token.clear();
  expect_error(handle(request(kList, "{}")), 401, "unauthenticated", "allow_unauthenticated");
  // allow_unauthenticated without a token: no header is fine (there is no
  // token to compare a sent one with).
  config_.allow_unauthenticated = true;
  r = request(kList, "{}");
  r.authorization = std::nullopt;
  EXPECT_EQ(ok(r)["queues"], json::array());
}

// A configured token is required whatever allow_unauthenticated says: the
// shipped config sets it, and CONVEYOR_ADMIN_TOKEN on top must close the API.
TEST_F(ApiRequestTest, AConfiguredTokenIsRequiredEvenWithAllowUnauthenticated) {
  config_.allow_unauthenticated = true;
  for (const char* path : {kList, kPause, kEnqueue}) {
    ApiRequest r = request(path, R"({"queue": "q", "job": {"queue": "q", "kind": "noop"}})");
    r.authorization = std::nullopt;
    expect_error(handle(r), 401, "unauthenticated", "missing Authorization header");
  }
  EXPECT_EQ(ok(request(kList, "{}"))["queues"], json::array());  // nothing was paused or enqueued
}

// DNS rebinding: without a token only requests addressed to this server pass.
TEST_F(ApiRequestTest, WithoutATokenAForeignHostIsRefused) {
  config_.admin_token.clear();
  config_.allow_unauthenticated = true;
  config_.listen = "conveyor.internal:8080";
  ApiRequest r = request(kPause, R"({"queue": "q"})");
  r.authorization = std::nullopt;
  for (const char* host :
       {"attacker.example", "attacker.example:8080", "localhost.attacker.example",
        "127.0.0.1.attacker.example", "", "[::1"}) {
    r.host = host;
    expect_error(handle(r), 403, "permission_denied", "is not this server's address");
  }
  r.host = "attacker.example:8080";
  expect_error(handle(r), 403, "permission_denied",
               "Host \"attacker.example:8080\" is not this server's address");
  EXPECT_EQ(ok(request(kList, "{}"))["queues"], json::array());  // nothing was paused
  for (const char* host :
       {"localhost", "LOCALHOST:8080", "localhost.", "127.0.0.1", "127.0.0.1:8080", "[::1]:8080",
        "[::1]", "10.1.2.3:8080", "conveyor.internal:8080", "Conveyor.Internal"}) {
    r.host = host;
    EXPECT_EQ(handle(r).status, 200) << host;
  }
  r.host = std::nullopt;  // HTTP/1.0 without Host: not a browser
  EXPECT_EQ(handle(r).status, 200);
  // With a token the token protects the API, whatever the Host.
  config_.admin_token = kToken;
  r = request(kList, "{}");
  r.host = "attacker.example";
  EXPECT_EQ(handle(r).status, 200);
}

TEST_F(ApiRequestTest, ReadOnlyRefusesMutationsWith403) {
  config_.read_only = true;
  expect_error(handle(request(kSet, R"({"queue": "q", "ratePerSec": 5, "burst": 1})")), 403,
               "permission_denied",
               "this server is read-only ([server] read_only = true): SetQueueRateLimit changes "
               "state");
  expect_error(handle(request(kEnqueue, R"({"job": {"queue": "q", "kind": "noop"}})")), 403,
               "permission_denied", "Enqueue changes state");
  // Refused before the body is read: a malformed body changes nothing.
  expect_error(handle(request(kPause, "{")), 403, "permission_denied", "read-only");
  // Reads still work, and nothing was stored.
  EXPECT_EQ(ok(request(kListLimits, "{}"))["overrides"], json::array());
  EXPECT_EQ(ok(request(kList, "{}"))["queues"], json::array());
}

TEST_F(ApiRequestTest, ABodyOverMaxBodyBytesIs429) {
  const std::string big = json{{"queue", std::string(2000, 'a')}}.dump();
  expect_error(handle(request(kPause, big)), 429, "resource_exhausted",
               "request body is larger than [server] max_body_bytes");
  // Exactly at the limit is accepted (spaces pad a valid message).
  std::string at_limit = R"({"queue": "q"})";
  at_limit.resize(config_.max_body_bytes, ' ');
  ok(request(kPause, at_limit));
  at_limit.push_back(' ');
  expect_error(handle(request(kPause, at_limit)), 429, "resource_exhausted", "max_body_bytes");
}

TEST_F(ApiRequestTest, AMalformedBodyIs400InvalidArgument) {
  expect_error(handle(request(kList, "{\"queue\": ")), 400, "invalid_argument",
               "body is not valid JSON");
  expect_error(handle(request(kList, "[1, 2]")), 400, "invalid_argument",
               "body must be a JSON object, got an array");
  // A well-formed message the method refuses names the field.
  expect_error(handle(request(kSet, R"({"queue": "q", "ratePerSec": -1, "burst": 1})")), 400,
               "invalid_argument", "ratePerSec");
  expect_error(handle(request(kGet, R"({"id": 424242})")), 404, "not_found", "job 424242");
}

TEST_F(ApiRequestTest, ContentTypeAndConnectProtocolVersion) {
  ApiRequest r = request(kList, "{}");
  r.content_type = "text/plain";
  ApiResponse response = handle(r);
  expect_error(response, 415, "unknown",
               "Content-Type must be application/json or application/proto (the Connect "
               "protocol's unary codecs), got \"text/plain\"");
  ASSERT_EQ(response.headers.size(), 1u);
  EXPECT_EQ(response.headers[0].first, "Accept-Post");
  EXPECT_EQ(response.headers[0].second, "application/json, application/proto");
  r.content_type = std::nullopt;
  expect_error(handle(r), 415, "unknown", "Content-Type must be application/json");
  r.content_type = "application/grpc";
  expect_error(handle(r), 415, "unknown", "Content-Type must be application/json");

  r.content_type = "Application/JSON; charset=UTF-8";
  ok(r);
  r.connect_protocol_version = "1";
  ok(r);
  r.connect_protocol_version = "2";
  expect_error(handle(r), 400, "invalid_argument", "Connect-Protocol-Version must be 1");
}

// application/proto: binary request, binary answer; errors stay Connect JSON.
TEST_F(ApiRequestTest, BinaryProtobufCallsAnswerInBinary) {
  v1::EnqueueRequest enqueue;
  enqueue.mutable_job()->set_queue("email");
  enqueue.mutable_job()->set_kind("noop");
  enqueue.mutable_job()->set_max_attempts(4);
  const std::string body = enqueue.SerializeAsString();
  ApiRequest r = request(kEnqueue, body);
  r.content_type = "application/proto";
  ApiResponse response = handle(r);
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_EQ(response.content_type, "application/proto");
  v1::EnqueueResponse enqueued;
  ASSERT_TRUE(enqueued.ParseFromString(response.body));
  ASSERT_GT(enqueued.id(), 0);
  EXPECT_EQ(engine_->get_job(enqueued.id())->max_attempts, 4);

  v1::GetJobRequest get;
  get.set_id(enqueued.id());
  const std::string get_body = get.SerializeAsString();
  r = request(kGet, get_body);
  r.content_type = "application/proto";
  response = handle(r);
  ASSERT_EQ(response.status, 200) << response.body;
  v1::GetJobResponse job;
  ASSERT_TRUE(job.ParseFromString(response.body));
  EXPECT_EQ(job.job().queue(), "email");
  EXPECT_EQ(job.job().payload(), "{}");
  // An empty body is the empty message in binary too.
  r = request(kList, "");
  r.content_type = "application/proto";
  response = handle(r);
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.content_type, "application/proto");

  // A refused binary call answers Connect JSON, naming the field.
  v1::SetQueueRateLimitRequest set;
  set.set_queue("q");
  set.set_rate_per_sec(-1);
  set.set_burst(1);
  const std::string set_body = set.SerializeAsString();
  r = request(kSet, set_body);
  r.content_type = "application/proto";
  expect_error(handle(r), 400, "invalid_argument",
               "ratePerSec: rate must be a finite number greater than 0, got -1");
  r = request(kSet, "\x0a\x09q");  // truncated
  r.content_type = "application/proto";
  expect_error(handle(r), 400, "invalid_argument",
               "body is not a valid binary conveyor.v1.SetQueueRateLimitRequest message");
  EXPECT_EQ(ok(request(kListLimits, "{}"))["overrides"], json::array());  // nothing stored
}

TEST_F(ApiRequestTest, UnknownJsonFieldsAreRefusedNamingThem) {
  expect_error(handle(request(kPause, R"({"queue": "q", "paused": true})")), 400,
               "invalid_argument", "paused: unknown field of PauseQueueRequest (known: queue)");
  EXPECT_EQ(ok(request(kList, "{}"))["queues"], json::array());  // nothing was paused
}

TEST_F(ApiRequestTest, AnUnknownMethodIs404Unimplemented) {
  const ApiResponse response = handle(request("/conveyor.v1.AdminService/DropEverything", "{}"));
  expect_error(response, 404, "unimplemented",
               "no API method at /conveyor.v1.AdminService/DropEverything (methods: ");
  EXPECT_NE(response.body.find(kList), std::string::npos) << response.body;
}

TEST_F(ApiRequestTest, ErrorResponseCarriesTheConnectStatusAndCode) {
  const ApiResponse response =
      api_error_response(ApiError(ApiCode::kUnavailable, "storage is down"));
  EXPECT_EQ(response.status, 503);
  EXPECT_EQ(response.content_type, "application/json");
  EXPECT_EQ(json::parse(response.body),
            (json{{"code", "unavailable"}, {"message", "storage is down"}}));
}

}  // namespace
}  // namespace conveyor
