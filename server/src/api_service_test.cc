// The API's methods on a real engine over the real SQLite plugin, without
// HTTP: what each returns and how each refuses bad input. Requests and
// answers are written here as JSON through the JSON codec.
#include "api_service.hpp"
#include "api_codec.hpp"

#include <conveyor/engine.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <random>

namespace conveyor {
namespace {

using nlohmann::json;

class ApiServiceTest : public ::testing::Test {
 protected:
  ApiServiceTest() {
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() /
           ("conveyor-api-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(dir_);
    Config c;
    c.storage.plugin = "sqlite";
    c.storage.plugin_dir = CONVEYOR_TEST_PLUGIN_DIR;
    c.storage.options = {{"path", (dir_ / "db.sqlite").string()}};
    c.engine.rate_limit_rate_per_sec = 100;
    c.engine.rate_limit_burst = 5;
    engine_ = std::make_unique<Engine>(c);
    api_ = std::make_unique<ApiService>(*engine_);
  }
  ~ApiServiceTest() override {
    api_.reset();
    engine_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  json call(const std::string& method, const json& request) {
    const auto* m = api_->find(method);
    if (!m) throw std::runtime_error("no method " + method);
    const auto message = m->new_request();
    api::decode(api::Codec::kJson, request.dump(), *message);
    return json::parse(api::encode(api::Codec::kJson, *api_->call(*m, *message)));
  }
  // The ApiError a call raises.
  ApiError error(const std::string& method, const json& request) {
    try {
      call(method, request);
    } catch (const ApiError& e) {
      return e;
    }
    ADD_FAILURE() << method << " did not fail";
    return ApiError(ApiCode::kUnknown, "");
  }

  static constexpr const char* kSet = "/conveyor.v1.AdminService/SetQueueRateLimit";
  static constexpr const char* kDelete = "/conveyor.v1.AdminService/DeleteQueueRateLimit";
  static constexpr const char* kList = "/conveyor.v1.AdminService/ListRateLimits";
  static constexpr const char* kQueues = "/conveyor.v1.AdminService/ListQueues";
  static constexpr const char* kPause = "/conveyor.v1.AdminService/PauseQueue";
  static constexpr const char* kResume = "/conveyor.v1.AdminService/ResumeQueue";
  static constexpr const char* kEnqueue = "/conveyor.v1.TaskService/Enqueue";
  static constexpr const char* kBatch = "/conveyor.v1.TaskService/EnqueueBatch";
  static constexpr const char* kGet = "/conveyor.v1.TaskService/GetJob";

  std::filesystem::path dir_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ApiService> api_;
};

TEST_F(ApiServiceTest, MethodsAndWhichOnesMutate) {
  EXPECT_EQ(api_->paths().size(), 9u);
  for (const char* m : {kSet, kDelete, kPause, kResume, kEnqueue, kBatch})
    EXPECT_TRUE(api_->find(m)->mutates) << m;
  for (const char* m : {kList, kQueues, kGet}) EXPECT_FALSE(api_->find(m)->mutates) << m;
  EXPECT_EQ(api_->find("/conveyor.v1.AdminService/Nope"), nullptr);
}

TEST_F(ApiServiceTest, SetListDeleteRateLimit) {
  json r = call(kSet, {{"queue", "email"}, {"ratePerSec", 50}, {"burst", 10}});
  EXPECT_EQ(r["override"]["queue"], "email");
  EXPECT_EQ(r["override"]["ratePerSec"], 50.0);
  EXPECT_EQ(r["override"]["burst"], 10);
  EXPECT_FALSE(r["override"]["updatedAt"].get<std::string>().empty());
  call(kSet, {{"queue", "sms"}, {"rate_per_sec", "2.5"}, {"burst", "3"}});  // .proto names, strings

  r = call(kList, json::object());
  EXPECT_EQ(r["enabled"], true);
  EXPECT_EQ(r["defaultLimit"], json::parse(R"({"ratePerSec":100.0,"burst":5})"));
  ASSERT_EQ(r["overrides"].size(), 2u);
  EXPECT_EQ(r["overrides"][1]["queue"], "sms");
  EXPECT_EQ(r["overrides"][1]["ratePerSec"], 2.5);

  r = call(kQueues, json::object());
  ASSERT_EQ(r["queues"].size(), 2u);
  EXPECT_EQ(r["queues"][0]["queue"], "email");
  EXPECT_EQ(r["queues"][0]["limit"],
            json::parse(R"({"ratePerSec":50.0,"burst":10,"source":"override"})"));

  EXPECT_EQ(call(kDelete, {{"queue", "email"}}), json::object());
  ApiError e = error(kDelete, {{"queue", "email"}});
  EXPECT_EQ(e.code(), ApiCode::kNotFound);
  EXPECT_STREQ(e.what(), "queue email has no rate-limit override");
  EXPECT_EQ(call(kList, json::object())["overrides"].size(), 1u);
}

TEST_F(ApiServiceTest, RateLimitValidationNamesTheField) {
  struct Case {
    json request;
    std::string message_start;
  };
  const Case cases[] = {
      {{{"queue", "bad queue"}, {"ratePerSec", 1}, {"burst", 1}},
       "queue: invalid queue name \"bad queue\""},
      {{{"ratePerSec", 1}, {"burst", 1}}, "queue: invalid queue name \"\""},
      {{{"queue", "q"}, {"ratePerSec", 0}, {"burst", 1}},
       "ratePerSec: rate must be a finite number greater than 0, got 0"},
      {{{"queue", "q"}, {"ratePerSec", -2}, {"burst", 1}},
       "ratePerSec: rate must be a finite number greater than 0, got -2"},
      {{{"queue", "q"}, {"ratePerSec", "NaN"}, {"burst", 1}},
       "ratePerSec: rate must be a finite number greater than 0, got nan"},
      {{{"queue", "q"}, {"ratePerSec", "Infinity"}, {"burst", 1}},
       "ratePerSec: rate must be a finite number greater than 0, got inf"},
      {{{"queue", "q"}, {"ratePerSec", "fast"}, {"burst", 1}}, "ratePerSec: must be a number"},
      // Out of uint32's range: refused by the JSON codec, naming the field.
      {{{"queue", "q"}, {"ratePerSec", 5}},
       "burst: burst must be a whole number from 1 to 4294967295, got 0"},
      {{{"queue", "q"}, {"ratePerSec", 5}, {"burst", 0}},
       "burst: burst must be a whole number from 1 to 4294967295, got 0"},
      {{{"queue", "q"}, {"ratePerSec", 5}, {"burst", -1}},
       "burst: must be a whole number from 0 to 4294967295, got -1"},
      {{{"queue", "q"}, {"ratePerSec", 5}, {"burst", 2.5}},
       "burst: must be a whole number from 0 to 4294967295, got 2.5"},
      {{{"queue", "q"}, {"ratePerSec", 5}, {"burst", 4294967296}},
       "burst: must be a whole number from 0 to 4294967295, got 4294967296"},
      {{{"queue", 7}, {"ratePerSec", 5}, {"burst", 1}}, "queue: must be a string, got 7"},
      {{{"queue", "q"}, {"ratePerSec", 5}, {"burst", 1}, {"bursts", 2}},
       "bursts: unknown field of SetQueueRateLimitRequest (known: queue, ratePerSec, burst)"},
  };
  for (const Case& c : cases) {
    ApiError e = error(kSet, c.request);
    EXPECT_EQ(e.code(), ApiCode::kInvalidArgument) << c.request;
    EXPECT_EQ(std::string(e.what()).rfind(c.message_start, 0), 0u) << e.what();
  }
  EXPECT_TRUE(call(kList, json::object())["overrides"].empty());  // nothing stored
}

TEST_F(ApiServiceTest, EnqueueGetJobAndBatchAllOrNone) {
  json r = call(kEnqueue, {{"job",
                            {{"queue", "email"},
                             {"kind", "noop"},
                             {"payload", R"({"to":"x"})"},
                             {"priority", 2},
                             {"maxAttempts", 3},
                             {"delaySeconds", 3600}}}});
  ASSERT_TRUE(r["id"].is_string());
  const std::string id = r["id"];
  json job = call(kGet, {{"id", id}})["job"];
  EXPECT_EQ(job["id"], id);
  EXPECT_EQ(job["queue"], "email");
  EXPECT_EQ(job["payload"], R"({"to":"x"})");
  EXPECT_EQ(job["state"], "scheduled");
  EXPECT_EQ(job["priority"], 2);
  EXPECT_EQ(job["maxAttempts"], 3);
  EXPECT_EQ(call(kGet, {{"id", std::stoll(id)}})["job"]["id"], id);  // number form too

  r = call(
      kBatch,
      {{"jobs", {{{"queue", "bulk"}, {"kind", "noop"}}, {{"queue", "bulk"}, {"kind", "noop"}}}}});
  ASSERT_EQ(r["ids"].size(), 2u);
  EXPECT_EQ(call(kGet, {{"id", r["ids"][1]}})["job"]["maxAttempts"], 25);  // engine default
  EXPECT_EQ(call(kBatch, {{"jobs", json::array()}})["ids"], json::array());

  ApiError e =
      error(kBatch,
            {{"jobs", {{{"queue", "bulk"}, {"kind", "noop"}}, {{"queue", "bulk"}, {"kind", ""}}}}});
  EXPECT_EQ(e.code(), ApiCode::kInvalidArgument);
  EXPECT_EQ(std::string(e.what()).rfind("jobs[1].kind: invalid job kind", 0), 0u) << e.what();
  json queues = call(kQueues, json::object())["queues"];
  ASSERT_EQ(queues.size(), 2u);
  EXPECT_EQ(queues[0]["queue"], "bulk");
  EXPECT_EQ(queues[0]["pending"], "2");  // the failed batch stored nothing

  e = error(kEnqueue, {{"job", {{"queue", "q"}, {"kind", "noop"}, {"payload", "{nope"}}}});
  EXPECT_EQ(std::string(e.what()).rfind("job.payload: payload is not valid JSON", 0), 0u)
      << e.what();
  e = error(kEnqueue, json::object());
  EXPECT_EQ(std::string(e.what()).rfind("job.queue: invalid queue name", 0), 0u) << e.what();

  e = error(kGet, {{"id", 999999}});
  EXPECT_EQ(e.code(), ApiCode::kNotFound);
  EXPECT_STREQ(e.what(), "job 999999 not found");
  e = error(kGet, json::object());
  EXPECT_EQ(e.code(), ApiCode::kInvalidArgument);
  EXPECT_STREQ(e.what(), "id: must be a job id (a whole number >= 1), got 0");
}

TEST_F(ApiServiceTest, PauseAndResumeShowInListQueues) {
  call(kEnqueue, {{"job", {{"queue", "email"}, {"kind", "noop"}}}});
  EXPECT_EQ(call(kPause, {{"queue", "email"}}), json::object());
  EXPECT_EQ(call(kQueues, json::object())["queues"][0]["paused"], true);
  call(kResume, {{"queue", "email"}});
  EXPECT_EQ(call(kQueues, json::object())["queues"][0]["paused"], false);
  EXPECT_EQ(error(kPause, {{"queue", "no way"}}).code(), ApiCode::kInvalidArgument);
}

}  // namespace
}  // namespace conveyor
