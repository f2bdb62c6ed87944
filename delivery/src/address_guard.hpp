// The private-address guard: a job's URL must not reach the queue's own
// network (loopback, private ranges, cloud metadata on link-local) nor any
// other special-purpose address unless the operator allows it. Checked on the
// address about to be connected, after DNS, so a name that resolves inward is
// refused too.
//
// The classification is a table of prefixes (address_guard.cc): every block
// of the IANA IPv4 and IPv6 Special-Purpose Address Registries, each with a
// class and a name; an address takes the longest prefix that holds it. IPv6
// forms that embed an IPv4 address (IPv4-mapped, IPv4-compatible,
// IPv4-translated, NAT64, 6to4, Teredo) are classed as the embedded address
// when that one is not public, so ::ffff:127.0.0.1, 64:ff9b::7f00:1 and
// 2002:7f00:1:: are loopback.
#pragma once

#include <sys/socket.h>

#include <optional>
#include <string>
#include <string_view>

#include "conveyor/http_delivery.hpp"

namespace conveyor::http_delivery {

enum class AddressClass {
  kPublic,       // also NAT64 64:ff9b::/96 and ::ffff:0:0/96 of a public IPv4
  kLoopback,     // 127/8, ::1
  kPrivate,      // 10/8, 172.16/12, 192.168/16, fc00::/7, fec0::/10
  kLinkLocal,    // 169.254/16, fe80::/10
  kSharedCgnat,  // 100.64/10
  kUnspecified,  // 0/8, ::
  kMulticast,    // 224/4, ff00::/8
  kBroadcast,    // 255.255.255.255
  // Every other special-purpose block (documentation, benchmarking, protocol
  // assignments, anycast, 240/4, 6to4, Teredo, ...) and IPv6 outside 2000::/3.
  kReserved,
};

struct Classification {
  AddressClass address_class = AddressClass::kUnspecified;
  // Which block, for the message: "benchmarking 198.18.0.0/15",
  // "169.254.169.254 embedded in NAT64 64:ff9b::/96"; empty when the class
  // says it all (127/8, 10/8, ...).
  std::string detail;
};

// The class of an AF_INET or AF_INET6 address and the block that gave it.
// Other families: kPublic is never returned for them (kUnspecified).
// Thread-safe.
Classification classify(const sockaddr* address);

// classify(address).address_class.
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
