#include "address_guard.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace conveyor::http_delivery {
namespace {

// One IANA special-purpose block (or one of the default rows /0 and 2000::/3). An address is
// classed by the longest block that holds it.
struct BlockSpec {
  std::string_view cidr;       // "198.18.0.0/15"; host bits must be zero
  AddressClass address_class;  // kPublic: not refused (unless it embeds a refused IPv4)
  std::string_view name;       // for the message; empty: the class says it all
  int v4_offset = -1;          // IPv6 forms that embed an IPv4 address: its first byte
  uint32_t v4_xor = 0;         // and what it is XORed with (Teredo inverts its client's)
};

// The IANA IPv4 Special-Purpose Address Registry (RFC 6890 and after), plus multicast and the
// limited broadcast address.
constexpr BlockSpec kIpv4Blocks[] = {
    {"0.0.0.0/0", AddressClass::kPublic, ""},
    {"0.0.0.0/8", AddressClass::kUnspecified, ""},
    {"10.0.0.0/8", AddressClass::kPrivate, ""},
    {"100.64.0.0/10", AddressClass::kSharedCgnat, ""},
    {"127.0.0.0/8", AddressClass::kLoopback, ""},
    {"169.254.0.0/16", AddressClass::kLinkLocal, ""},
    {"172.16.0.0/12", AddressClass::kPrivate, ""},
    {"192.0.0.0/24", AddressClass::kReserved, "IETF protocol assignments"},
    {"192.0.0.0/29", AddressClass::kReserved, "IPv4 service continuity (DS-Lite)"},
    {"192.0.0.8/32", AddressClass::kReserved, "IPv4 dummy address"},
    {"192.0.0.9/32", AddressClass::kReserved, "Port Control Protocol anycast"},
    {"192.0.0.10/32", AddressClass::kReserved, "TURN anycast"},
    {"192.0.0.170/32", AddressClass::kReserved, "NAT64/DNS64 discovery"},
    {"192.0.0.171/32", AddressClass::kReserved, "NAT64/DNS64 discovery"},
    {"192.0.2.0/24", AddressClass::kReserved, "TEST-NET-1 documentation"},
    {"192.31.196.0/24", AddressClass::kReserved, "AS112-v4"},
    {"192.52.193.0/24", AddressClass::kReserved, "AMT"},
    {"192.88.99.0/24", AddressClass::kReserved, "deprecated 6to4 relay anycast"},
    {"192.168.0.0/16", AddressClass::kPrivate, ""},
    {"192.175.48.0/24", AddressClass::kReserved, "AS112 direct delegation"},
    {"198.18.0.0/15", AddressClass::kReserved, "benchmarking"},
    {"198.51.100.0/24", AddressClass::kReserved, "TEST-NET-2 documentation"},
    {"203.0.113.0/24", AddressClass::kReserved, "TEST-NET-3 documentation"},
    {"224.0.0.0/4", AddressClass::kMulticast, ""},
    {"240.0.0.0/4", AddressClass::kReserved, "future use"},
    {"255.255.255.255/32", AddressClass::kBroadcast, ""},
};

// The IANA IPv6 Special-Purpose Address Registry, the older forms that embed an IPv4 address,
// site-local and multicast. Only 2000::/3 is global unicast; the rest of the space is reserved
// by the IETF and nothing public lives there.
constexpr BlockSpec kIpv6Blocks[] = {
    {"::/0", AddressClass::kReserved, "outside global unicast 2000::/3"},
    {"2000::/3", AddressClass::kPublic, ""},
    {"::/128", AddressClass::kUnspecified, ""},
    {"::1/128", AddressClass::kLoopback, ""},
    {"::/96", AddressClass::kReserved, "deprecated IPv4-compatible", 12},
    {"::ffff:0:0/96", AddressClass::kPublic, "IPv4-mapped", 12},  // the IPv4 address decides
    {"::ffff:0:0:0/96", AddressClass::kReserved, "IPv4-translated", 12},
    {"64:ff9b::/96", AddressClass::kPublic, "NAT64", 12},  // the IPv4 address decides
    // RFC 8215 lets the /48 be cut anywhere; this reads the common /96 layout.
    {"64:ff9b:1::/48", AddressClass::kReserved, "local-use NAT64", 12},
    {"100::/64", AddressClass::kReserved, "discard-only"},
    {"2001::/23", AddressClass::kReserved, "IETF protocol assignments"},
    {"2001::/32", AddressClass::kReserved, "Teredo", 12, 0xffffffff},
    {"2001:1::1/128", AddressClass::kReserved, "Port Control Protocol anycast"},
    {"2001:1::2/128", AddressClass::kReserved, "TURN anycast"},
    {"2001:1::3/128", AddressClass::kReserved, "DNS-SD service registration anycast"},
    {"2001:2::/48", AddressClass::kReserved, "benchmarking"},
    {"2001:3::/32", AddressClass::kReserved, "AMT"},
    {"2001:4:112::/48", AddressClass::kReserved, "AS112-v6"},
    {"2001:10::/28", AddressClass::kReserved, "deprecated ORCHID"},
    {"2001:20::/28", AddressClass::kReserved, "ORCHIDv2"},
    {"2001:30::/28", AddressClass::kReserved, "drone remote ID"},
    {"2001:db8::/32", AddressClass::kReserved, "documentation"},
    {"2002::/16", AddressClass::kReserved, "6to4", 2},
    {"2620:4f:8000::/48", AddressClass::kReserved, "AS112 direct delegation"},
    {"3fff::/20", AddressClass::kReserved, "documentation"},
    {"5f00::/16", AddressClass::kReserved, "SRv6 SIDs"},
    {"fc00::/7", AddressClass::kPrivate, "unique local"},
    {"fe80::/10", AddressClass::kLinkLocal, ""},
    {"fec0::/10", AddressClass::kPrivate, "deprecated site-local"},
    {"ff00::/8", AddressClass::kMulticast, ""},
};

struct Block {
  std::array<uint8_t, 16> prefix{};  // network byte order; 4 bytes used for IPv4
  int bits = 0;
  const BlockSpec* spec = nullptr;
};

// The table parsed; a malformed row is a bug found by the first call (every test makes one).
template <size_t N>
std::vector<Block> parse_blocks(const BlockSpec (&specs)[N], int family) {
  std::vector<Block> blocks;
  const int max_bits = family == AF_INET ? 32 : 128;
  for (const BlockSpec& spec : specs) {
    Block block;
    block.spec = &spec;
    size_t slash = spec.cidr.find('/');
    std::string address(spec.cidr.substr(0, slash));
    bool ok = slash != std::string_view::npos &&
              inet_pton(family, address.c_str(), block.prefix.data()) == 1;
    if (ok) {
      auto length = spec.cidr.substr(slash + 1);
      auto [end, error] = std::from_chars(length.data(), length.data() + length.size(), block.bits);
      ok = error == std::errc() && end == length.data() + length.size() && block.bits >= 0 &&
           block.bits <= max_bits;
    }
    for (int bit = block.bits; ok && bit < max_bits; ++bit) {  // host bits must be zero
      ok = (block.prefix[bit / 8] & (0x80 >> (bit % 8))) == 0;
    }
    if (!ok) {
      std::fprintf(stderr, "address_guard: bad block %.*s\n", static_cast<int>(spec.cidr.size()),
                   spec.cidr.data());
      std::abort();
    }
    blocks.push_back(block);
  }
  return blocks;
}

const std::vector<Block>& ipv4_blocks() {
  static const std::vector<Block> blocks = parse_blocks(kIpv4Blocks, AF_INET);
  return blocks;
}

const std::vector<Block>& ipv6_blocks() {
  static const std::vector<Block> blocks = parse_blocks(kIpv6Blocks, AF_INET6);
  return blocks;
}

bool holds(const Block& block, const uint8_t* address) {
  int whole = block.bits / 8;
  int rest = block.bits % 8;
  if (std::memcmp(address, block.prefix.data(), static_cast<size_t>(whole)) != 0) return false;
  if (rest == 0) return true;
  auto mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (address[whole] & mask) == block.prefix[whole];
}

// The longest block holding address (the /0 row holds every one).
const Block& longest_match(const std::vector<Block>& blocks, const uint8_t* address) {
  const Block* best = &blocks.front();
  for (const Block& block : blocks) {
    if (block.bits > best->bits && holds(block, address)) best = &block;
  }
  return *best;
}

// The block's name and prefix ("benchmarking 198.18.0.0/15"), or "" for a row whose class says
// it all; a /0 row's name stands alone.
std::string detail(const Block& block) {
  if (block.spec->name.empty()) return "";
  if (block.bits == 0) return std::string(block.spec->name);
  return fmt::format("{} {}", block.spec->name, block.spec->cidr);
}

Classification classify_v4(const uint8_t* address) {
  const Block& block = longest_match(ipv4_blocks(), address);
  return {block.spec->address_class, detail(block)};
}

Classification classify_v6(const uint8_t* address) {
  const Block& block = longest_match(ipv6_blocks(), address);
  if (block.spec->v4_offset >= 0) {
    // An embedded IPv4 address that is not public decides: it is what the packet reaches after
    // translation, relay or tunnel, so it is refused exactly as the IPv4 address would be.
    std::array<uint8_t, 4> v4{};
    for (size_t i = 0; i < v4.size(); ++i) {
      v4[i] = static_cast<uint8_t>(address[static_cast<size_t>(block.spec->v4_offset) + i] ^
                                   (block.spec->v4_xor >> (24 - 8 * i)));
    }
    Classification embedded = classify_v4(v4.data());
    if (embedded.address_class != AddressClass::kPublic) {
      char text[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, v4.data(), text, sizeof text);
      std::string what = embedded.detail.empty() ? std::string(text)
                                                 : fmt::format("{}, {},", text, embedded.detail);
      return {embedded.address_class,
              fmt::format("{} embedded in {} {}", what, block.spec->name, block.spec->cidr)};
    }
  }
  return {block.spec->address_class, detail(block)};
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

Classification classify(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    sockaddr_in v4;
    std::memcpy(&v4, address, sizeof v4);
    return classify_v4(reinterpret_cast<const uint8_t*>(&v4.sin_addr.s_addr));
  }
  if (address->sa_family == AF_INET6) {
    sockaddr_in6 v6;
    std::memcpy(&v6, address, sizeof v6);
    return classify_v6(v6.sin6_addr.s6_addr);
  }
  return {AddressClass::kUnspecified, ""};  // address_text names the family
}

AddressClass classify_address(const sockaddr* address) { return classify(address).address_class; }

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
    case AddressClass::kReserved:
      return "a reserved address";
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
  Classification what = classify(address);
  if (what.address_class == AddressClass::kPublic || host_allowed(host, policy)) {
    return std::nullopt;
  }
  std::string text = address_text(address);
  std::string target =
      strip_brackets(host) == text ? text : fmt::format("{} ({})", strip_brackets(host), text);
  std::string why = what.detail.empty()
                        ? std::string(describe(what.address_class))
                        : fmt::format("{} ({})", describe(what.address_class), what.detail);
  return fmt::format(
      "target {} is {}; set [http] allow_private = true or list the host in [http] allow_hosts",
      target, why);
}

}  // namespace conveyor::http_delivery
