#include "address_guard.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

namespace conveyor::http_delivery {
namespace {

AddressClass classify_v4(uint32_t a) {  // host byte order
  auto in = [a](uint32_t net, int bits) { return (a >> (32 - bits)) == (net >> (32 - bits)); };
  if (in(0x7f000000, 8)) return AddressClass::kLoopback;
  if (in(0x0a000000, 8) || in(0xac100000, 12) || in(0xc0a80000, 16)) return AddressClass::kPrivate;
  if (in(0xa9fe0000, 16)) return AddressClass::kLinkLocal;
  if (in(0x64400000, 10)) return AddressClass::kSharedCgnat;
  if (in(0x00000000, 8)) return AddressClass::kUnspecified;
  if (a == 0xffffffff) return AddressClass::kBroadcast;
  if (in(0xe0000000, 4)) return AddressClass::kMulticast;
  return AddressClass::kPublic;
}

AddressClass classify_v6(const in6_addr& a) {
  const uint8_t* b = a.s6_addr;
  if (IN6_IS_ADDR_V4MAPPED(&a)) {
    return classify_v4(static_cast<uint32_t>(b[12]) << 24 | static_cast<uint32_t>(b[13]) << 16 |
                       static_cast<uint32_t>(b[14]) << 8 | b[15]);
  }
  if (IN6_IS_ADDR_LOOPBACK(&a)) return AddressClass::kLoopback;
  if (IN6_IS_ADDR_UNSPECIFIED(&a)) return AddressClass::kUnspecified;
  if ((b[0] & 0xfe) == 0xfc) return AddressClass::kPrivate;
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return AddressClass::kLinkLocal;
  if (b[0] == 0xff) return AddressClass::kMulticast;
  return AddressClass::kPublic;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view strip_brackets(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace

AddressClass classify_address(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    sockaddr_in v4;
    std::memcpy(&v4, address, sizeof v4);
    return classify_v4(ntohl(v4.sin_addr.s_addr));
  }
  if (address->sa_family == AF_INET6) {
    sockaddr_in6 v6;
    std::memcpy(&v6, address, sizeof v6);
    return classify_v6(v6.sin6_addr);
  }
  return AddressClass::kUnspecified;
}

std::string_view describe(AddressClass address_class) {
  switch (address_class) {
    case AddressClass::kPublic:
      return "a public address";
    case AddressClass::kLoopback:
      return "a loopback address";
    case AddressClass::kPrivate:
      return "a private address";
    case AddressClass::kLinkLocal:
      return "a link-local address";
    case AddressClass::kSharedCgnat:
      return "a shared (CGNAT) address";
    case AddressClass::kUnspecified:
      return "an unspecified address";
    case AddressClass::kMulticast:
      return "a multicast address";
    case AddressClass::kBroadcast:
      return "a broadcast address";
  }
  return "an unknown address";
}

std::string address_text(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address->sa_family == AF_INET) {
    sockaddr_in v4;
    std::memcpy(&v4, address, sizeof v4);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
  } else if (address->sa_family == AF_INET6) {
    sockaddr_in6 v6;
    std::memcpy(&v6, address, sizeof v6);
    inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
  } else {
    return fmt::format("(address family {})", address->sa_family);
  }
  return text;
}

bool host_allowed(std::string_view host, const Policy& policy) {
  std::string wanted = lower(strip_brackets(host));
  return std::any_of(policy.allow_hosts.begin(), policy.allow_hosts.end(),
                     [&](const std::string& h) { return lower(strip_brackets(h)) == wanted; });
}

std::optional<std::string> refusal(const sockaddr* address, std::string_view host,
                                   const Policy& policy) {
  if (policy.allow_private) return std::nullopt;
  AddressClass address_class = classify_address(address);
  if (address_class == AddressClass::kPublic || host_allowed(host, policy)) return std::nullopt;
  std::string text = address_text(address);
  std::string target =
      strip_brackets(host) == text ? text : fmt::format("{} ({})", strip_brackets(host), text);
  return fmt::format(
      "target {} is {}; set [http] allow_private = true or list the host in [http] allow_hosts",
      target, describe(address_class));
}

}  // namespace conveyor::http_delivery
