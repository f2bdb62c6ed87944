#include "request_signer.hpp"

#include <gtest/gtest.h>

namespace conveyor::http_delivery {
namespace {

TEST(RequestSigner, HmacSha256KnownAnswer) {
  // RFC 4231 test case 2.
  EXPECT_EQ(hmac_sha256_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(RequestSigner, SignatureCoversTimestampAndBody) {
  std::string s = signature("Jefe", 1700000000, "{\"a\":1}");
  EXPECT_EQ(s, "v1=" + hmac_sha256_hex("Jefe", "1700000000.{\"a\":1}"));
  EXPECT_NE(s, signature("Jefe", 1700000001, "{\"a\":1}"));
  EXPECT_NE(s, signature("Jefe", 1700000000, "{\"a\":2}"));
  EXPECT_NE(s, signature("jefe", 1700000000, "{\"a\":1}"));
}

}  // namespace
}  // namespace conveyor::http_delivery
