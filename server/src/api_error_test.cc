// Connect codes, names and HTTP statuses.
#include <conveyor/api_error.hpp>

#include <gtest/gtest.h>

namespace conveyor {
namespace {

TEST(ApiCode, StatusesFollowTheConnectProtocol) {
  EXPECT_EQ(http_status(ApiCode::kInvalidArgument), 400);
  EXPECT_EQ(http_status(ApiCode::kUnauthenticated), 401);
  EXPECT_EQ(http_status(ApiCode::kPermissionDenied), 403);
  EXPECT_EQ(http_status(ApiCode::kNotFound), 404);
  EXPECT_EQ(http_status(ApiCode::kResourceExhausted), 429);
  EXPECT_EQ(http_status(ApiCode::kUnavailable), 503);
  EXPECT_EQ(http_status(ApiCode::kInternal), 500);
  EXPECT_EQ(http_status(ApiCode::kUnimplemented), 501);
  EXPECT_EQ(http_status(ApiCode::kCanceled), 499);
  EXPECT_EQ(http_status(ApiCode::kDeadlineExceeded), 504);
}

TEST(ApiCode, NamesRoundTrip) {
  for (int i = 0; i <= static_cast<int>(ApiCode::kUnauthenticated); ++i) {
    const auto code = static_cast<ApiCode>(i);
    EXPECT_EQ(parse_api_code(to_string(code)), code) << to_string(code);
  }
  EXPECT_STREQ(to_string(ApiCode::kInvalidArgument), "invalid_argument");
  EXPECT_FALSE(parse_api_code("INVALID_ARGUMENT").has_value());
}

TEST(ApiCode, StatusWithoutABodyMapsAsConnectClientsDo) {
  EXPECT_EQ(api_code_for_http_status(401), ApiCode::kUnauthenticated);
  EXPECT_EQ(api_code_for_http_status(404), ApiCode::kUnimplemented);
  EXPECT_EQ(api_code_for_http_status(503), ApiCode::kUnavailable);
  EXPECT_EQ(api_code_for_http_status(418), ApiCode::kUnknown);
}

}  // namespace
}  // namespace conveyor
