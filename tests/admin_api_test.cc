// The admin and task API over real HTTP against a real `conveyor serve`:
// every method, every validation error, auth on and off, read-only mode,
// malformed and oversized requests, and /metrics as strict Prometheus text.
// Requests are raw bytes (test_support's http_send) so that malformed ones
// are sent exactly as written.
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

namespace conveyor {
namespace {

using nlohmann::json;

using test::http_request;
using test::http_send;
using test::HttpResponse;

json json_body(const HttpResponse& r) { return json::parse(r.body); }

// `conveyor serve` with a [server] section on a free loopback port, and the
// API's method paths.
class Server : public test::ServeProcess {
 public:
  Server(const test::TempDir& dir, const std::string& server_keys,
         std::vector<std::string> env = {},
         const std::string& engine_keys = "poll_interval_ms = 50\n")
      : ServeProcess(dir, "[engine]\n" + engine_keys, server_keys, env) {}

  HttpResponse call(const std::string& method, const json& body,
                    std::vector<std::string> extra = {}) {
    return post(api_path(method), body.dump(), std::move(extra));
  }
  HttpResponse get(const std::string& path, std::vector<std::string> headers = {}) {
    return http_send(port(), http_request("GET", path, headers, ""));
  }
  static std::string api_path(const std::string& method) {
    const bool task = method == "Enqueue" || method == "EnqueueBatch" || method == "GetJob";
    return std::string("/conveyor.v1.") + (task ? "TaskService/" : "AdminService/") + method;
  }
};

// A Connect error: HTTP status, JSON body with code and message.
void expect_error(const HttpResponse& r, int status, const std::string& code,
                  const std::string& message_part) {
  EXPECT_EQ(r.status, status) << r.body;
  EXPECT_EQ(r.header("content-type"), "application/json") << r.body;
  json j = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.body;
  EXPECT_EQ(j["code"], code) << r.body;
  EXPECT_NE(j.value("message", "").find(message_part), std::string::npos)
      << "expected '" << message_part << "' in: " << r.body;
}

constexpr const char* kOpen = "allow_unauthenticated = true\n";

// ---- every method -------------------------------------------------------------

TEST(AdminApi, EveryMethodOverHttp) {
  test::TempDir dir;
  Server s(dir, kOpen);
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();

  auto r = s.call("SetQueueRateLimit", {{"queue", "email"}, {"ratePerSec", 50}, {"burst", 10}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("content-type"), "application/json");
  EXPECT_EQ(json_body(r)["override"]["queue"], "email");
  EXPECT_EQ(json_body(r)["override"]["burst"], 10);
  // The .proto field names and string numbers work too; an unknown field is
  // refused naming it (the proto3 JSON mapping's default), storing nothing.
  r = s.call("SetQueueRateLimit",
             {{"queue", "sms"}, {"rate_per_sec", "2.5"}, {"burst", "3"}, {"unknownField", 1}});
  expect_error(r, 400, "invalid_argument",
               "unknownField: unknown field of SetQueueRateLimitRequest");
  r = s.call("SetQueueRateLimit", {{"queue", "sms"}, {"rate_per_sec", "2.5"}, {"burst", "3"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json_body(r)["override"]["ratePerSec"], 2.5);

  r = s.call("ListRateLimits", json::object());
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json_body(r);
  EXPECT_EQ(j["enabled"], true);
  EXPECT_FALSE(j.contains("defaultLimit"));
  ASSERT_EQ(j["overrides"].size(), 2u);
  EXPECT_EQ(j["overrides"][0]["queue"], "email");
  EXPECT_TRUE(std::regex_match(j["overrides"][0]["updatedAt"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z)")));

  r = s.call("Enqueue", {{"job",
                          {{"queue", "later"},
                           {"kind", "noop"},
                           {"payload", R"({"a":1})"},
                           {"delaySeconds", 3600},
                           {"maxAttempts", 2},
                           {"priority", 5}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string id = json_body(r)["id"];  // int64 as a JSON string
  r = s.call("GetJob", {{"id", id}});
  ASSERT_EQ(r.status, 200) << r.body;
  j = json_body(r)["job"];
  EXPECT_EQ(j["id"], id);
  EXPECT_EQ(j["queue"], "later");
  EXPECT_EQ(j["state"], "scheduled");
  EXPECT_EQ(j["payload"], R"({"a":1})");
  EXPECT_EQ(j["maxAttempts"], 2);
  EXPECT_EQ(j["priority"], 5);
  EXPECT_EQ(j["finalizedAt"], "");

  r = s.call(
      "EnqueueBatch",
      {{"jobs", {{{"queue", "now"}, {"kind", "noop"}}, {{"queue", "now"}, {"kind", "noop"}}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(json_body(r)["ids"].size(), 2u);
  const std::string done_id = json_body(r)["ids"][1];
  // The engine runs them: GetJob sees the job completed.
  ASSERT_TRUE(test::wait_until([&] {
    auto g = s.call("GetJob", {{"id", done_id}});
    return g.status == 200 && json_body(g)["job"]["state"] == "completed";
  }));

  r = s.call("PauseQueue", {{"queue", "later"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "{}");
  r = s.call("ListQueues", json::object());
  ASSERT_EQ(r.status, 200) << r.body;
  std::map<std::string, json> queues;
  const json listed = json_body(r);
  for (const auto& q : listed["queues"]) queues[q["queue"]] = q;
  ASSERT_EQ(queues.size(), 4u) << r.body;  // email, later, now, sms
  EXPECT_EQ(queues["later"]["paused"], true);
  EXPECT_EQ(queues["later"]["scheduled"], "1");
  EXPECT_EQ(queues["now"]["completed"], "2");
  EXPECT_EQ(queues["now"]["dispatched"], "2");
  EXPECT_EQ(queues["now"]["limit"], json::parse(R"({"source":"none"})"));
  EXPECT_EQ(queues["email"]["limit"],
            json::parse(R"({"ratePerSec":50.0,"burst":10,"scope":"process","source":"override"})"));
  r = s.call("ResumeQueue", {{"queue", "later"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json relisted = json_body(s.call("ListQueues", json::object()));
  for (const auto& q : relisted["queues"]) {
    if (q["queue"] == "later") {
      EXPECT_EQ(q["paused"], false);
    }
  }

  r = s.call("DeleteQueueRateLimit", {{"queue", "email"}});
  ASSERT_EQ(r.status, 200) << r.body;
  expect_error(s.call("DeleteQueueRateLimit", {{"queue", "email"}}), 404, "not_found",
               "queue email has no rate-limit override");
  expect_error(s.call("GetJob", {{"id", "99999"}}), 404, "not_found", "job 99999 not found");
  EXPECT_EQ(json_body(s.call("ListRateLimits", json::object()))["overrides"].size(), 1u);

  // An empty body is an empty message.
  r = s.post(Server::api_path("ListQueues"), "");
  EXPECT_EQ(r.status, 200) << r.body;
}

// Scope, the kill switch and cost over HTTP (JSON codec); the connect-es
// test covers the binary codec with a stock client.
TEST(AdminApi, ScopeKillSwitchAndCostOverHttp) {
  test::TempDir dir;
  Server s(dir, kOpen);
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  auto r = s.call("SetQueueRateLimit",
                  {{"queue", "shared"}, {"ratePerSec", 5}, {"burst", 4}, {"scope", "fleet"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json_body(r)["override"]["scope"], "fleet");
  json j = json_body(s.call("ListRateLimits", json::object()));
  EXPECT_EQ(j["overrides"][0]["scope"], "fleet");
  EXPECT_EQ(j["enabledSource"], "config");

  r = s.call("SetRateLimitingEnabled", {{"enabled", false}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json_body(r), json::parse(R"({"enabled":false,"enabledSource":"storage"})"));
  j = json_body(s.call("ListRateLimits", json::object()));
  EXPECT_EQ(j.value("enabled", true), false);
  EXPECT_EQ(j["enabledSource"], "storage");
  r = s.call("SetRateLimitingEnabled", {{"enabled", true}});
  EXPECT_EQ(json_body(r), json::parse(R"({"enabled":true,"enabledSource":"storage"})"));

  r = s.call(
      "Enqueue",
      {{"job", {{"queue", "shared"}, {"kind", "noop"}, {"cost", 4}, {"delaySeconds", 3600}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  r = s.call("GetJob", {{"id", json_body(r)["id"]}});
  EXPECT_EQ(json_body(r)["job"]["cost"], 4);
  // Over the queue's burst: refused naming cost, nothing stored.
  expect_error(s.call("Enqueue", {{"job", {{"queue", "shared"}, {"kind", "noop"}, {"cost", 5}}}}),
               400, "invalid_argument", "cost");
  const json listed = json_body(s.call("ListQueues", json::object()));
  EXPECT_EQ(listed["queues"][0]["scheduled"], "1");
  EXPECT_EQ(listed["queues"][0]["pending"], "0");
}

// A job's key over HTTP (JSON codec): enqueued, answered by GetJob and
// ListJobs (absent: the empty key); refused naming the field when too long
// or not a string, nothing stored.
TEST(AdminApi, JobKeyOverHttp) {
  test::TempDir dir;
  Server s(dir, kOpen);
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  auto r = s.call("Enqueue", {{"job",
                               {{"queue", "keyed"},
                                {"kind", "noop"},
                                {"key", "tenant-\xc3\xa9"},
                                {"delaySeconds", 3600}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  r = s.call("GetJob", {{"id", json_body(r)["id"]}});
  EXPECT_EQ(json_body(r)["job"]["key"], "tenant-\xc3\xa9");
  r = s.call("EnqueueBatch",
             {{"jobs",
               {{{"queue", "keyed"}, {"kind", "noop"}, {"delaySeconds", 3600}},
                {{"queue", "keyed"}, {"kind", "noop"}, {"key", "b"}, {"delaySeconds", 3600}}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json jobs = json_body(s.call("ListJobs", {{"queue", "keyed"}}))["jobs"];
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0]["key"], "tenant-\xc3\xa9");
  EXPECT_EQ(jobs[1]["key"], "");
  EXPECT_EQ(jobs[2]["key"], "b");
  expect_error(
      s.call("Enqueue",
             {{"job", {{"queue", "keyed"}, {"kind", "noop"}, {"key", std::string(201, 'k')}}}}),
      400, "invalid_argument", "job.key: key is 201 bytes; the longest is 200 bytes (UTF-8)");
  expect_error(s.call("Enqueue", {{"job", {{"queue", "keyed"}, {"kind", "noop"}, {"key", 42}}}}),
               400, "invalid_argument", "job.key: must be a string, got 42");
  EXPECT_EQ(json_body(s.call("ListJobs", {{"queue", "keyed"}}))["jobs"].size(), 3u);
}

// Settings of keys on a real server: stored and answered, shown by
// ListKeys, refusals with their HTTP status and the field.
TEST(AdminApi, KeySettingsOverHttp) {
  test::TempDir dir;
  Server s(dir, std::string(kOpen) + "[queues.plain]\nfairness = \"fifo\"\n");
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  ASSERT_EQ(s.call("PauseQueue", {{"queue", "tenants"}}).status, 200);
  ASSERT_EQ(
      s.call("Enqueue", {{"job", {{"queue", "tenants"}, {"kind", "noop"}, {"key", "a"}}}}).status,
      200);
  auto r = s.call("SetQueueRateLimit",
                  {{"queue", "tenants"}, {"key", "a"}, {"ratePerSec", 2}, {"burst", 3}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json_body(r)["keySetting"]["limit"]["ratePerSec"], 2.0);
  r = s.call("SetKeyWeight", {{"queue", "tenants"}, {"key", "a"}, {"weight", 6}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json_body(r)["keySetting"]["weight"], 6);
  EXPECT_EQ(json_body(r)["keySetting"]["limit"]["burst"], 3);  // the limit stays
  const json key = json_body(s.call("ListKeys", {{"queue", "tenants"}}))["keys"][0];
  EXPECT_EQ(key["limitSource"], "override");
  EXPECT_EQ(key["weight"], 6);
  ASSERT_EQ(json_body(s.call("ListRateLimits", json::object()))["keySettings"].size(), 1u);

  expect_error(s.call("SetKeyWeight", {{"queue", "tenants"}, {"key", "a"}, {"weight", 0}}), 400,
               "invalid_argument", "weight: weight must be 1..1000, got 0");
  expect_error(s.call("SetQueueRateLimit",
                      {{"queue", "plain"}, {"perKey", true}, {"ratePerSec", 1}, {"burst", 1}}),
               400, "invalid_argument", "queue: queue plain has fairness = \"fifo\"");
  expect_error(
      s.call(
          "SetQueueRateLimit",
          {{"queue", "tenants"}, {"key", "a"}, {"perKey", true}, {"ratePerSec", 1}, {"burst", 1}}),
      400, "invalid_argument", "perKey: give key");
  expect_error(s.call("SetQueueRateLimit",
                      {{"queue", "tenants"}, {"key", 7}, {"ratePerSec", 1}, {"burst", 1}}),
               400, "invalid_argument", "key: must be a string, got 7");
  ASSERT_EQ(s.call("DeleteKeyWeight", {{"queue", "tenants"}, {"key", "a"}}).status, 200);
  expect_error(s.call("DeleteKeyWeight", {{"queue", "tenants"}, {"key", "a"}}), 404, "not_found",
               "queue tenants key \"a\" has no weight set");
  ASSERT_EQ(s.call("DeleteQueueRateLimit", {{"queue", "tenants"}, {"key", "a"}}).status, 200);
  expect_error(s.call("DeleteQueueRateLimit", {{"queue", "tenants"}, {"perKey", true}}), 404,
               "not_found", "queue tenants has no rate limit for every key");
  EXPECT_EQ(json_body(s.call("ListRateLimits", json::object())).value("keySettings", json::array()),
            json::array());
}

// The kill switch over HTTP in both codecs: enabled must be sent, as a JSON
// boolean (binary: the field present). Refused bodies change nothing, on the
// server nor in storage; true and false still switch.
TEST(AdminApi, KillSwitchNeedsAnExplicitBooleanOverHttp) {
  test::TempDir dir;
  Server s(dir, kOpen);
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  const std::string path = Server::api_path("SetRateLimitingEnabled");
  const std::vector<std::string> proto = {"Content-Type: application/proto"};
  const auto state = [&] {
    const json j = json_body(s.call("ListRateLimits", json::object()));
    return j.value("enabled", false) ? "on from " + j.value("enabledSource", std::string())
                                     : "off from " + j.value("enabledSource", std::string());
  };
  const auto expect_all_refused = [&] {
    for (const char* body : {"{}", "", R"({"enabled":null})"}) {
      SCOPED_TRACE(body);
      expect_error(s.post(path, body), 400, "invalid_argument",
                   R"(enabled: is required; send {"enabled": true} or {"enabled": false})");
    }
    for (const char* body : {R"({"enabled":"no"})", R"({"enabled":"false"})",
                             R"({"enabled":"true"})", R"({"enabled":0})", R"({"enabled":1})"}) {
      SCOPED_TRACE(body);
      expect_error(s.post(path, body), 400, "invalid_argument",
                   "enabled: must be true or false (a JSON boolean), got ");
    }
    expect_error(s.post(path, "{'enabled':'no'}"), 400, "invalid_argument",
                 "body is not valid JSON");
    // Binary: the empty message (false without presence), field 1 as a string.
    expect_error(s.post(path, "", proto), 400, "invalid_argument", "enabled: is required");
    expect_error(s.post(path, std::string("\x0a\x02no", 4), proto), 400, "invalid_argument",
                 "enabled: is required");
  };
  expect_all_refused();
  EXPECT_EQ(state(), "on from config");  // nothing stored

  auto r = s.post(path, std::string("\x08\x00", 2), proto);  // binary false, present
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("content-type"), "application/proto");
  EXPECT_EQ(state(), "off from storage");
  expect_all_refused();
  EXPECT_EQ(state(), "off from storage");
  r = s.call("SetRateLimitingEnabled", {{"enabled", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(state(), "on from storage");
  r = s.call("SetRateLimitingEnabled", {{"enabled", false}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(state(), "off from storage");
  r = s.post(path, std::string("\x08\x01", 2), proto);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(state(), "on from storage");
}

// ---- validation -----------------------------------------------------------------

TEST(AdminApi, EveryValidationErrorIs400NamingTheField) {
  test::TempDir dir;
  Server s(dir, kOpen);
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  struct Case {
    const char* method;
    json body;
    const char* message_part;
  };
  const std::vector<Case> cases = {
      {"SetQueueRateLimit",
       {{"queue", "q"}, {"ratePerSec", 0}, {"burst", 1}},
       "ratePerSec: rate must be a finite number greater than 0"},
      {"SetQueueRateLimit",
       {{"queue", "q"}, {"ratePerSec", -1}, {"burst", 1}},
       "ratePerSec: rate must be a finite number greater than 0"},
      {"SetQueueRateLimit",
       {{"queue", "q"}, {"ratePerSec", "NaN"}, {"burst", 1}},
       "ratePerSec: must be a plain decimal number"},
      {"SetQueueRateLimit",
       {{"queue", "q"}, {"ratePerSec", "Infinity"}, {"burst", 1}},
       "ratePerSec: must be a plain decimal number"},
      {"SetQueueRateLimit",
       {{"queue", "q"}, {"ratePerSec", "fast"}, {"burst", 1}},
       "ratePerSec: must be a plain decimal number"},
      {"SetQueueRateLimit",
       {{"queue", "q"}, {"ratePerSec", 5}},
       "burst: burst must be a whole number from 1"},
      {"SetQueueRateLimit",
       {{"queue", "q"}, {"ratePerSec", 5}, {"burst", 0}},
       "burst: burst must be a whole number from 1"},
      {"SetQueueRateLimit",
       {{"queue", "q"}, {"ratePerSec", 5}, {"burst", 1.5}},
       "burst: must be a whole number"},
      {"SetQueueRateLimit",
       {{"queue", "q"}, {"ratePerSec", 5}, {"burst", 4294967296}},
       "burst: must be a whole number from 0 to 4294967295"},
      {"SetQueueRateLimit",
       {{"queue", "bad queue"}, {"ratePerSec", 5}, {"burst", 1}},
       "queue: invalid queue name"},
      {"SetQueueRateLimit",
       {{"queue", "x'); DROP TABLE jobs;--"}, {"ratePerSec", 5}, {"burst", 1}},
       "queue: invalid queue name"},
      {"SetQueueRateLimit", {{"ratePerSec", 5}, {"burst", 1}}, "queue: invalid queue name"},
      {"SetQueueRateLimit",
       {{"queue", 5}, {"ratePerSec", 5}, {"burst", 1}},
       "queue: must be a string"},
      {"SetQueueRateLimit",
       {{"queue", "q"}, {"ratePerSec", 5}, {"burst", 1}, {"limit", 5}},
       "limit: unknown field of SetQueueRateLimitRequest (known: queue, ratePerSec, burst, "
       "scope, key, perKey)"},
      {"SetQueueRateLimit",
       {{"queue", "q"}, {"ratePerSec", 5}, {"burst", 1}, {"scope", "planet"}},
       "scope: "},
      {"SetQueueRateLimit",
       {{"queue", "q"}, {"ratePerSec", 5}, {"burst", 1}, {"scope", 1}},
       "scope: must be a string"},
      {"SetRateLimitingEnabled", {{"enabled", "off"}}, "enabled: must be true or false"},
      {"Enqueue",
       {{"job", {{"queue", "q"}, {"kind", "noop"}, {"cost", -1}}}},
       "job.cost: cost must be a whole number of tokens from 1 to 1000000, got -1"},
      {"Enqueue",
       {{"job", {{"queue", "q"}, {"kind", "noop"}, {"cost", 1.5}}}},
       "job.cost: must be a whole number"},
      {"EnqueueBatch",
       {{"jobs",
         {{{"queue", "q"}, {"kind", "noop"}},
          {{"queue", "q"}, {"kind", "noop"}, {"cost", 2000000}}}}},
       "jobs[1].cost: cost must be a whole number of tokens from 1 to 1000000"},
      {"DeleteQueueRateLimit", {{"queue", ""}}, "queue: invalid queue name"},
      {"PauseQueue", {{"queue", "a b"}}, "queue: invalid queue name"},
      {"ResumeQueue", {{"queue", "-x"}}, "queue: invalid queue name"},
      {"Enqueue", json::object(), "job.queue: invalid queue name"},
      {"Enqueue", {{"job", {{"queue", "q"}}}}, "job.kind: invalid job kind"},
      {"Enqueue",
       {{"job", {{"queue", "q"}, {"kind", "noop"}, {"payload", "{x"}}}},
       "job.payload: payload is not valid JSON"},
      {"Enqueue",
       {{"job", {{"queue", "q"}, {"kind", "noop"}, {"maxAttempts", 0}}}},
       "job.maxAttempts: max_attempts must be >= 1"},
      {"Enqueue",
       {{"job", {{"queue", "q"}, {"kind", "noop"}, {"delaySeconds", -5}}}},
       "job.delaySeconds: delay must be a number of seconds"},
      {"Enqueue",
       {{"job", {{"queue", "q"}, {"kind", "noop"}, {"priority", "high"}}}},
       "job.priority: must be a whole number"},
      {"Enqueue", {{"job", "q"}}, "job: must be a JSON object (a NewJob message), got \"q\""},
      {"Enqueue",
       {{"job", {{"queue", "q"}, {"kind", "noop"}, {"delay", 5}}}},
       "job.delay: unknown field of NewJob"},
      {"EnqueueBatch",
       {{"jobs", {{{"queue", "q"}, {"kind", "noop"}}, {{"queue", "q"}, {"kind", "bad kind"}}}}},
       "jobs[1].kind: invalid job kind"},
      {"EnqueueBatch", {{"jobs", {5}}}, "jobs[0]: must be a JSON object (a NewJob message)"},
      {"GetJob", {{"id", 0}}, "id: must be a job id"},
      {"GetJob", {{"id", "abc"}}, "id: must be a whole number"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.method) + " " + c.body.dump());
    expect_error(s.call(c.method, c.body), 400, "invalid_argument", c.message_part);
  }
  // Nothing was stored by any of them (the batch is all or none).
  auto r = s.call("ListQueues", json::object());
  EXPECT_EQ(json_body(r)["queues"], json::array()) << r.body;
  EXPECT_EQ(json_body(s.call("ListRateLimits", json::object()))["overrides"], json::array());
}

// ---- malformed requests ------------------------------------------------------------

TEST(AdminApi, MalformedAndOversizedRequests) {
  test::TempDir dir;
  Server s(dir, std::string(kOpen) + "max_body_bytes = 1024\n");
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  const std::string list = Server::api_path("ListQueues");

  expect_error(s.post(list, "{\"queue\": "), 400, "invalid_argument", "body is not valid JSON");
  expect_error(s.post(list, "[1, 2]"), 400, "invalid_argument", "body must be a JSON object");
  expect_error(
      s.post(list, "{}", {"Content-Type: application/json", "Connect-Protocol-Version: 2"}), 400,
      "invalid_argument", "Connect-Protocol-Version");

  auto r = s.post(list, "{}", {"Content-Type: text/plain"});
  expect_error(r, 415, "unknown", "Content-Type must be application/json or application/proto");
  EXPECT_EQ(r.header("accept-post"), "application/json, application/proto");
  EXPECT_EQ(s.post(list, "{}", {"Content-Type: application/json; charset=utf-8"}).status, 200);
  EXPECT_EQ(s.post(list, "{}", {"Content-Type: Application/JSON"}).status, 200);

  r = s.get(list);
  expect_error(r, 405, "unknown", "POST");
  EXPECT_EQ(r.header("allow"), "POST");
  r = http_send(s.port(), http_request("DELETE", list, {}, ""));
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("allow"), "POST");

  expect_error(s.post("/conveyor.v1.AdminService/DropEverything", "{}"), 404, "unimplemented",
               "no API method at /conveyor.v1.AdminService/DropEverything");

  // Bodies over max_body_bytes: Content-Length and chunked alike.
  const std::string big = json{{"queue", std::string(2000, 'a')}}.dump();
  expect_error(s.post(Server::api_path("PauseQueue"), big), 429, "resource_exhausted",
               "max_body_bytes");
  std::string chunked =
      "POST " + Server::api_path("PauseQueue") +
      " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 4; ++i) chunked += "200\r\n" + std::string(512, ' ') + "\r\n";
  chunked += "0\r\n\r\n";
  r = http_send(s.port(), chunked);
  EXPECT_EQ(r.status, 429) << r.body;
  // A body just under the limit is fine.
  EXPECT_EQ(s.call("PauseQueue", {{"queue", std::string(100, 'a')}}).status, 200);
  // The server is still serving.
  EXPECT_EQ(s.call("ListQueues", json::object()).status, 200);
}

// ---- auth ---------------------------------------------------------------------------

TEST(AdminApi, BearerTokenFromTheEnvironment) {
  test::TempDir dir;
  Server s(dir, "", {"CONVEYOR_ADMIN_TOKEN=s3cret-token"});
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  const json set = {{"queue", "email"}, {"ratePerSec", 5}, {"burst", 1}};
  expect_error(s.call("SetQueueRateLimit", set), 401, "unauthenticated",
               "missing Authorization header");
  expect_error(s.call("SetQueueRateLimit", set, {"Authorization: Bearer s3cret-tokeN"}), 401,
               "unauthenticated", "wrong admin token");
  expect_error(s.call("SetQueueRateLimit", set, {"Authorization: Bearer s3cret-token-and-more"}),
               401, "unauthenticated", "wrong admin token");
  expect_error(s.call("ListQueues", json::object(), {"Authorization: Basic czNjcmV0"}), 401,
               "unauthenticated", "Bearer");
  EXPECT_EQ(json_body(s.call("ListRateLimits", json::object(),
                             {"Authorization: Bearer s3cret-token"}))["overrides"],
            json::array());  // nothing was set by the refused calls
  EXPECT_EQ(s.call("SetQueueRateLimit", set, {"Authorization: Bearer s3cret-token"}).status, 200);
  // Unknown methods are not revealed without a token either.
  expect_error(s.post("/conveyor.v1.AdminService/Nope", "{}"), 401, "unauthenticated",
               "Authorization");
  // /metrics needs the token; the dashboard's files do not.
  expect_error(s.get("/metrics"), 401, "unauthenticated", "Authorization");
  auto m = s.get("/metrics", {"Authorization: Bearer s3cret-token"});
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("conveyor_ratelimit_throttled_total"), std::string::npos);
  EXPECT_EQ(s.get("/").status, 200);
}

TEST(AdminApi, AConfiguredTokenIsRequiredEvenWithAllowUnauthenticated) {
  test::TempDir dir;
  Server s(dir, "admin_token = \"tok\"\nallow_unauthenticated = true\n");
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  expect_error(s.call("PauseQueue", {{"queue", "q"}}), 401, "unauthenticated",
               "missing Authorization header");
  expect_error(s.call("Enqueue", {{"job", {{"queue", "q"}, {"kind", "noop"}}}}), 401,
               "unauthenticated", "missing Authorization header");
  expect_error(s.get("/metrics"), 401, "unauthenticated", "Authorization");
  expect_error(s.call("ListQueues", json::object(), {"Authorization: Bearer nope"}), 401,
               "unauthenticated", "wrong");
  // Nothing was paused or enqueued by the refused calls.
  EXPECT_EQ(
      json_body(s.call("ListQueues", json::object(), {"Authorization: Bearer tok"}))["queues"],
      json::array());
  EXPECT_NE(s.process().stderr_text().find("allow_unauthenticated is ignored"), std::string::npos)
      << s.process().stderr_text();
}

// The shipped config/conveyor.toml, storage moved into dir and the plugins of
// this tree; its [server] section as shipped.
std::filesystem::path shipped_config(const test::TempDir& dir) {
  std::string text =
      test::read_file(std::string(CONVEYOR_TEST_SOURCE_DIR) + "/config/conveyor.toml");
  const auto replace = [&](const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
  };
  replace("path = \"data/conveyor.db\"", "path = \"" + (dir / "conveyor.db").string() + "\"");
  replace("plugin = \"sqlite\"",
          "plugin = \"sqlite\"\nplugin_dir = \"" + std::string(CONVEYOR_TEST_PLUGIN_DIR) + "\"");
  const auto path = dir / "shipped.toml";
  std::ofstream(path) << text;
  return path;
}

// The issue's report: the shipped config, a token and a public listen address
// from the environment; a call without Authorization was accepted.
TEST(AdminApi, TheShippedConfigWithATokenOnAPublicAddressNeedsTheToken) {
  test::TempDir dir;
  const uint16_t port = test::free_port();
  test::Process p(
      {"--config", shipped_config(dir).string(), "serve"},
      {"CONVEYOR_ADMIN_TOKEN=s3cret", "CONVEYOR_SERVER_LISTEN=0.0.0.0:" + std::to_string(port)});
  ASSERT_TRUE(test::wait_until([&] {
    return p.wait(std::chrono::milliseconds(1)) >= 0 ||
           test::http_send(port, test::http_request("GET", "/", {}, "")).status != 0;
  }));
  ASSERT_LT(p.wait(std::chrono::milliseconds(1)), 0) << p.stderr_text();
  const auto post = [&](const std::string& method, const json& body,
                        std::vector<std::string> headers) {
    headers.push_back("Content-Type: application/json");
    return test::http_send(
        port, test::http_request("POST", Server::api_path(method), headers, body.dump()));
  };
  expect_error(post("PauseQueue", {{"queue", "q"}}, {}), 401, "unauthenticated",
               "missing Authorization header");
  expect_error(post("Enqueue", {{"job", {{"queue", "q"}, {"kind", "noop"}}}}, {}), 401,
               "unauthenticated", "missing Authorization header");
  EXPECT_EQ(
      json_body(post("ListQueues", json::object(), {"Authorization: Bearer s3cret"}))["queues"],
      json::array());
  EXPECT_NE(p.stderr_text().find("bearer token required"), std::string::npos) << p.stderr_text();
}

TEST(AdminApi, TheShippedConfigOnAPublicAddressWithoutATokenDoesNotStart) {
  test::TempDir dir;
  auto r = test::run_conveyor({"--config", shipped_config(dir).string(), "serve"},
                              {"CONVEYOR_SERVER_LISTEN=0.0.0.0:18080"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("conveyor: [server] allow_unauthenticated = \"loopback\" allows calls "
                       "without a token only on a loopback address, but listen = 0.0.0.0:18080"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "conveyor.db"));  // refused before storage opened
}

TEST(AdminApi, TheShippedConfigServesLoopbackWithoutAToken) {
  test::TempDir dir;
  const uint16_t port = test::free_port();
  test::Process p({"--config", shipped_config(dir).string(), "serve"},
                  {"CONVEYOR_SERVER_LISTEN=127.0.0.1:" + std::to_string(port)});
  ASSERT_TRUE(test::wait_until([&] {
    return p.wait(std::chrono::milliseconds(1)) >= 0 ||
           test::http_send(port, test::http_request("GET", "/", {}, "")).status != 0;
  }));
  const auto r =
      test::http_send(port, test::http_request("POST", Server::api_path("ListQueues"),
                                               {"Content-Type: application/json"}, "{}"));
  EXPECT_EQ(r.status, 200) << r.body << p.stderr_text();
}

TEST(AdminApi, NoTokenAndNoPermissionOnLoopbackRefusesCallsAndSaysWhy) {
  test::TempDir dir;
  Server s(dir, "");
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  expect_error(s.call("ListQueues", json::object()), 401, "unauthenticated",
               "allow_unauthenticated");
  expect_error(s.get("/metrics"), 401, "unauthenticated", "admin_token");
}

TEST(AdminApi, ReadOnlyRefusesEveryMutation) {
  test::TempDir dir;
  Server s(dir, std::string(kOpen) + "read_only = true\n");
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  const std::vector<std::pair<std::string, json>> mutations = {
      {"SetQueueRateLimit", {{"queue", "q"}, {"ratePerSec", 5}, {"burst", 1}}},
      {"DeleteQueueRateLimit", {{"queue", "q"}}},
      {"PauseQueue", {{"queue", "q"}}},
      {"ResumeQueue", {{"queue", "q"}}},
      {"Enqueue", {{"job", {{"queue", "q"}, {"kind", "noop"}}}}},
      {"EnqueueBatch", {{"jobs", {{{"queue", "q"}, {"kind", "noop"}}}}}},
      {"SetRateLimitingEnabled", {{"enabled", false}}},
      {"SetQueueRateLimit", {{"queue", "q"}, {"key", "a"}, {"ratePerSec", 5}, {"burst", 1}}},
      {"SetKeyWeight", {{"queue", "q"}, {"key", "a"}, {"weight", 2}}},
      {"DeleteKeyWeight", {{"queue", "q"}, {"key", "a"}}},
  };
  for (const auto& [method, body] : mutations)
    expect_error(s.call(method, body), 403, "permission_denied", "read-only");
  EXPECT_EQ(json_body(s.call("ListQueues", json::object()))["queues"], json::array());
  const auto limits = s.call("ListRateLimits", json::object());
  EXPECT_EQ(limits.status, 200);
  EXPECT_EQ(json_body(limits)["enabled"], true);  // the switch was not stored
  EXPECT_EQ(json_body(limits)["enabledSource"], "config");
  expect_error(s.call("GetJob", {{"id", 1}}), 404, "not_found", "job 1");
}

// ---- start-up -------------------------------------------------------------------------

TEST(AdminApi, RefusesANonLoopbackAddressWithoutAToken) {
  test::TempDir dir;
  const auto config = test::write_sqlite_config(dir, "[server]\nlisten = \"0.0.0.0:18080\"\n");
  auto r = test::run_conveyor({"--config", config.string(), "serve"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("conveyor: [server] listen = 0.0.0.0:18080 is not a loopback address: set "
                       "admin_token (or CONVEYOR_ADMIN_TOKEN), or allow_unauthenticated = true to "
                       "accept the risk\n"),
            std::string::npos)
      << r.err;
}

TEST(AdminApi, ATakenPortIsARuntimeErrorAndNothingRuns) {
  test::TempDir dir;
  Server first(dir, kOpen);
  ASSERT_TRUE(first.ready()) << first.process().stderr_text();
  test::TempDir other;
  const auto config = test::write_sqlite_config(
      other, "[server]\nlisten = \"127.0.0.1:" + std::to_string(first.port()) + "\"\n" + kOpen);
  auto r = test::run_conveyor({"--config", config.string(), "serve"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("cannot listen on 127.0.0.1:" + std::to_string(first.port())),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("engine started"), std::string::npos) << r.err;
}

TEST(AdminApi, DashboardFilesAndGracefulStop) {
  test::TempDir dir;
  Server s(dir, kOpen);
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  auto r = s.get("/");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type").rfind("text/html", 0), 0u) << r.header("content-type");
  EXPECT_NE(r.body.find("<html"), std::string::npos);
  EXPECT_EQ(s.get("/no/such/file.js").status, 404);
  EXPECT_EQ(s.get("/../etc/passwd").status, 404);
  s.process().signal(SIGINT);
  EXPECT_EQ(s.process().wait(), 0) << s.process().stderr_text();
  const std::string err = s.process().stderr_text();
  EXPECT_NE(err.find("admin server stopped"), std::string::npos) << err;
  EXPECT_LT(err.find("admin server stopped"), err.find("engine stopped")) << err;
  EXPECT_EQ(s.get("/").status, 0);  // nothing listens any more
}

// ---- metrics ------------------------------------------------------------------------------

// A strict reader of the Prometheus text format 0.0.4, as far as /metrics
// uses it: every line is # HELP, # TYPE or a sample; a family's TYPE comes
// before its samples, once; samples of a family are contiguous; no series
// twice; values parse; histogram buckets are cumulative, end with le="+Inf",
// and +Inf equals _count.
struct Exposition {
  std::map<std::string, std::string> types;  // family -> type
  std::map<std::string, double> samples;     // "name{labels}" -> value
  std::string error;                         // empty when valid
};

Exposition parse_exposition(const std::string& text) {
  Exposition e;
  static const std::regex kHelp(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*)");
  static const std::regex kType(
      R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
  static const std::regex kSample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*)\})? (\S+))");
  static const std::regex kLabel(R"(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)\")");
  if (text.empty() || text.back() != '\n') return e.error = "must end with a newline", e;
  std::istringstream in(text);
  std::string line, current;  // current: the family whose samples are being read
  std::set<std::string> finished;
  // histogram series key (labels without le) -> (last cumulative, +Inf seen value)
  std::map<std::string, std::pair<double, double>> buckets;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const std::string where = "line " + std::to_string(n) + ": " + line;
    std::smatch m;
    if (std::regex_match(line, m, kHelp)) continue;
    if (std::regex_match(line, m, kType)) {
      const std::string family = m[1];
      if (e.types.count(family)) return e.error = "TYPE twice: " + where, e;
      if (!current.empty()) finished.insert(current);
      current = family;
      e.types[family] = m[2];
      continue;
    }
    if (!std::regex_match(line, m, kSample)) return e.error = "not a sample: " + where, e;
    const std::string name = m[1];
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0 &&
          e.types.count(name.substr(0, name.size() - s.size())) &&
          e.types[name.substr(0, name.size() - s.size())] == "histogram")
        family = name.substr(0, name.size() - s.size());
    }
    if (!e.types.count(family)) return e.error = "sample before its TYPE: " + where, e;
    if (family != current || finished.count(family))
      return e.error = "family not contiguous: " + where, e;
    const std::string value_text = m[4];
    double value = 0;
    if (value_text == "+Inf")
      value = INFINITY;
    else if (value_text == "-Inf")
      value = -INFINITY;
    else if (value_text == "NaN")
      value = NAN;
    else {
      size_t used = 0;
      try {
        value = std::stod(value_text, &used);
      } catch (...) {
        used = 0;
      }
      if (used != value_text.size()) return e.error = "bad value: " + where, e;
    }
    const std::string key = name + "{" + std::string(m[3]) + "}";
    if (e.samples.count(key)) return e.error = "series twice: " + where, e;
    e.samples[key] = value;
    if (e.types[family] == "counter" && !(value >= 0))
      return e.error = "negative counter: " + where, e;
    if (e.types[family] == "histogram") {
      std::string labels = m[3], le, rest;
      for (std::sregex_iterator it(labels.begin(), labels.end(), kLabel), end; it != end; ++it) {
        if ((*it)[1] == "le")
          le = (*it)[2];
        else
          rest += (*it)[0].str() + ",";
      }
      const std::string series = family + "{" + rest + "}";
      if (name == family + "_bucket") {
        if (le.empty()) return e.error = "bucket without le: " + where, e;
        auto& [last, inf] = buckets[series];
        if (value < last) return e.error = "buckets not cumulative: " + where, e;
        last = value;
        if (le == "+Inf") inf = value;
      } else if (name == family + "_count") {
        if (!buckets.count(series) || buckets[series].second != value)
          return e.error = "_count differs from le=\"+Inf\": " + where, e;
      }
    }
  }
  return e;
}

TEST(PrometheusExposition, TheStrictParserRejectsBrokenText) {
  EXPECT_EQ(parse_exposition("# TYPE a counter\na 1\n").error, "");
  EXPECT_NE(parse_exposition("a 1\n").error, "");                           // no TYPE
  EXPECT_NE(parse_exposition("# TYPE a counter\na{q=\"x} 1\n").error, "");  // bad label
  EXPECT_NE(parse_exposition("# TYPE a counter\na 1\n# TYPE b gauge\nb 1\na 2\n").error, "");
  EXPECT_NE(
      parse_exposition("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n").error,
      "");
  EXPECT_NE(parse_exposition("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 3\n").error, "");
  EXPECT_NE(parse_exposition("# TYPE a counter\na one\n").error, "");
}

TEST(AdminApi, MetricsCountThrottlingAndParseAsPrometheusText) {
  test::TempDir dir;
  Server s(dir, kOpen);
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  ASSERT_EQ(
      s.call("SetQueueRateLimit", {{"queue", "slow"}, {"ratePerSec", 5}, {"burst", 1}}).status,
      200);
  json jobs = json::array();
  for (int i = 0; i < 30; ++i) jobs.push_back({{"queue", "slow"}, {"kind", "noop"}});
  jobs.push_back({{"queue", "fast"}, {"kind", "noop"}});
  ASSERT_EQ(s.call("EnqueueBatch", {{"jobs", jobs}}).status, 200);

  auto throttled = [&](const std::string& queue) -> double {
    auto m = parse_exposition(s.get("/metrics").body);
    auto it = m.samples.find("conveyor_ratelimit_throttled_total{queue=\"" + queue + "\"}");
    return it == m.samples.end() ? -1 : it->second;
  };
  ASSERT_TRUE(test::wait_until([&] { return throttled("slow") > 0; })) << s.get("/metrics").body;
  ASSERT_TRUE(test::wait_until([&] {
    auto m = parse_exposition(s.get("/metrics").body);
    return m.samples["conveyor_jobs_completed_total{queue=\"fast\"}"] == 1;
  }));
  // The pending gauge (storage's count, refreshed at most once a second)
  // shows the limited queue's backlog: 5/s from a bucket of 1 takes ~6 s.
  ASSERT_TRUE(test::wait_until([&] {
    auto m = parse_exposition(s.get("/metrics").body);
    return m.samples["conveyor_queue_pending{queue=\"slow\"}"] > 0;
  }));

  auto r = s.get("/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  const Exposition m = parse_exposition(r.body);
  ASSERT_EQ(m.error, "") << r.body;
  for (const char* counter : {"conveyor_ratelimit_throttled_total", "conveyor_jobs_enqueued_total",
                              "conveyor_jobs_dispatched_total", "conveyor_jobs_completed_total",
                              "conveyor_jobs_failed_total", "conveyor_jobs_retried_total"})
    EXPECT_EQ(m.types.at(counter), "counter") << counter;
  EXPECT_EQ(m.types.at("conveyor_queue_pending"), "gauge");
  EXPECT_EQ(m.types.at("conveyor_job_pickup_latency_seconds"), "histogram");
  EXPECT_EQ(m.types.at("conveyor_job_duration_seconds"), "histogram");
  EXPECT_GT(m.samples.at("conveyor_ratelimit_throttled_total{queue=\"slow\"}"), 0);
  EXPECT_EQ(m.samples.at("conveyor_ratelimit_throttled_total{queue=\"fast\"}"), 0);  // unlimited
  EXPECT_EQ(m.samples.at("conveyor_jobs_enqueued_total{queue=\"slow\"}"), 30);
  // The limited queue still has a backlog.
  EXPECT_LT(m.samples.at("conveyor_jobs_dispatched_total{queue=\"slow\"}"), 30);
  EXPECT_LT(m.samples.at("conveyor_jobs_dispatched_total{queue=\"slow\"}"), 30);
  EXPECT_EQ(m.samples.at("conveyor_job_duration_seconds_count{queue=\"fast\"}"), 1);
  EXPECT_EQ(m.samples.at("conveyor_job_pickup_latency_seconds_bucket{queue=\"fast\",le=\"+Inf\"}"),
            1);
  // ListQueues shows the same counter.
  const json listed = json_body(s.call("ListQueues", json::object()));
  for (const auto& q : listed["queues"]) {
    if (q["queue"] == "slow") {
      EXPECT_GT(std::stoll(q["throttled"].get<std::string>()), 0);
    }
  }
  // And it keeps rising while the queue defers dispatch.
  const double before = throttled("slow");
  EXPECT_TRUE(test::wait_until([&] { return throttled("slow") > before; }));
}

}  // namespace
}  // namespace conveyor
