// The Connect codecs over the generated messages: what the JSON codec accepts
// (the proto3 JSON mapping's lenient forms), what it refuses and how it says
// so, the binary codec, and the Content-Type that picks one.
#include "api_codec.hpp"

#include "conveyor/v1/admin.pb.h"
#include "conveyor/v1/task.pb.h"
#include "conveyor/v1/worker.pb.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace conveyor::api {
namespace {

using nlohmann::json;

// The invalid_argument message of decoding text as JSON into M.
template <typename M>
std::string json_error(std::string_view text) {
  M m;
  try {
    decode(Codec::kJson, text, m);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), ApiCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "decoded without error: " << text;
  return {};
}

TEST(ApiCodec, ContentTypes) {
  EXPECT_EQ(codec_for_content_type("application/json"), Codec::kJson);
  EXPECT_EQ(codec_for_content_type("Application/JSON; charset=UTF-8"), Codec::kJson);
  EXPECT_EQ(codec_for_content_type("application/proto"), Codec::kProto);
  EXPECT_EQ(codec_for_content_type("APPLICATION/PROTO"), Codec::kProto);
  EXPECT_EQ(codec_for_content_type("application/json; charset=latin1"), std::nullopt);
  EXPECT_EQ(codec_for_content_type("application/grpc"), std::nullopt);
  EXPECT_EQ(codec_for_content_type(""), std::nullopt);
  EXPECT_STREQ(content_type(Codec::kJson), "application/json");
  EXPECT_STREQ(content_type(Codec::kProto), "application/proto");
}

TEST(ApiCodec, JsonAcceptsTheMappingsLenientForms) {
  v1::SetQueueRateLimitRequest m;
  decode(Codec::kJson, R"({"queue":"q","rate_per_sec":"2.5","burst":"3"})", m);
  EXPECT_EQ(m.queue(), "q");
  EXPECT_EQ(m.rate_per_sec(), 2.5);
  EXPECT_EQ(m.burst(), 3u);
  decode(Codec::kJson, R"({"queue":null,"ratePerSec":"1e3","burst":7})", m);
  EXPECT_EQ(m.queue(), "");  // null is unset; decode starts from a cleared message
  EXPECT_EQ(m.rate_per_sec(), 1000);
  EXPECT_EQ(m.burst(), 7u);
  // Other numbers keep the mapping's special words (their range checks refuse them).
  v1::EnqueueRequest e;
  decode(Codec::kJson, R"({"job":{"delaySeconds":"Infinity"}})", e);
  EXPECT_TRUE(std::isinf(e.job().delay_seconds()));
  // Whitespace only is the empty message, as an empty body.
  decode(Codec::kJson, " \n", m);
  EXPECT_EQ(m.ByteSizeLong(), 0u);
  v1::GetJobRequest g;
  decode(Codec::kJson, R"({"id":"9223372036854775807"})", g);
  EXPECT_EQ(g.id(), 9223372036854775807);
  decode(Codec::kJson, R"({"id":1e3})", g);
  EXPECT_EQ(g.id(), 1000);
}

TEST(ApiCodec, JsonErrorsNameTheFieldAsTheApiSpellsIt) {
  using v1::EnqueueBatchRequest;
  using v1::EnqueueRequest;
  using v1::SetQueueRateLimitRequest;
  EXPECT_EQ(json_error<SetQueueRateLimitRequest>(R"({"queue":"q","nope":1})"),
            "nope: unknown field of SetQueueRateLimitRequest (known: queue, ratePerSec, burst, "
            "scope, key, perKey)");
  EXPECT_EQ(json_error<EnqueueBatchRequest>(R"({"jobs":[{"queue":"q"},{"kind":"k","prio":1}]})"),
            "jobs[1].prio: unknown field of NewJob (known: queue, kind, payload, priority, "
            "maxAttempts, delaySeconds, cost, key, timeoutSeconds)");
  EXPECT_EQ(json_error<v1::ListQueuesRequest>(R"({"queue":"q"})"),
            "queue: unknown field of ListQueuesRequest (it has no fields)");
  EXPECT_EQ(json_error<SetQueueRateLimitRequest>(R"({"queue":"q","ratePerSec":"fast"})"),
            "ratePerSec: must be a plain decimal number of jobs per second from 0.001 to "
            "1000000000 (digits with an optional fraction and exponent, e.g. 50, 2.5 or 1e3; no "
            "sign, hexadecimal, inf or nan), got \"fast\"");
  EXPECT_EQ(json_error<SetQueueRateLimitRequest>(R"({"burst":-1})"),
            "burst: must be a whole number from 0 to 4294967295, got -1");
  EXPECT_EQ(json_error<SetQueueRateLimitRequest>(R"({"burst":2.5})"),
            "burst: must be a whole number from 0 to 4294967295, got 2.5");
  EXPECT_EQ(json_error<SetQueueRateLimitRequest>(R"({"queue":7})"),
            "queue: must be a string, got 7");
  EXPECT_EQ(json_error<EnqueueRequest>(R"({"job":{"queue":"q","max_attempts":3000000000}})"),
            "job.maxAttempts: must be a whole number from -2147483648 to 2147483647, got "
            "3000000000");
  // A job's key is a string: a number, a list or an object is refused naming it.
  EXPECT_EQ(json_error<EnqueueRequest>(R"({"job":{"queue":"q","kind":"k","key":42}})"),
            "job.key: must be a string, got 42");
  EXPECT_EQ(json_error<EnqueueBatchRequest>(R"({"jobs":[{"queue":"q"},{"key":true}]})"),
            "jobs[1].key: must be a string, got true");
  EXPECT_EQ(json_error<EnqueueRequest>(R"({"job":{"key":["a"]}})"), "job.key: must not be a list");
  EXPECT_EQ(json_error<EnqueueRequest>(R"({"job":{"key":{"tenant":"a"}}})"),
            "job.key: must be a string, got an object");
  // An object on any scalar field says what the field takes.
  EXPECT_EQ(json_error<EnqueueBatchRequest>(R"({"jobs":[{},{"max_attempts":{}}]})"),
            "jobs[1].maxAttempts: must be a whole number from -2147483648 to 2147483647, got an "
            "object");
  EXPECT_EQ(json_error<SetQueueRateLimitRequest>(R"({"burst":{"n":1}})"),
            "burst: must be a whole number from 0 to 4294967295, got an object");
  // A lone surrogate cannot smuggle text that is not UTF-8 into a key.
  EXPECT_EQ(json_error<EnqueueRequest>(R"({"job":{"key":"\ud800"}})")
                .rfind("body is not valid JSON: ", 0),
            0u);
  EXPECT_EQ(json_error<v1::GetJobRequest>(R"({"id":"9223372036854775808"})"),
            "id: must be a whole number (a JSON number or a decimal string), got "
            "\"9223372036854775808\"");
  // The document itself.
  EXPECT_EQ(json_error<v1::ListQueuesRequest>("[1, 2]"),
            "body must be a JSON object, got an array");
  EXPECT_EQ(json_error<v1::ListQueuesRequest>("\"x\""), "body must be a JSON object, got a string");
  EXPECT_EQ(json_error<v1::ListQueuesRequest>(R"({"queue": )").rfind("body is not valid JSON: ", 0),
            0u);
}

// A rate given as a JSON string is read as the config and the CLI read a
// rate (parse_rate's syntax): libprotobuf's strtod took "0x10" as 16/s.
TEST(ApiCodec, JsonRateStringsArePlainDecimalOnly) {
  using v1::SetQueueRateLimitRequest;
  const std::string rule =
      "must be a plain decimal number of jobs per second from 0.001 to 1000000000 (digits with "
      "an optional fraction and exponent, e.g. 50, 2.5 or 1e3; no sign, hexadecimal, inf or nan)";
  for (const char* text : {"0x10", "0X1p4", "+16", "16 ", "1_000", "inf", "Infinity", "NaN",
                           "-Infinity", "1,5", "0x1p-1074"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(json_error<SetQueueRateLimitRequest>(
                  fmt::format(R"({{"queue":"q","ratePerSec":"{}","burst":1}})", text)),
              fmt::format("ratePerSec: {}, got \"{}\"", rule, text));
  }
  // The decimal forms the CLI takes are taken (range: validate_rate, later).
  for (const char* text : {"16", "2.5", ".5", "5.", "1e3", "2.5E-2", "1e-320"}) {
    SetQueueRateLimitRequest m;
    decode(Codec::kJson, fmt::format(R"({{"ratePerSec":"{}"}})", text), m);
    EXPECT_EQ(m.rate_per_sec(), std::strtod(text, nullptr)) << text;
  }
  // Any other number given as a string: plain decimal too.
  EXPECT_EQ(json_error<v1::EnqueueRequest>(R"({"job":{"delaySeconds":"0x10"}})"),
            "job.delaySeconds: must be a number: a JSON number, or a string holding one in plain "
            "decimal (digits with an optional fraction and exponent, e.g. 2.5 or 1e3; no "
            "hexadecimal), got \"0x10\"");
  v1::EnqueueRequest e;
  decode(Codec::kJson, R"({"job":{"delaySeconds":"-2.5"}})", e);
  EXPECT_EQ(e.job().delay_seconds(), -2.5);  // refused by its range check, naming it
}

// A job's payload is JSON text in a string; JSON itself there (an object, a
// number, a list) is refused naming the field path and saying how to send it.
TEST(ApiCodec, JsonPayloadMustBeAString) {
  const std::string how =
      R"(must be a JSON string holding the payload's JSON text (e.g. "payload": "{\"ms\": 5}"), got )";
  EXPECT_EQ(
      json_error<v1::EnqueueRequest>(R"({"job":{"queue":"q","kind":"k","payload":{"ms":5}}})"),
      "job.payload: " + how + "an object");
  EXPECT_EQ(json_error<v1::EnqueueRequest>(R"({"job":{"payload":5}})"),
            "job.payload: " + how + "a number");
  EXPECT_EQ(json_error<v1::EnqueueRequest>(R"({"job":{"payload":[1,{"a":2}]}})"),
            "job.payload: " + how + "an array");
  EXPECT_EQ(json_error<v1::EnqueueBatchRequest>(
                R"({"jobs":[{"payload":"{}"},{"queue":"q","payload":{"a":{"b":[1]}}}]})"),
            "jobs[1].payload: " + how + "an object");
  v1::EnqueueRequest m;
  decode(Codec::kJson, R"({"job":{"payload":"{\"ms\": 5}"}})", m);
  EXPECT_EQ(m.job().payload(), R"({"ms": 5})");
}

