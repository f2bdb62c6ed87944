#include "address_guard.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <ostream>
#include <string>

// Address literals only: nothing here resolves a name or connects anywhere.

namespace conveyor::http_delivery {

// For gtest's messages ("a loopback address" rather than the enum's bytes).
void PrintTo(AddressClass address_class, std::ostream* out) { *out << describe(address_class); }

namespace {

// The address as a sockaddr_storage (IPv6 if it has a ':').
sockaddr_storage parse(const std::string& text) {
  sockaddr_storage storage{};
  if (text.find(':') != std::string::npos) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
    v6->sin6_family = AF_INET6;
    EXPECT_EQ(inet_pton(AF_INET6, text.c_str(), &v6->sin6_addr), 1) << text;
  } else {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
    v4->sin_family = AF_INET;
    EXPECT_EQ(inet_pton(AF_INET, text.c_str(), &v4->sin_addr), 1) << text;
  }
  return storage;
}

AddressClass class_of(const std::string& text) {
  sockaddr_storage s = parse(text);
  return classify_address(reinterpret_cast<sockaddr*>(&s));
}

constexpr std::string_view kWhatToSet =
    "; set [http] allow_private = true or list the host in [http] allow_hosts";

struct Case {
  const char* address;
  AddressClass expected;
  // What the refusal says the address is (after "target <address> is "); empty: the class alone
  // (describe(expected)). Unused for kPublic.
  const char* why = "";
};

using C = AddressClass;

// Every IANA special-purpose block (one address inside, its edges where they matter, and the
// public neighbours just outside), the forms of IPv6 that embed an IPv4 address, and public
// addresses that must pass.
const Case kCases[] = {
    // ---- IPv4
    {"8.8.8.8", C::kPublic},
    {"1.1.1.1", C::kPublic},
    {"0.0.0.0", C::kUnspecified},
    {"0.255.255.255", C::kUnspecified},
    {"1.0.0.0", C::kPublic},
    {"9.255.255.255", C::kPublic},
    {"10.0.0.0", C::kPrivate},
    {"10.255.255.255", C::kPrivate},
    {"11.0.0.0", C::kPublic},
    {"100.63.255.255", C::kPublic},
    {"100.64.0.0", C::kSharedCgnat},
    {"100.127.255.255", C::kSharedCgnat},
    {"100.128.0.0", C::kPublic},
    {"126.255.255.255", C::kPublic},
    {"127.0.0.1", C::kLoopback},
    {"127.255.255.255", C::kLoopback},
    {"128.0.0.0", C::kPublic},
    {"169.253.255.255", C::kPublic},
    {"169.254.0.0", C::kLinkLocal},
    {"169.254.169.254", C::kLinkLocal},
    {"169.254.255.255", C::kLinkLocal},
    {"169.255.0.0", C::kPublic},
    {"172.15.255.255", C::kPublic},
    {"172.16.0.0", C::kPrivate},
    {"172.31.255.255", C::kPrivate},
    {"172.32.0.0", C::kPublic},
    {"191.255.255.255", C::kPublic},
    {"192.0.0.0", C::kReserved,
     "a reserved address (IPv4 service continuity (DS-Lite) 192.0.0.0/29)"},
    {"192.0.0.8", C::kReserved, "a reserved address (IPv4 dummy address 192.0.0.8/32)"},
    {"192.0.0.9", C::kReserved, "a reserved address (Port Control Protocol anycast 192.0.0.9/32)"},
    {"192.0.0.10", C::kReserved, "a reserved address (TURN anycast 192.0.0.10/32)"},
    {"192.0.0.170", C::kReserved, "a reserved address (NAT64/DNS64 discovery 192.0.0.170/32)"},
    {"192.0.0.171", C::kReserved, "a reserved address (NAT64/DNS64 discovery 192.0.0.171/32)"},
    {"192.0.0.100", C::kReserved, "a reserved address (IETF protocol assignments 192.0.0.0/24)"},
    {"192.0.0.255", C::kReserved, "a reserved address (IETF protocol assignments 192.0.0.0/24)"},
    {"192.0.1.0", C::kPublic},
    {"192.0.2.0", C::kReserved, "a reserved address (TEST-NET-1 documentation 192.0.2.0/24)"},
    {"192.0.2.255", C::kReserved, "a reserved address (TEST-NET-1 documentation 192.0.2.0/24)"},
    {"192.0.3.0", C::kPublic},
    {"192.31.195.255", C::kPublic},
    {"192.31.196.1", C::kReserved, "a reserved address (AS112-v4 192.31.196.0/24)"},
    {"192.31.197.0", C::kPublic},
    {"192.52.192.255", C::kPublic},
    {"192.52.193.1", C::kReserved, "a reserved address (AMT 192.52.193.0/24)"},
    {"192.52.194.0", C::kPublic},
    {"192.88.98.255", C::kPublic},
    {"192.88.99.1", C::kReserved,
     "a reserved address (deprecated 6to4 relay anycast 192.88.99.0/24)"},
    {"192.88.100.0", C::kPublic},
    {"192.167.255.255", C::kPublic},
    {"192.168.0.0", C::kPrivate},
    {"192.168.255.255", C::kPrivate},
    {"192.169.0.0", C::kPublic},
    {"192.175.47.255", C::kPublic},
    {"192.175.48.1", C::kReserved, "a reserved address (AS112 direct delegation 192.175.48.0/24)"},
    {"192.175.49.0", C::kPublic},
    {"198.17.255.255", C::kPublic},
    {"198.18.0.0", C::kReserved, "a reserved address (benchmarking 198.18.0.0/15)"},
    {"198.19.255.255", C::kReserved, "a reserved address (benchmarking 198.18.0.0/15)"},
    {"198.20.0.0", C::kPublic},
    {"198.51.99.255", C::kPublic},
    {"198.51.100.1", C::kReserved, "a reserved address (TEST-NET-2 documentation 198.51.100.0/24)"},
    {"198.51.101.0", C::kPublic},
    {"203.0.112.255", C::kPublic},
    {"203.0.113.1", C::kReserved, "a reserved address (TEST-NET-3 documentation 203.0.113.0/24)"},
    {"203.0.114.0", C::kPublic},
    {"223.255.255.255", C::kPublic},
    {"224.0.0.1", C::kMulticast},
    {"239.255.255.255", C::kMulticast},
    {"240.0.0.0", C::kReserved, "a reserved address (future use 240.0.0.0/4)"},
    {"255.255.255.254", C::kReserved, "a reserved address (future use 240.0.0.0/4)"},
    {"255.255.255.255", C::kBroadcast},

    // ---- IPv6
    {"2606:4700::1111", C::kPublic},
    {"2001:4860:4860::8888", C::kPublic},
    {"2a00:1450:4001::1", C::kPublic},
    {"::", C::kUnspecified},
    {"::1", C::kLoopback},
    // Anything outside global unicast (2000::/3) not in a block below is reserved by the IETF.
    {"1::1", C::kReserved, "a reserved address (outside global unicast 2000::/3)"},
    {"4000::1", C::kReserved, "a reserved address (outside global unicast 2000::/3)"},
    {"fbff::1", C::kReserved, "a reserved address (outside global unicast 2000::/3)"},
    {"1fff:ffff::1", C::kReserved, "a reserved address (outside global unicast 2000::/3)"},
    {"2000::1", C::kPublic},
    {"3fff:ffff::1", C::kPublic},
    // IPv4-mapped ::ffff:0:0/96: the IPv4 address it maps decides.
    {"::ffff:8.8.8.8", C::kPublic},
    {"::ffff:127.0.0.1", C::kLoopback,
     "a loopback address (127.0.0.1 embedded in IPv4-mapped ::ffff:0:0/96)"},
    {"::ffff:10.0.0.1", C::kPrivate,
     "a private address (10.0.0.1 embedded in IPv4-mapped ::ffff:0:0/96)"},
    {"::ffff:169.254.169.254", C::kLinkLocal,
     "a link-local address (169.254.169.254 embedded in IPv4-mapped ::ffff:0:0/96)"},
    {"::ffff:198.18.0.1", C::kReserved,
     "a reserved address (198.18.0.1, benchmarking 198.18.0.0/15, embedded in IPv4-mapped "
     "::ffff:0:0/96)"},
    {"::ffff:0.0.0.0", C::kUnspecified,
     "an unspecified address (0.0.0.0 embedded in IPv4-mapped ::ffff:0:0/96)"},
    {"::ffff:255.255.255.255", C::kBroadcast,
     "a broadcast address (255.255.255.255 embedded in IPv4-mapped ::ffff:0:0/96)"},
    // IPv4-translated ::ffff:0:0:0/96 (SIIT).
    {"::ffff:0:7f00:1", C::kLoopback,
     "a loopback address (127.0.0.1 embedded in IPv4-translated ::ffff:0:0:0/96)"},
    {"::ffff:0:a9fe:a9fe", C::kLinkLocal,
     "a link-local address (169.254.169.254 embedded in IPv4-translated ::ffff:0:0:0/96)"},
    {"::ffff:0:808:808", C::kReserved, "a reserved address (IPv4-translated ::ffff:0:0:0/96)"},
    // IPv4-compatible ::/96 (deprecated).
    {"::127.0.0.1", C::kLoopback,
     "a loopback address (127.0.0.1 embedded in deprecated IPv4-compatible ::/96)"},
    {"::10.1.2.3", C::kPrivate,
     "a private address (10.1.2.3 embedded in deprecated IPv4-compatible ::/96)"},
    {"::2", C::kUnspecified,
     "an unspecified address (0.0.0.2 embedded in deprecated IPv4-compatible ::/96)"},
    {"::8.8.8.8", C::kReserved, "a reserved address (deprecated IPv4-compatible ::/96)"},
    // NAT64 64:ff9b::/96: globally reachable, so the IPv4 address it translates to decides.
    {"64:ff9b::808:808", C::kPublic},
    {"64:ff9b::a9fe:a9fe", C::kLinkLocal,
     "a link-local address (169.254.169.254 embedded in NAT64 64:ff9b::/96)"},
    {"64:ff9b::7f00:1", C::kLoopback,
     "a loopback address (127.0.0.1 embedded in NAT64 64:ff9b::/96)"},
    {"64:ff9b::c0a8:101", C::kPrivate,
     "a private address (192.168.1.1 embedded in NAT64 64:ff9b::/96)"},
    {"64:ff9b::f000:1", C::kReserved,
     "a reserved address (240.0.0.1, future use 240.0.0.0/4, embedded in NAT64 64:ff9b::/96)"},
    {"64:ff9b::1:808:808", C::kReserved, "a reserved address (outside global unicast 2000::/3)"},
    // Local-use NAT64 64:ff9b:1::/48: not globally reachable.
    {"64:ff9b:1::808:808", C::kReserved, "a reserved address (local-use NAT64 64:ff9b:1::/48)"},
    {"64:ff9b:1::7f00:1", C::kLoopback,
     "a loopback address (127.0.0.1 embedded in local-use NAT64 64:ff9b:1::/48)"},
    {"64:ff9b:1:ffff::a9fe:a9fe", C::kLinkLocal,
     "a link-local address (169.254.169.254 embedded in local-use NAT64 64:ff9b:1::/48)"},
    {"100::1", C::kReserved, "a reserved address (discard-only 100::/64)"},
    // 2001::/23, IETF protocol assignments, and the blocks in it.
    {"2001:1ff:ffff::1", C::kReserved, "a reserved address (IETF protocol assignments 2001::/23)"},
    {"2001:200::1", C::kPublic},
    {"2001:1::1", C::kReserved, "a reserved address (Port Control Protocol anycast 2001:1::1/128)"},
    {"2001:1::2", C::kReserved, "a reserved address (TURN anycast 2001:1::2/128)"},
    {"2001:1::3", C::kReserved,
     "a reserved address (DNS-SD service registration anycast 2001:1::3/128)"},
    {"2001:2::1", C::kReserved, "a reserved address (benchmarking 2001:2::/48)"},
    {"2001:3::1", C::kReserved, "a reserved address (AMT 2001:3::/32)"},
    {"2001:4:112::1", C::kReserved, "a reserved address (AS112-v6 2001:4:112::/48)"},
    {"2001:10::1", C::kReserved, "a reserved address (deprecated ORCHID 2001:10::/28)"},
    {"2001:20::1", C::kReserved, "a reserved address (ORCHIDv2 2001:20::/28)"},
    {"2001:30::1", C::kReserved, "a reserved address (drone remote ID 2001:30::/28)"},
    // Teredo 2001::/32: the client's IPv4 address is the last 32 bits inverted.
    {"2001:0:4136:e378:8000:63bf:80ff:fffe", C::kLoopback,
     "a loopback address (127.0.0.1 embedded in Teredo 2001::/32)"},
    {"2001:0:4136:e378:8000:63bf:5601:5601", C::kLinkLocal,
     "a link-local address (169.254.169.254 embedded in Teredo 2001::/32)"},
    {"2001:0:4136:e378:8000:63bf:f5ff:fffe", C::kPrivate,
     "a private address (10.0.0.1 embedded in Teredo 2001::/32)"},
    {"2001:0:4136:e378:8000:63bf:3fff:fdd2", C::kReserved,
     "a reserved address (192.0.2.45, TEST-NET-1 documentation 192.0.2.0/24, embedded in Teredo "
     "2001::/32)"},
    {"2001:0:4136:e378:8000:63bf:f7f7:f7f7", C::kReserved, "a reserved address (Teredo 2001::/32)"},
    {"2001:db7:ffff::1", C::kPublic},
    {"2001:db8::1", C::kReserved, "a reserved address (documentation 2001:db8::/32)"},
    {"2001:db9::1", C::kPublic},
    // 6to4 2002::/16: the IPv4 address is bits 16..47.
    {"2001:ffff:ffff::1", C::kPublic},
    {"2002:7f00:1::", C::kLoopback, "a loopback address (127.0.0.1 embedded in 6to4 2002::/16)"},
    {"2002:a9fe:a9fe::1", C::kLinkLocal,
     "a link-local address (169.254.169.254 embedded in 6to4 2002::/16)"},
    {"2002:c0a8:101::1", C::kPrivate, "a private address (192.168.1.1 embedded in 6to4 2002::/16)"},
    {"2002:c612:1::", C::kReserved,
     "a reserved address (198.18.0.1, benchmarking 198.18.0.0/15, embedded in 6to4 2002::/16)"},
    {"2002:808:808::1", C::kReserved, "a reserved address (6to4 2002::/16)"},
    {"2003::1", C::kPublic},
    {"2620:4f:7fff::1", C::kPublic},
    {"2620:4f:8000::1", C::kReserved,
     "a reserved address (AS112 direct delegation 2620:4f:8000::/48)"},
    {"2620:4f:8001::1", C::kPublic},
    {"3ffe:ffff::1", C::kPublic},
    {"3fff::1", C::kReserved, "a reserved address (documentation 3fff::/20)"},
    {"3fff:fff:ffff::1", C::kReserved, "a reserved address (documentation 3fff::/20)"},
    {"3fff:1000::1", C::kPublic},
    {"5f00::1", C::kReserved, "a reserved address (SRv6 SIDs 5f00::/16)"},
    {"fc00::1", C::kPrivate, "a private address (unique local fc00::/7)"},
    {"fdff:ffff::1", C::kPrivate, "a private address (unique local fc00::/7)"},
    {"fe80::1", C::kLinkLocal},
    {"febf::1", C::kLinkLocal},
    {"fec0::1", C::kPrivate, "a private address (deprecated site-local fec0::/10)"},
    {"feff::1", C::kPrivate, "a private address (deprecated site-local fec0::/10)"},
    {"ff00::1", C::kMulticast},
    {"ff02::1", C::kMulticast},
};

TEST(AddressGuard, ClassifiesEverySpecialPurposeBlock) {
  for (const Case& c : kCases) {
    EXPECT_EQ(class_of(c.address), c.expected) << c.address;
  }
}

TEST(AddressGuard, RefusalNamesTheAddressAndWhy) {
  Policy policy;
  for (const Case& c : kCases) {
    sockaddr_storage s = parse(c.address);
    auto* a = reinterpret_cast<sockaddr*>(&s);
    std::string text = address_text(a);
    auto why = refusal(a, text, policy);
    if (c.expected == AddressClass::kPublic) {
      EXPECT_EQ(why, std::nullopt) << c.address;
      continue;
    }
    std::string what = *c.why != '\0' ? std::string(c.why) : std::string(describe(c.expected));
    EXPECT_EQ(why, fmt::format("target {} is {}{}", text, what, kWhatToSet)) << c.address;
  }
}

TEST(AddressGuard, RefusalSaysWhatToSet) {
  Policy policy;
  sockaddr_storage s = parse("127.0.0.1");
  auto* a = reinterpret_cast<sockaddr*>(&s);
  EXPECT_EQ(refusal(a, "127.0.0.1", policy),
            "target 127.0.0.1 is a loopback address; set [http] allow_private = true or list the "
            "host in [http] allow_hosts");
  EXPECT_EQ(refusal(a, "hooks.example", policy),
            "target hooks.example (127.0.0.1) is a loopback address; set [http] allow_private = "
            "true or list the host in [http] allow_hosts");
  sockaddr_storage pub = parse("8.8.8.8");
  EXPECT_EQ(refusal(reinterpret_cast<sockaddr*>(&pub), "dns.example", policy), std::nullopt);
  sockaddr_storage nat64 = parse("64:ff9b::a9fe:a9fe");
  EXPECT_EQ(refusal(reinterpret_cast<sockaddr*>(&nat64), "[64:ff9b::a9fe:a9fe]", policy),
            "target 64:ff9b::a9fe:a9fe is a link-local address (169.254.169.254 embedded in NAT64 "
            "64:ff9b::/96); set [http] allow_private = true or list the host in [http] "
            "allow_hosts");
  EXPECT_EQ(refusal(reinterpret_cast<sockaddr*>(&nat64), "metadata.example", policy),
            "target metadata.example (64:ff9b::a9fe:a9fe) is a link-local address "
            "(169.254.169.254 embedded in NAT64 64:ff9b::/96); set [http] allow_private = true or "
            "list the host in [http] allow_hosts");
}

TEST(AddressGuard, AllowPrivateAndAllowHosts) {
  sockaddr_storage s = parse("10.0.0.5");
  auto* a = reinterpret_cast<sockaddr*>(&s);
  Policy open;
  open.allow_private = true;
  EXPECT_EQ(refusal(a, "internal", open), std::nullopt);
  Policy listed;
  listed.allow_hosts = {"Internal.Example", "[fd00::1]"};
  EXPECT_EQ(refusal(a, "internal.example", listed), std::nullopt);
  EXPECT_NE(refusal(a, "internal.example.evil", listed), std::nullopt);
  EXPECT_NE(refusal(a, "other", listed), std::nullopt);
  EXPECT_TRUE(host_allowed("[FD00::1]", listed));
  EXPECT_TRUE(host_allowed("fd00::1", listed));
}

// The operator's switches cover the new classes as they do the old ones.
TEST(AddressGuard, AllowPrivateAndAllowHostsCoverEveryClass) {
  Policy open;
  open.allow_private = true;
  Policy listed;
  listed.allow_hosts = {"internal.example"};
  Policy closed;
  for (const char* address : {"198.18.0.1", "240.0.0.1", "2002:7f00:1::", "64:ff9b::a9fe:a9fe",
                              "2001:db8::1", "fec0::1", "::ffff:0:7f00:1"}) {
    sockaddr_storage s = parse(address);
    auto* a = reinterpret_cast<sockaddr*>(&s);
    EXPECT_EQ(refusal(a, "internal.example", open), std::nullopt) << address;
    EXPECT_EQ(refusal(a, "internal.example", listed), std::nullopt) << address;
    EXPECT_NE(refusal(a, "internal.example", closed), std::nullopt) << address;
    EXPECT_NE(refusal(a, "other.example", listed), std::nullopt) << address;
  }
}

TEST(AddressGuard, OtherFamiliesAreNeverPublic) {
  sockaddr_storage s{};
  s.ss_family = AF_UNIX;
  auto* a = reinterpret_cast<sockaddr*>(&s);
  EXPECT_NE(classify_address(a), AddressClass::kPublic);
  EXPECT_NE(refusal(a, "x", Policy{}), std::nullopt);
}

}  // namespace
}  // namespace conveyor::http_delivery
