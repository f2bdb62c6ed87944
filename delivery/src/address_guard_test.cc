#include "address_guard.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <string>

namespace conveyor::http_delivery {
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

TEST(AddressGuard, ClassifiesRanges) {
  EXPECT_EQ(class_of("127.0.0.1"), AddressClass::kLoopback);
  EXPECT_EQ(class_of("127.255.1.2"), AddressClass::kLoopback);
  EXPECT_EQ(class_of("::1"), AddressClass::kLoopback);
  EXPECT_EQ(class_of("10.1.2.3"), AddressClass::kPrivate);
  EXPECT_EQ(class_of("172.16.0.1"), AddressClass::kPrivate);
  EXPECT_EQ(class_of("172.31.255.255"), AddressClass::kPrivate);
  EXPECT_EQ(class_of("192.168.1.1"), AddressClass::kPrivate);
  EXPECT_EQ(class_of("fc00::1"), AddressClass::kPrivate);
  EXPECT_EQ(class_of("fd12:3456::1"), AddressClass::kPrivate);
  EXPECT_EQ(class_of("169.254.169.254"), AddressClass::kLinkLocal);
  EXPECT_EQ(class_of("fe80::1"), AddressClass::kLinkLocal);
  EXPECT_EQ(class_of("febf::1"), AddressClass::kLinkLocal);
  EXPECT_EQ(class_of("100.64.0.1"), AddressClass::kSharedCgnat);
  EXPECT_EQ(class_of("100.127.255.255"), AddressClass::kSharedCgnat);
  EXPECT_EQ(class_of("0.0.0.0"), AddressClass::kUnspecified);
  EXPECT_EQ(class_of("::"), AddressClass::kUnspecified);
  EXPECT_EQ(class_of("224.0.0.1"), AddressClass::kMulticast);
  EXPECT_EQ(class_of("ff02::1"), AddressClass::kMulticast);
  EXPECT_EQ(class_of("255.255.255.255"), AddressClass::kBroadcast);
}

TEST(AddressGuard, Ipv4MappedIsClassedAsIpv4) {
  EXPECT_EQ(class_of("::ffff:127.0.0.1"), AddressClass::kLoopback);
  EXPECT_EQ(class_of("::ffff:10.0.0.1"), AddressClass::kPrivate);
  EXPECT_EQ(class_of("::ffff:169.254.169.254"), AddressClass::kLinkLocal);
  EXPECT_EQ(class_of("::ffff:8.8.8.8"), AddressClass::kPublic);
}

TEST(AddressGuard, NeighboursOfRangesArePublic) {
  for (const char* a : {"8.8.8.8", "1.1.1.1", "172.15.255.255", "172.32.0.0", "192.167.255.255",
                        "100.63.255.255", "100.128.0.0", "126.255.255.255", "128.0.0.1",
                        "169.253.255.255", "2001:4860:4860::8888", "fbff::1", "fec0::1"}) {
    EXPECT_EQ(class_of(a), AddressClass::kPublic) << a;
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

}  // namespace
}  // namespace conveyor::http_delivery