// libprotobuf's JSON parser (3.21) also reads the strings "true", "false",
// "yes", "no", "1", "0", "t", "f", "y", "n" (any case) into a bool field; the
// proto3 JSON mapping, and so the API, takes only JSON true and false, in
// every message and at any depth.
TEST(ApiCodec, JsonBoolsAreJsonBooleansOnly) {
  using v1::SetQueueRateLimitRequest;
  for (const char* text :
       {"\"true\"", "\"false\"", "\"yes\"", "\"no\"", "\"1\"", "\"0\"", "\"T\"", "\"n\"", "\"\""}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(
        json_error<SetQueueRateLimitRequest>(fmt::format(R"({{"queue":"q","perKey":{}}})", text)),
        fmt::format("perKey: must be true or false (a JSON boolean), got {}", text));
    EXPECT_EQ(json_error<v1::DeleteQueueRateLimitRequest>(fmt::format(R"({{"per_key":{}}})", text)),
              fmt::format("perKey: must be true or false (a JSON boolean), got {}", text));
    EXPECT_EQ(json_error<v1::FailRequest>(fmt::format(R"({{"permanent":{}}})", text)),
              fmt::format("permanent: must be true or false (a JSON boolean), got {}", text));
    EXPECT_EQ(json_error<v1::FailRequest>(fmt::format(R"({{"backpressure":{}}})", text)),
              fmt::format("backpressure: must be true or false (a JSON boolean), got {}", text));
  }
  for (const char* number : {"0", "1", "2.5"})
    EXPECT_EQ(json_error<v1::FailRequest>(fmt::format(R"({{"permanent":{}}})", number)),
              fmt::format("permanent: must be true or false (a JSON boolean), got {}", number));
  // Below the top level (a response the API client reads), named by its path.
  EXPECT_EQ(json_error<v1::ListKeysResponse>(R"({"keys":[{"key":"a"},{"readyCapped":"no"}]})"),
            R"(keys[1].readyCapped: must be true or false (a JSON boolean), got "no")");
  // Also when another field is wrong as well: the bool is named first.
  EXPECT_EQ(json_error<v1::FailRequest>(R"({"permanent":"no","nope":1})"),
            R"(permanent: must be true or false (a JSON boolean), got "no")");
  // Where a bool can be, the body must be strict JSON: libprotobuf's parser
  // alone reads 'single quotes', unquoted names and trailing commas, and
  // keeps the first of two values when the second is null.
  using v1::SetRateLimitingEnabledRequest;
  EXPECT_EQ(json_error<SetRateLimitingEnabledRequest>(R"({"enabled":"no","enabled":null})"),
            R"(body is not valid JSON: it names "enabled" twice in one object)");
  EXPECT_EQ(json_error<SetRateLimitingEnabledRequest>(R"({"enabled":"no","enabled":true})"),
            R"(body is not valid JSON: it names "enabled" twice in one object)");
  EXPECT_EQ(json_error<v1::ListKeysResponse>(R"({"keys":[{"key":"a"},{"key":"a","key":"b"}]})"),
            R"(body is not valid JSON: it names "key" twice in one object)");
  for (const char* text : {"{'enabled':'no'}", "{'enabled':false}", R"({enabled:"no"})",
                           R"({"enabled":"no",})", R"({"enabled":false,})"})
    EXPECT_EQ(json_error<SetRateLimitingEnabledRequest>(text).rfind("body is not valid JSON: ", 0),
              0u)
        << text;
  // The same name in two objects is not twice.
  v1::ListKeysResponse two;
  decode(Codec::kJson, R"({"keys":[{"key":"a"},{"key":"b"}]})", two);
  EXPECT_EQ(two.keys(1).key(), "b");
  // true, false, and null (the field's default, as the mapping says) still read.
  v1::FailRequest f;
  decode(Codec::kJson, R"({"permanent":true,"backpressure":false})", f);
  EXPECT_TRUE(f.permanent());
  EXPECT_FALSE(f.backpressure());
  decode(Codec::kJson, R"({"permanent":null})", f);
  EXPECT_FALSE(f.permanent());
  v1::ListKeysResponse keys;
  decode(Codec::kJson, R"({"keys":[{"readyCapped":true}],"complete":true})", keys);
  EXPECT_TRUE(keys.keys(0).ready_capped());
  EXPECT_TRUE(keys.complete());
  // An optional bool keeps presence: absent and null are not false.
  v1::SetRateLimitingEnabledRequest on;
  decode(Codec::kJson, "{}", on);
  EXPECT_FALSE(on.has_enabled());
  decode(Codec::kJson, R"({"enabled":null})", on);
  EXPECT_FALSE(on.has_enabled());
  decode(Codec::kJson, R"({"enabled":false})", on);
  EXPECT_TRUE(on.has_enabled());
  EXPECT_FALSE(on.enabled());
}

