// proto3 JSON request reading: spellings, null, integer and double forms,
// type errors that name the field's path.
#include "proto_json.hpp"

#include <conveyor/validation.hpp>

#include <gtest/gtest.h>

#include <cmath>

namespace conveyor::api {
namespace {

using nlohmann::json;

// The message of the ValidationError fn throws (fails the test if none).
template <typename Fn>
std::string error_of(Fn&& fn, std::string* field = nullptr) {
  try {
    fn();
  } catch (const ValidationError& e) {
    if (field) *field = e.field();
    return e.what();
  }
  ADD_FAILURE() << "no ValidationError";
  return {};
}

TEST(MessageReader, AcceptsBothSpellingsAndTreatsNullAsUnset) {
  const json a = {{"ratePerSec", 2.5}, {"queue", "q"}};
  const json b = {{"rate_per_sec", 2.5}, {"queue", nullptr}};
  EXPECT_EQ(MessageReader(a, "").double_field("ratePerSec", "rate_per_sec"), 2.5);
  EXPECT_EQ(MessageReader(b, "").double_field("ratePerSec", "rate_per_sec"), 2.5);
  EXPECT_EQ(MessageReader(b, "").string_field("queue", "queue"), "");
  EXPECT_FALSE(MessageReader(b, "").optional_integer("burst", "burst").has_value());
}

TEST(MessageReader, BothSpellingsAtOnceIsAnError) {
  const json j = {{"ratePerSec", 1}, {"rate_per_sec", 2}};
  EXPECT_EQ(error_of([&] { MessageReader(j, "").double_field("ratePerSec", "rate_per_sec"); }),
            "ratePerSec: given twice (as ratePerSec and rate_per_sec)");
}

TEST(MessageReader, IntegersAsNumbersOrStrings) {
  const json j = {{"a", 7}, {"b", "-42"}, {"c", 10.0}, {"d", "9223372036854775807"}};
  MessageReader m(j, "");
  EXPECT_EQ(m.integer_field("a", "a"), 7);
  EXPECT_EQ(m.integer_field("b", "b"), -42);
  EXPECT_EQ(m.integer_field("c", "c"), 10);
  EXPECT_EQ(m.integer_field("d", "d"), INT64_MAX);
  EXPECT_EQ(m.integer_field("missing", "missing"), 0);
}

TEST(MessageReader, NonIntegersNameTheFieldAndTheValue) {
  const json j = {{"burst", 2.5}, {"id", "12x"}, {"n", true}, {"big", 18446744073709551615u}};
  MessageReader m(j, "");
  std::string field;
  EXPECT_EQ(error_of([&] { m.integer_field("burst", "burst"); }, &field),
            "burst: must be a whole number, got 2.5");
  EXPECT_EQ(field, "burst");
  EXPECT_EQ(error_of([&] { m.integer_field("id", "id"); }),
            "id: must be a whole number (a JSON number or a decimal string), got \"12x\"");
  EXPECT_EQ(error_of([&] { m.integer_field("n", "n"); }),
            "n: must be a whole number, got a boolean");
  EXPECT_EQ(error_of([&] { m.integer_field("big", "big"); }),
            "big: must be a whole number within int64 range, got 18446744073709551615");
}

TEST(MessageReader, DoublesIncludingTheSpecialStrings) {
  const json j = {{"a", "NaN"}, {"b", "Infinity"}, {"c", "-Infinity"},
                  {"d", "2.5"}, {"e", "fast"},     {"f", json::array()}};
  MessageReader m(j, "");
  EXPECT_TRUE(std::isnan(m.double_field("a", "a")));
  EXPECT_EQ(m.double_field("b", "b"), INFINITY);
  EXPECT_EQ(m.double_field("c", "c"), -INFINITY);
  EXPECT_EQ(m.double_field("d", "d"), 2.5);
  EXPECT_EQ(error_of([&] { m.double_field("e", "e"); }), "e: must be a number, got \"fast\"");
  EXPECT_EQ(error_of([&] { m.double_field("f", "f"); }), "f: must be a number, got an array");
}

TEST(MessageReader, WrongTypesForStringsAndBools) {
  const json j = {{"queue", 5}, {"paused", "yes"}};
  MessageReader m(j, "");
  EXPECT_EQ(error_of([&] { m.string_field("queue", "queue"); }),
            "queue: must be a string, got a number");
  EXPECT_EQ(error_of([&] { m.bool_field("paused", "paused"); }),
            "paused: must be true or false, got a string");
}

TEST(MessageReader, NestedAndRepeatedMessagesCarryTheirPath) {
  const json j = json::parse(R"({"jobs": [{"kind": "a"}, {"kind": 3}], "job": "x"})");
  MessageReader m(j, "");
  auto jobs = m.repeated_messages("jobs", "jobs");
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].string_field("kind", "kind"), "a");
  std::string field;
  EXPECT_EQ(error_of([&] { jobs[1].string_field("kind", "kind"); }, &field),
            "jobs[1].kind: must be a string, got a number");
  EXPECT_EQ(field, "jobs[1].kind");
  EXPECT_EQ(error_of([&] { m.message_field("job", "job"); }),
            "job: must be a JSON object, got a string");
  // Absent nested message: an empty one.
  EXPECT_EQ(m.message_field("other", "other").string_field("queue", "queue"), "");
  const json bad = {{"ids", json::array({1, "x"})}};
  EXPECT_EQ(error_of([&] { MessageReader(bad, "").repeated_integers("ids", "ids"); }),
            "ids[1]: must be a whole number (a JSON number or a decimal string), got \"x\"");
}

TEST(ParseRequestBody, EmptyIsAnEmptyMessage) {
  EXPECT_EQ(parse_request_body(""), json::object());
  EXPECT_EQ(parse_request_body(" \n"), json::object());
  EXPECT_EQ(parse_request_body(R"({"a":1})")["a"], 1);
}

TEST(ParseRequestBody, MalformedOrNonObjectBodiesSaySo) {
  std::string message = error_of([] { parse_request_body("{\"queue\": "); });
  EXPECT_EQ(message.rfind("body is not valid JSON: parse error at line 1", 0), 0u) << message;
  EXPECT_EQ(error_of([] { parse_request_body("[1,2]"); }),
            "body must be a JSON object, got an array");
  EXPECT_EQ(error_of([] { parse_request_body("\"x\""); }),
            "body must be a JSON object, got a string");
}

// Found by api_fuzz: a number beyond double's range is out_of_range, not a
// parse_error, and escaped as an HTTP 500 "internal error".
TEST(ParseRequestBody, ANumberTooLargeForADoubleIsABadBody) {
  for (const char* body : {R"({"ratePerSec": 1e999})", R"({"id": -5E4666885380141})"}) {
    SCOPED_TRACE(body);
    const std::string message = error_of([&] { parse_request_body(body); });
    EXPECT_EQ(message.rfind("body is not valid JSON: number overflow parsing '", 0), 0u) << message;
  }
}

TEST(ToText, InvalidUtf8IsReplacedNotThrown) {
  const json j = {{"lastError", std::string("bad \xff byte")}};
  EXPECT_EQ(to_text(j), "{\"lastError\":\"bad \xEF\xBF\xBD byte\"}");
}

}  // namespace
}  // namespace conveyor::api
