// Text encodings of the postgres plugin (no server needed).
#include "pg_text.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace conveyor::postgres {
namespace {

TEST(PgText, NumberArrays) {
  std::vector<int64_t> big = {1, -2, INT64_MAX, INT64_MIN};
  EXPECT_EQ(bigint_array(big), "{1,-2,9223372036854775807,-9223372036854775808}");
  std::vector<int32_t> small = {0, 7};
  EXPECT_EQ(int_array(small), "{0,7}");
  EXPECT_EQ(bigint_array({}), "{}");
}

TEST(PgText, TextArrayQuotesEveryElement) {
  std::vector<std::string_view> v = {"a", "", "NULL", "x'); DROP TABLE jobs; --", "q\"b\\s", "{,}"};
  EXPECT_EQ(text_array(v),
            "{\"a\",\"\",\"NULL\",\"x'); DROP TABLE jobs; --\",\"q\\\"b\\\\s\",\"{,}\"}");
}

TEST(PgText, HexAndByteaRoundTrip) {
  const std::string bytes("a\0b\xff\x01", 5);
  EXPECT_EQ(hex_encode(bytes), "610062ff01");
  EXPECT_EQ(bytea_from_text("\\x610062ff01"), bytes);
  EXPECT_EQ(bytea_from_text("\\x"), "");
  EXPECT_EQ(bytea_from_text("a\\000b\\377\\001"), bytes) << "the old escape format";
  EXPECT_THROW(bytea_from_text("\\x6"), std::runtime_error);
  EXPECT_THROW(bytea_from_text("\\xzz"), std::runtime_error);
}

TEST(PgText, Integers) {
  EXPECT_EQ(parse_int64("-42"), -42);
  EXPECT_EQ(parse_int64("9223372036854775807"), INT64_MAX);
  EXPECT_THROW(parse_int64(""), std::runtime_error);
  EXPECT_THROW(parse_int64("4x"), std::runtime_error);
  EXPECT_THROW(parse_int64("99999999999999999999"), std::runtime_error);
}

TEST(PgText, SanitizeKeepsValidTextAndRepairsTheRest) {
  EXPECT_TRUE(is_storable_text("plain ascii"));
  EXPECT_TRUE(is_storable_text("gr\xC3\xBC\xC3\x9F \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_storable_text(std::string("a\0b", 3)));
  EXPECT_FALSE(is_storable_text("\xC3"));              // truncated sequence
  EXPECT_FALSE(is_storable_text("\xC0\xAF"));          // overlong
  EXPECT_FALSE(is_storable_text("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(is_storable_text("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_EQ(sanitize_text("gr\xC3\xBC\xC3\x9F"), "gr\xC3\xBC\xC3\x9F");
  EXPECT_EQ(sanitize_text(std::string("a\0b", 3)), "a\\0b");
  EXPECT_EQ(sanitize_text("x\xFFy"), "x\xEF\xBF\xBDy");
  EXPECT_TRUE(is_storable_text(sanitize_text("\xC3\x28\xA0\xA1\xF0\x28\x8C\xBC")));
}

}  // namespace
}  // namespace conveyor::postgres