TEST(ApiCodec, BinaryRoundTripsAndRefusesGarbage) {
  v1::EnqueueBatchRequest m;
  m.add_jobs()->set_queue("q");
  m.mutable_jobs(0)->set_max_attempts(3);
  v1::EnqueueBatchRequest back;
  decode(Codec::kProto, encode(Codec::kProto, m), back);
  EXPECT_EQ(back.jobs(0).queue(), "q");
  EXPECT_TRUE(back.jobs(0).has_max_attempts());
  // An empty body is the empty message.
  decode(Codec::kProto, "", back);
  EXPECT_EQ(back.jobs_size(), 0);
  try {
    decode(Codec::kProto, "\x0a\x05q", back);  // a length running past the end
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), ApiCode::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()).rfind(
                  "body is not a valid binary conveyor.v1.EnqueueBatchRequest message", 0),
              0u)
        << e.what();
  }
}

// A key that is not UTF-8 cannot arrive in a binary message: proto3 strings
// are checked when read.
TEST(ApiCodec, BinaryKeyThatIsNotUtf8IsRefused) {
  v1::EnqueueRequest m;
  m.mutable_job()->set_queue("q");
  m.mutable_job()->set_key("tenant-\xc3\xa9");
  v1::EnqueueRequest back;
  decode(Codec::kProto, encode(Codec::kProto, m), back);
  EXPECT_EQ(back.job().key(), "tenant-\xc3\xa9");
  m.mutable_job()->set_key("tenant-\xff");
  std::string wire;
  ASSERT_TRUE(m.SerializePartialToString(&wire));
  try {
    decode(Codec::kProto, wire, back);
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), ApiCode::kInvalidArgument);
  }
}

