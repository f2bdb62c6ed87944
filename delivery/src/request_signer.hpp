// Request signing: a receiver holding the secret can check that a request
// came from this queue and was not altered or replayed long after.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace conveyor::http_delivery {

inline constexpr std::string_view kTimestampHeader = "Conveyor-Timestamp";
inline constexpr std::string_view kSignatureHeader = "Conveyor-Signature";

// Lowercase hex HMAC-SHA256(secret, message). Thread-safe.
std::string hmac_sha256_hex(std::string_view secret, std::string_view message);

// The Conveyor-Signature value for a body sent at unix_seconds:
// "v1=" + hmac_sha256_hex(secret, "<unix_seconds>.<body>"). Thread-safe.
std::string signature(std::string_view secret, int64_t unix_seconds, std::string_view body);

}  // namespace conveyor::http_delivery
