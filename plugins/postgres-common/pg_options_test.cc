// Options of the postgres plugin, and opening against servers that cannot be
// used. None of these need a PostgreSQL server.
#include "pg_options.hpp"
#include "notification_listener.hpp"
#include "pg_test_support.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace conveyor::postgres::test {
namespace {

PgOptions parse(const Opts& opts) {
  std::vector<conveyor_option> raw;
  for (const auto& [k, v] : opts) raw.push_back({str(k), str(v)});
  return parse_options(sdk::Options(raw.data(), raw.size()));
}

// The status and message parse_options fails with.
std::pair<conveyor_status, std::string> parse_error(const Opts& opts) {
  try {
    parse(opts);
  } catch (const sdk::Error& e) {
    return {e.code(), e.what()};
  }
  return {CONVEYOR_OK, ""};
}

const std::string kDsn = "postgresql://app:s3cret@db.example:6543/jobs";

TEST(PgOptions, DefaultsAndConninfo) {
  PgOptions o = parse({{"dsn", kDsn}});
  EXPECT_EQ(o.schema, "conveyor");
  EXPECT_EQ(o.pool_size, 8u);
  EXPECT_EQ(o.connect_timeout_s, 5u);
  EXPECT_TRUE(o.async_lease_commits);
  EXPECT_EQ(o.statement_timeout_ms, 60000u);
  EXPECT_EQ(o.idle_close_s, 60u);
  EXPECT_NE(o.conninfo.find("connect_timeout='5'"), std::string::npos) << o.conninfo;
  EXPECT_NE(o.conninfo.find("host='db.example'"), std::string::npos) << o.conninfo;
  EXPECT_NE(o.conninfo.find("port='6543'"), std::string::npos) << o.conninfo;
  EXPECT_NE(o.conninfo.find("password='s3cret'"), std::string::npos) << "libpq needs it";
  EXPECT_NE(o.conninfo.find("client_encoding='UTF8'"), std::string::npos) << o.conninfo;
  EXPECT_NE(o.conninfo.find("fallback_application_name='conveyor'"), std::string::npos);
  EXPECT_EQ(o.target, "db.example:6543/jobs as app");
  EXPECT_EQ(o.target.find("s3cret"), std::string::npos) << "messages never show the password";
}

TEST(PgOptions, ExplicitSettingsWin) {
  PgOptions o = parse({{"dsn",
                        "host=127.0.0.1 dbname=q connect_timeout=11 "
                        "application_name=mine password='it\\'s \\\\ odd'"},
                       {"schema", "jobs_2"},
                       {"pool_size", "3"},
                       {"connect_timeout_s", "7"},
                       {"lease_commit", "sync"},
                       {"statement_timeout_ms", "0"},
                       {"idle_close_s", "0"}});
  EXPECT_FALSE(o.async_lease_commits);
  EXPECT_EQ(o.statement_timeout_ms, 0u) << "0: no limit";
  EXPECT_EQ(o.idle_close_s, 0u) << "0: kept open";
  EXPECT_EQ(o.schema, "jobs_2");
  EXPECT_EQ(o.pool_size, 3u);
  EXPECT_EQ(o.connect_timeout_s, 7u);
  EXPECT_NE(o.conninfo.find("connect_timeout='11'"), std::string::npos)
      << "the dsn's own timeout is kept: " << o.conninfo;
  EXPECT_EQ(o.conninfo.find("connect_timeout='7'"), std::string::npos) << o.conninfo;
  EXPECT_NE(o.conninfo.find("application_name='mine'"), std::string::npos) << o.conninfo;
  // Values are re-quoted so the rebuilt string parses back to the same password.
  EXPECT_NE(o.conninfo.find("password='it\\'s \\\\ odd'"), std::string::npos) << o.conninfo;
  EXPECT_EQ(o.target, "127.0.0.1:5432/q");
}

TEST(PgOptions, RejectsWhatCannotWork) {
  struct Case {
    Opts opts;
    std::string must_mention;
  };
  const Case cases[] = {
      {{}, "'dsn' is required"},
      {{{"dsn", ""}}, "'dsn' is required"},
      {{{"dsn", "postgresql://[::1"}}, "'dsn' is not a PostgreSQL connection string"},
      {{{"dsn", "host=x bogus_key=1"}}, "bogus_key"},
      {{{"dsn", kDsn}, {"colour", "blue"}}, "unknown storage option 'colour'"},
      {{{"dsn", kDsn}, {"schema", "Jobs"}}, "'schema'"},
      {{{"dsn", kDsn}, {"schema", "1jobs"}}, "'schema'"},
      {{{"dsn", kDsn}, {"schema", "pg_jobs"}}, "'schema'"},
      {{{"dsn", kDsn}, {"schema", "x\"; DROP SCHEMA public; --"}}, "'schema'"},
      {{{"dsn", kDsn}, {"schema", std::string(64, 'a')}}, "'schema'"},
      {{{"dsn", kDsn}, {"pool_size", "0"}}, "'pool_size'"},
      {{{"dsn", kDsn}, {"pool_size", "101"}}, "'pool_size'"},
      {{{"dsn", kDsn}, {"pool_size", "8x"}}, "'pool_size'"},
      {{{"dsn", kDsn}, {"connect_timeout_s", "0"}}, "'connect_timeout_s'"},
      {{{"dsn", kDsn}, {"connect_timeout_s", "-1"}}, "'connect_timeout_s'"},
      {{{"dsn", kDsn + "?client_encoding=LATIN1"}}, "UTF8"},
      {{{"dsn", kDsn}, {"lease_commit", "off"}}, "'lease_commit' must be \"async\""},
      {{{"dsn", kDsn}, {"statement_timeout_ms", "-1"}},
       "'statement_timeout_ms' must be a whole number of milliseconds in [0, 86400000]"},
      {{{"dsn", kDsn}, {"statement_timeout_ms", "1s"}}, "0: no limit), got '1s'"},
      {{{"dsn", kDsn}, {"statement_timeout_ms", "86400001"}}, "'statement_timeout_ms'"},
      {{{"dsn", kDsn}, {"idle_close_s", "60s"}},
       "'idle_close_s' must be a whole number of seconds in [0, 86400]"},
      {{{"dsn", kDsn}, {"idle_close_s", "86401"}}, "'idle_close_s'"},
  };
  for (const Case& c : cases) {
    auto [code, message] = parse_error(c.opts);
    EXPECT_EQ(code, CONVEYOR_E_INVALID) << c.must_mention;
    EXPECT_NE(message.find(c.must_mention), std::string::npos)
        << "message '" << message << "' should mention " << c.must_mention;
  }
  EXPECT_EQ(parse(Opts{{"dsn", kDsn}, {"schema", std::string(63, 'a')}}).schema.size(), 63u);
}

TEST(PgOptions, SchemaNamesAndQuoting) {
  for (const char* ok : {"conveyor", "_x", "a1_b2", "z"})
    EXPECT_TRUE(is_valid_schema_name(ok)) << ok;
  for (const char* bad : {"", "A", "a-b", "a b", "9a", "pg_x", "a\"b", "a;b", "ä"})
    EXPECT_FALSE(is_valid_schema_name(bad)) << bad;
  EXPECT_EQ(quote_identifier("jobs"), "\"jobs\"");
  EXPECT_THROW(quote_identifier("a\"b"), sdk::Error);
}

TEST(PgOptions, ChannelNamesFitPostgresIdentifiers) {
  NotifyChannels shortc = channels_for_schema("conveyor");
  EXPECT_EQ(shortc.jobs, "conveyor_jobs_conveyor");
  EXPECT_EQ(shortc.control, "conveyor_ctl_conveyor");
  EXPECT_EQ(shortc.later, "conveyor_later_conveyor");
  const std::string a(63, 'a'), b = std::string(62, 'a') + "b";
  NotifyChannels ca = channels_for_schema(a), cb = channels_for_schema(b);
  for (const auto* n : {&ca.jobs, &ca.control, &ca.later, &cb.jobs, &cb.control, &cb.later})
    EXPECT_LE(n->size(), 63u);
  EXPECT_NE(ca.jobs, cb.jobs) << "long schemas still get channels of their own";
  EXPECT_NE(ca.control, cb.control);
  EXPECT_NE(ca.later, cb.later);
}

// A TCP port on 127.0.0.1 with nothing listening.
int closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

conveyor_status open_with(const Opts& opts, std::string* message) {
  const conveyor_storage_plugin* api =
      conveyor_storage_plugin_entry(CONVEYOR_ABI_MAJOR, CONVEYOR_ABI_MINOR);
  std::vector<conveyor_option> raw;
  for (const auto& [k, v] : opts) raw.push_back({str(k), str(v)});
  conveyor_storage* h = nullptr;
  conveyor_error err{};
  conveyor_status st = api->open(raw.data(), raw.size(), &h, &err);
  *message = err.message;
  if (st == CONVEYOR_OK) api->close(h);
  return st;
}

TEST(PgOpen, RefusedConnectionFailsAtOnceWithTheReason) {
  const std::string dsn =
      "postgresql://nobody:hunter2@127.0.0.1:" + std::to_string(closed_port()) + "/db";
  std::string message;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(open_with({{"dsn", dsn}}, &message), CONVEYOR_E_UNAVAILABLE);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_NE(message.find("127.0.0.1"), std::string::npos) << message;
  EXPECT_NE(message.find("refused"), std::string::npos) << "libpq's reason: " << message;
  EXPECT_EQ(message.find("hunter2"), std::string::npos) << "no password in messages";
}

TEST(PgOpen, SilentServerTimesOutInsteadOfHanging) {
  // Accepts TCP connections (the kernel's backlog does) but never answers.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 8), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string dsn = "host=127.0.0.1 port=" + std::to_string(ntohs(addr.sin_port)) +
                          " dbname=db user=u sslmode=disable";
  std::string message;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(open_with({{"dsn", dsn}, {"connect_timeout_s", "2"}}, &message),
            CONVEYOR_E_UNAVAILABLE);
  const auto took = std::chrono::steady_clock::now() - start;
  ::close(fd);
  EXPECT_LT(took, std::chrono::seconds(10)) << "connect_timeout_s bounds the attempt";
  EXPECT_NE(message.find("timeout"), std::string::npos) << message;
}

}  // namespace
}  // namespace conveyor::postgres::test
