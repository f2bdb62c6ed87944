// Helpers for the tests of Conveyor's PostgreSQL plugins: the server under
// test (env CONVEYOR_TEST_PG_DSN), a fresh schema per test, and the plugin
// driven through its C ABI table (conveyor_storage_plugin_entry, no loader)
// with the wrappers every plugin's tests share (conveyor/testing/plugin_calls.hpp).
// Each plugin's test binary links these with that plugin's objects, which
// define the entry point.
#pragma once

#include <conveyor/storage_plugin.h>
#include <conveyor/testing/plugin_calls.hpp>

#include <gtest/gtest.h>
#include <pqxx/pqxx>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// Defined by the plugin the test binary links.
extern "C" CONVEYOR_PLUGIN_EXPORT const conveyor_storage_plugin* conveyor_storage_plugin_entry(
    uint32_t host_abi_major, uint32_t host_abi_minor);

namespace conveyor::postgres::test {

// The shared names, as the tests of both plugins know them.
using plugin_testing::ids_of;
using plugin_testing::JobCopy;
using plugin_testing::leases_of;
using plugin_testing::LimitCopy;
using plugin_testing::Notice;
using plugin_testing::Opts;
using plugin_testing::s;
using plugin_testing::StatsCopy;
using plugin_testing::str;
using plugin_testing::wall_us;

// The DSN of the server under test, if any.
std::optional<std::string> test_dsn();
// Whether a missing server must fail the test instead of skipping it (CI).
bool server_required();

// Skips the test without a server, or fails it when CI=true.
#define CONVEYOR_REQUIRE_PG()                                                               \
  do {                                                                                      \
    if (!::conveyor::postgres::test::test_dsn()) {                                          \
      if (::conveyor::postgres::test::server_required())                                    \
        FAIL() << "CI=true but CONVEYOR_TEST_PG_DSN is not set: PostgreSQL tests must run"; \
      GTEST_SKIP() << "set CONVEYOR_TEST_PG_DSN to run the PostgreSQL tests";               \
    }                                                                                       \
  } while (0)

// The explicit settings of a libpq connection string (URI or key=value).
std::map<std::string, std::string> dsn_fields(const std::string& dsn);
// A key=value connection string from settings.
std::string keyvalue_dsn(const std::map<std::string, std::string>& fields);

// dsn with application_name set (URI or key=value form).
std::string with_application_name(const std::string& dsn, const std::string& name);
// "t_" + 16 random hex digits: a schema (and application name) of its own.
std::string unique_name(const std::string& prefix);

// A TCP proxy on 127.0.0.1 in front of the server: taking it down closes
// every connection through it and refuses new ones, as a server restart or a
// network cut would; bringing it back accepts connections again on the same
// port.
class TcpProxy {
 public:
  TcpProxy(const std::string& target_host, int target_port);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;
  int port() const { return port_; }
  void go_down();
  void come_back();

 private:
  void loop();
  void listen_on_port();
  void request(int command);

  std::string host_;
  int target_port_;
  int port_ = 0;
  int listener_ = -1;
  int wake_[2] = {-1, -1};
  std::mutex mu_;
  std::condition_variable cv_;
  int pending_ = 0;  // command not yet carried out by the loop
  std::thread thread_;
};

// A database of its own on the server under test (dropped, connections and
// all, when destroyed), for tests that change database-level settings
// (ALTER DATABASE ... SET, CONNECTION LIMIT) without touching the database
// other tests use.
class ScratchDatabase {
 public:
  // admin_dsn: a role that may CREATE DATABASE. create_suffix: appended to
  // CREATE DATABASE name (e.g. "CONNECTION LIMIT 5").
  explicit ScratchDatabase(const std::string& admin_dsn, const std::string& create_suffix = "");
  ~ScratchDatabase();
  ScratchDatabase(const ScratchDatabase&) = delete;
  ScratchDatabase& operator=(const ScratchDatabase&) = delete;
  const std::string& name() const { return name_; }
  // admin_dsn with dbname = this database.
  const std::string& dsn() const { return dsn_; }
  // Runs SQL on the admin connection (in the database given at creation).
  pqxx::result sql(const std::string& query);

 private:
  std::string name_;
  std::string dsn_;
  std::unique_ptr<pqxx::connection> admin_;
};

// A fixture with one schema of its own (dropped afterwards) and the plugin's
// C table wrapped by PluginCalls (api_ set, handles closed in TearDown).
class PgTest : public ::testing::Test, public plugin_testing::PluginCalls {
 protected:
  void SetUp() override;
  void TearDown() override;

  Opts base_options() const;  // dsn (with this test's application_name) + schema
  // Opens (and by default migrates) a tracked handle with base_options() + extra.
  conveyor_storage* open_store(const Opts& extra = {}, bool migrate = true);

  // Runs SQL on a connection of the test's own (not the plugin's).
  pqxx::result sql(const std::string& query);
  // EXPLAIN of statement_sql run with args (e.g. "(1, 'x')") on its generic
  // plan, after the session settings given (e.g. "SET LOCAL jit = off").
  std::string generic_plan(const std::string& statement_sql, const std::string& args,
                           const std::vector<std::string>& settings = {});
  // Terminates every server connection the plugin opened for this test.
  int terminate_plugin_connections();

  std::string dsn_;     // the server's DSN, as given
  std::string schema_;  // this test's schema (also its application_name)
  std::unique_ptr<pqxx::connection> admin_;
};

}  // namespace conveyor::postgres::test
