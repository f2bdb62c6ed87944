// The signature tests' own HMAC-SHA256 (OpenSSL directly, not the signer
// under test), as lowercase hex.
#pragma once

#include <fmt/format.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <string>

namespace conveyor::http_delivery::testing {

inline std::string hmac_hex(const std::string& key, const std::string& message) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &len);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

}  // namespace conveyor::http_delivery::testing
