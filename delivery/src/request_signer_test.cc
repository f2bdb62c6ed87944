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

TEST(RequestSigner, MatchesTheReadmePythonVerifier) {
  // hmac.new(b"Jefe", b'1700000000.{"a":1}', hashlib.sha256).hexdigest()
  EXPECT_EQ(signature("Jefe", 1700000000, "{\"a\":1}"),
            "v1=fa5f6481efc59da48b19c9dc10196c9953e5651f8304b3a318b6b87d70272e0a");
}

}  // namespace
}  // namespace conveyor::http_delivery
