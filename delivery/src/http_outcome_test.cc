#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "conveyor/http_delivery.hpp"

namespace conveyor::http_delivery {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// 1994-11-06 08:49:37 UTC, the RFC's example date.
const auto kExample = std::chrono::sys_days{std::chrono::year{1994} / 11 / 6} +
                      std::chrono::hours{8} + std::chrono::minutes{49} + seconds{37};

TEST(ParseRetryAfter, DeltaSeconds) {
  auto now = std::chrono::system_clock::now();
  EXPECT_EQ(parse_retry_after("120", now), milliseconds(120000));
  EXPECT_EQ(parse_retry_after("0", now), milliseconds(0));
  EXPECT_EQ(parse_retry_after("  7 ", now), milliseconds(7000));
}

TEST(ParseRetryAfter, NegativeGarbageAndOverflowAreNullopt) {
  auto now = std::chrono::system_clock::now();
  EXPECT_EQ(parse_retry_after("-5", now), std::nullopt);
  EXPECT_EQ(parse_retry_after("1.5", now), std::nullopt);
  EXPECT_EQ(parse_retry_after("soon", now), std::nullopt);
  EXPECT_EQ(parse_retry_after("", now), std::nullopt);
  EXPECT_EQ(parse_retry_after("99999999999999999999", now), std::nullopt);
  EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 08:49:37", now), std::nullopt);  // no GMT
  EXPECT_EQ(parse_retry_after("Sun, 31 Feb 1994 08:49:37 GMT", now), std::nullopt);
  EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 25:49:37 GMT", now), std::nullopt);
}

TEST(ParseRetryAfter, HttpDateInAllThreeForms) {
  auto now = kExample - seconds(90);
  EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), milliseconds(90000));
  EXPECT_EQ(parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now), milliseconds(90000));
  EXPECT_EQ(parse_retry_after("Sun Nov  6 08:49:37 1994", now), milliseconds(90000));
}

TEST(ParseRetryAfter, PastDateIsZero) {
  EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", kExample + seconds(5)),
            milliseconds(0));
}

TEST(Classify, TheOutcomeTable) {
  auto now = std::chrono::system_clock::now();
  for (int s : {200, 201, 204, 299})
    EXPECT_EQ(classify(s, "", "", now).kind, OutcomeKind::kSucceeded) << s;
  for (int s : {429, 503})
    EXPECT_EQ(classify(s, "", "", now).kind, OutcomeKind::kBackpressure) << s;
  for (int s : {408, 425, 500, 502, 504})
    EXPECT_EQ(classify(s, "", "", now).kind, OutcomeKind::kRetry) << s;
  for (int s : {0, 100, 301, 302, 304, 400, 401, 403, 404, 409, 410, 422, 501, 505, 600}) {
    EXPECT_EQ(classify(s, "", "", now).kind, OutcomeKind::kPermanent) << s;
  }
}

TEST(Classify, ErrorCarriesStatusAndBodyPrefix) {
  auto now = std::chrono::system_clock::now();
  std::string body(300, 'a');
  body[199] = 'z';
  Outcome o = classify(404, body, "", now);
  EXPECT_EQ(o.status, 404);
  EXPECT_EQ(o.error, "HTTP 404: " + body.substr(0, 200));
  EXPECT_EQ(classify(200, "fine", "", now).error, "");
  EXPECT_EQ(classify(429, "", "", now).error, "HTTP 429") << "no dangling colon for an empty body";
}

TEST(Classify, RetryAfterOnlyForBackpressure) {
  auto now = std::chrono::system_clock::now();
  EXPECT_EQ(classify(429, "", "3", now).retry_after, milliseconds(3000));
  EXPECT_EQ(classify(503, "", "", now).retry_after, std::nullopt);
  EXPECT_EQ(classify(503, "", "garbage", now).retry_after, std::nullopt);
  EXPECT_EQ(classify(500, "", "3", now).retry_after, std::nullopt);
}

}  // namespace
}  // namespace conveyor::http_delivery
