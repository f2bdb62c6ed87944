// Who may call the API: bearer tokens, compared in constant time, and the
// rules of admin_server.hpp ("Access").
#pragma once

#include <conveyor/api_error.hpp>
#include <conveyor/config.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace conveyor {

// a == b, taking time that depends only on the lengths, not on where they differ.
bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

class Authenticator {
 public:
  explicit Authenticator(const ServerConfig& config);
  // The error to answer a request with this Authorization header value
  // (nullopt when the header is absent), or nullopt when the call may proceed.
  std::optional<ApiError> check(std::optional<std::string_view> authorization) const;

 private:
  std::string token_;
  bool allow_unauthenticated_;
};

}  // namespace conveyor
