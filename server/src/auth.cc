// Bearer-token checks and the start-up security rule (auth.hpp, admin_server.hpp).
#include "auth.hpp"

#include <conveyor/admin_server.hpp>

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

namespace conveyor {

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
  // Walk the longer length whatever the contents; a length difference also
  // counts as a difference. volatile keeps the compiler from ending early.
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

Authenticator::Authenticator(const ServerConfig& config)
    : token_(config.admin_token), allow_unauthenticated_(config.allow_unauthenticated) {}

std::optional<ApiError> Authenticator::check(std::optional<std::string_view> authorization) const {
  if (token_.empty()) {
    if (allow_unauthenticated_) return std::nullopt;
    return ApiError(
        ApiCode::kUnauthenticated,
        "this server has no admin token and does not allow unauthenticated calls: "
        "set [server] admin_token (or CONVEYOR_ADMIN_TOKEN), or allow_unauthenticated = "
        "true");
  }
  if (!authorization) {
    if (allow_unauthenticated_) return std::nullopt;
    return ApiError(ApiCode::kUnauthenticated,
                    "missing Authorization header: send \"Authorization: Bearer <admin token>\"");
  }
  // The scheme name is case-insensitive (RFC 9110); the token is not.
  constexpr std::string_view kScheme = "bearer ";
  std::string_view value = *authorization;
  const bool bearer = value.size() > kScheme.size() &&
                      std::equal(kScheme.begin(), kScheme.end(), value.begin(), [](char a, char b) {
                        return a == std::tolower(static_cast<unsigned char>(b));
                      });
  if (!bearer)
    return ApiError(ApiCode::kUnauthenticated,
                    "Authorization header must be \"Bearer <admin token>\"");
  value.remove_prefix(kScheme.size());
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  if (!constant_time_equal(value, token_))
    return ApiError(ApiCode::kUnauthenticated, "wrong admin token");
  return std::nullopt;
}

bool is_loopback_host(std::string_view host) {
  std::string h(host);
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return std::tolower(c); });
  if (h == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

void check_server_security(const ServerConfig& config) {
  const ListenAddress address = parse_listen_address(config.listen);
  if (!config.admin_token.empty() || config.allow_unauthenticated || is_loopback_host(address.host))
    return;
  throw ConfigError("[server] listen = " + config.listen +
                    " is not a loopback address: set admin_token (or CONVEYOR_ADMIN_TOKEN), or "
                    "allow_unauthenticated = true to accept the risk");
}

}  // namespace conveyor