TEST(ApiCodec, JsonWritesEveryFieldInLowerCamelCaseAndInt64AsStrings) {
  v1::EnqueueBatchResponse ids;
  EXPECT_EQ(json::parse(encode(Codec::kJson, ids)), json::parse(R"({"ids":[]})"));
  ids.add_ids(42);
  EXPECT_EQ(json::parse(encode(Codec::kJson, ids)), json::parse(R"({"ids":["42"]})"));
  v1::EffectiveLimit limit;  // unset optionals stay out
  limit.set_source("none");
  EXPECT_EQ(json::parse(encode(Codec::kJson, limit)), json::parse(R"({"source":"none"})"));
}

// A stored string that is not UTF-8 (a worker's error text) must not make the
// answer unreadable: both codecs replace the bad bytes.
TEST(ApiCodec, InvalidUtf8IsReplacedInAnswers) {
  v1::GetJobResponse m;
  m.mutable_job()->set_last_error("bad \xff byte");
  const json j = json::parse(encode(Codec::kJson, m));
  EXPECT_EQ(j["job"]["lastError"], "bad \xEF\xBF\xBD byte");
  v1::GetJobResponse back;
  decode(Codec::kProto, encode(Codec::kProto, m), back);
  EXPECT_EQ(back.job().last_error(), "bad \xEF\xBF\xBD byte");
  EXPECT_EQ(m.job().last_error(), "bad \xff byte");  // the original is untouched
}

TEST(ApiCodec, ErrorBodyIsConnectJson) {
  EXPECT_EQ(json::parse(error_body(ApiError(ApiCode::kNotFound, "job 7 not found"))),
            (json{{"code", "not_found"}, {"message", "job 7 not found"}}));
}

}  // namespace
}  // namespace conveyor::api
