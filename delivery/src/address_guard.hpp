// The private-address guard: a job's URL must not reach the queue's own
// network (loopback, private ranges, cloud metadata on link-local) unless the
// operator allows it. Checked on the address about to be connected, after
// DNS, so a name that resolves inward is refused too.
#pragma once

#include <sys/socket.h>

#include <optional>
#include <string>
#include <string_view>

#include "conveyor/http_delivery.hpp"

namespace conveyor::http_delivery {

enum class AddressClass {
  kPublic,
  kLoopback,     // 127/8, ::1
  kPrivate,      // 10/8, 172.16/12, 192.168/16, fc00::/7
  kLinkLocal,    // 169.254/16, fe80::/10
  kSharedCgnat,  // 100.64/10
  kUnspecified,  // 0/8, ::
  kMulticast,    // 224/4, ff00::/8
  kBroadcast,    // 255.255.255.255
};

// The class of an AF_INET or AF_INET6 address; IPv4-mapped IPv6 addresses
// (::ffff:a.b.c.d) are classed as the IPv4 address. Other families: kPublic
// is never returned for them (kUnspecified). Thread-safe.
AddressClass classify_address(const sockaddr* address);

// "a loopback address", "a private address", ...
std::string_view describe(AddressClass address_class);

// The address as text ("127.0.0.1", "::1").
std::string address_text(const sockaddr* address);

// Whether host (as in the URL; IPv6 with or without brackets) is listed in
// allow_hosts, compared exactly but case-insensitively.
bool host_allowed(std::string_view host, const Policy& policy);

// Why connecting to address for host is refused under policy, as a message
// that says what to set; nullopt when it is allowed. Thread-safe.
std::optional<std::string> refusal(const sockaddr* address, std::string_view host,
                                   const Policy& policy);

}  // namespace conveyor::http_delivery
