// Tokens, the access rules and the start-up security check.
#include "auth.hpp"

#include <conveyor/admin_server.hpp>

#include <gtest/gtest.h>

namespace conveyor {
namespace {

ServerConfig server(std::string token, bool allow, std::string listen = "127.0.0.1:8080") {
  ServerConfig c;
  c.listen = std::move(listen);
  c.admin_token = std::move(token);
  c.allow_unauthenticated = allow;
  return c;
}

TEST(ConstantTimeEqual, ComparesWholeStrings) {
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_TRUE(constant_time_equal("s3cret", "s3cret"));
  EXPECT_FALSE(constant_time_equal("s3cret", "s3creT"));
  EXPECT_FALSE(constant_time_equal("s3cret", "s3cret2"));
  EXPECT_FALSE(constant_time_equal("s3cret2", "s3cret"));
  EXPECT_FALSE(constant_time_equal("", "x"));
  EXPECT_FALSE(constant_time_equal(std::string_view("a\0b", 3), std::string_view("a\0c", 3)));
}

TEST(Authenticator, TokenRequiredWhenConfigured) {
  Authenticator auth(server("s3cret", false));
  EXPECT_FALSE(auth.check("Bearer s3cret"));
  EXPECT_FALSE(auth.check("bearer s3cret"));  // the scheme is case-insensitive
  auto missing = auth.check(std::nullopt);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->code(), ApiCode::kUnauthenticated);
  EXPECT_NE(std::string(missing->what()).find("Authorization: Bearer"), std::string::npos);
  auto wrong = auth.check("Bearer s3creT");
  ASSERT_TRUE(wrong);
  EXPECT_STREQ(wrong->what(), "wrong admin token");
  auto basic = auth.check("Basic czNjcmV0");
  ASSERT_TRUE(basic);
  EXPECT_EQ(basic->code(), ApiCode::kUnauthenticated);
  EXPECT_TRUE(auth.check("Bearer "));
}

TEST(Authenticator, AConfiguredTokenIsRequiredWhateverAllowUnauthenticatedSays) {
  Authenticator auth(server("s3cret", true));
  auto missing = auth.check(std::nullopt);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->code(), ApiCode::kUnauthenticated);
  EXPECT_FALSE(auth.check("Bearer s3cret"));
  EXPECT_TRUE(auth.check("Bearer nope"));
  Authenticator open(server("", true));
  EXPECT_FALSE(open.check(std::nullopt));
  EXPECT_FALSE(open.check("Bearer anything"));
}

TEST(Authenticator, NoTokenAndNoPermissionRefusesEverythingAndSaysWhatToSet) {
  Authenticator auth(server("", false));
  auto e = auth.check(std::nullopt);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ApiCode::kUnauthenticated);
  EXPECT_NE(std::string(e->what()).find("admin_token"), std::string::npos);
  EXPECT_NE(std::string(e->what()).find("allow_unauthenticated"), std::string::npos);
  EXPECT_TRUE(auth.check("Bearer x"));
}

TEST(Authenticator, TheWorkerTokenCallsOnlyTheWorkersMethods) {
  ServerConfig config = server("admin-s3cret", false);
  config.worker_token = "worker-s3cret";
  Authenticator auth(config);
  for (const char* path :
       {"/conveyor.v1.WorkerService/Claim", "/conveyor.v1.WorkerService/Complete",
        "/conveyor.v1.TaskService/Enqueue", "/conveyor.v1.TaskService/EnqueueBatch",
        "/conveyor.v1.TaskService/GetJob"}) {
    EXPECT_FALSE(auth.check("Bearer worker-s3cret", path)) << path;
    EXPECT_FALSE(auth.check("Bearer admin-s3cret", path)) << path;  // admin: everything
  }
  for (const char* path : {"/conveyor.v1.AdminService/ListQueues",
                           "/conveyor.v1.AdminService/DeleteJobs", "/metrics", ""}) {
    auto denied = auth.check("Bearer worker-s3cret", path);
    ASSERT_TRUE(denied) << path;
    EXPECT_EQ(denied->code(), ApiCode::kPermissionDenied) << path;
    EXPECT_NE(std::string(denied->what()).find("use the admin token"), std::string::npos);
    EXPECT_FALSE(auth.check("Bearer admin-s3cret", path)) << path;
  }
  auto wrong = auth.check("Bearer worker-s3creT", "/conveyor.v1.WorkerService/Claim");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->code(), ApiCode::kUnauthenticated);
  EXPECT_STREQ(wrong->what(), "wrong token (neither the admin token nor the worker token)");
}

TEST(Authenticator, AWorkerTokenAloneOpensOnlyTheWorkersMethods) {
  ServerConfig config = server("", false);
  config.worker_token = "worker-s3cret";
  Authenticator auth(config);
  EXPECT_FALSE(auth.check("Bearer worker-s3cret", "/conveyor.v1.WorkerService/Claim"));
  EXPECT_TRUE(auth.check("Bearer worker-s3cret", "/conveyor.v1.AdminService/ListQueues"));
  EXPECT_TRUE(auth.check(std::nullopt, "/conveyor.v1.WorkerService/Claim"));
}

TEST(Loopback, RecognisesLoopbackAddressesOnly) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "::1", "localhost", "LOCALHOST"})
    EXPECT_TRUE(is_loopback_host(host)) << host;
  for (const char* host :
       {"0.0.0.0", "10.0.0.1", "::", "example.com", "128.0.0.1", "::ffff:127.0.0.1"})
    EXPECT_FALSE(is_loopback_host(host)) << host;
}

TEST(ServerSecurity, RefusesAnOpenNonLoopbackAddress) {
  try {
    check_server_security(server("", false, "0.0.0.0:8080"));
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "[server] listen = 0.0.0.0:8080 is not a loopback address: set admin_token (or "
                 "CONVEYOR_ADMIN_TOKEN), or allow_unauthenticated = true to accept the risk");
  }
  EXPECT_NO_THROW(check_server_security(server("t", false, "0.0.0.0:8080")));
  EXPECT_NO_THROW(check_server_security(server("", true, "0.0.0.0:8080")));
  EXPECT_NO_THROW(check_server_security(server("", false, "127.0.0.1:8080")));
  EXPECT_NO_THROW(check_server_security(server("", false, "[::1]:8080")));
}

TEST(ServerSecurity, LoopbackOnlyPermissionRefusesAnotherAddressNamingBothSettings) {
  ServerConfig c = server("", true, "0.0.0.0:8080");
  c.unauthenticated_loopback_only = true;
  try {
    check_server_security(c);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "[server] allow_unauthenticated = \"loopback\" allows calls without a token only "
                 "on a loopback address, but listen = 0.0.0.0:8080: set admin_token (or "
                 "CONVEYOR_ADMIN_TOKEN), or listen on 127.0.0.1");
  }
  c.listen = "127.0.0.1:8080";
  EXPECT_NO_THROW(check_server_security(c));
  c.listen = "0.0.0.0:8080";
  c.admin_token = "t";
  EXPECT_NO_THROW(check_server_security(c));
}

}  // namespace
}  // namespace conveyor
