// Helpers for the tests of Conveyor's PostgreSQL plugins: the server under
// test (env CONVEYOR_TEST_PG_DSN), a fresh schema per test, and the plugin
// driven through its C ABI table (conveyor_storage_plugin_entry, no loader).
// Each plugin's test binary links these with that plugin's objects, which
// define the entry point.
#pragma once

#include <conveyor/storage_plugin.h>

#include <gtest/gtest.h>
#include <pqxx/pqxx>

#include <condition_variable>
#include <cstdint>
#include <cstring>
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

using Opts = std::vector<std::pair<std::string, std::string>>;

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

std::string s(conveyor_str v);
inline conveyor_str str(const char* v) { return conveyor_str{v, std::strlen(v)}; }
inline conveyor_str str(const std::string& v) { return conveyor_str{v.data(), v.size()}; }
conveyor_str str(std::string&&) = delete;

int64_t wall_us();

struct JobCopy {
  int64_t id = 0;
  int32_t state = 0;
  std::string queue, kind, payload, last_error;
  int32_t priority = 0, attempt = 0, max_attempts = 0;
  int64_t run_at = 0, created_at = 0, finalized_at = 0, lease_token = 0, lease_expires = 0;
};

struct StatsCopy {
  std::string queue;
  int32_t paused = 0;
  int64_t pending = 0, scheduled = 0, running = 0, completed = 0, failed = 0, cancelled = 0;
};

struct LimitCopy {
  std::string queue;
  double rate = 0;
  uint32_t burst = 0;
  int64_t updated_at = 0;
};

struct Notice {
  int32_t kind;
  std::string queue;
};

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

// A fixture with one schema of its own (dropped afterwards) and ABI helpers.
class PgTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  Opts base_options() const;  // dsn (with this test's application_name) + schema
  conveyor_status try_open(const Opts& opts, conveyor_storage** out, std::string* message);
  // Opens (and by default migrates) a handle with base_options() + extra.
  conveyor_storage* open_store(const Opts& extra = {}, bool migrate = true);
  void close_store(conveyor_storage* h);

  int64_t enqueue(conveyor_storage* h, const std::string& queue, int32_t priority = 0,
                  int64_t run_at = 0, int32_t max_attempts = 3, const std::string& payload = "{}",
                  const std::string& kind = "noop");
  std::vector<int64_t> enqueue_many(conveyor_storage* h, const std::string& queue, size_t n,
                                    int64_t run_at = 0);
  std::vector<JobCopy> claim(conveyor_storage* h, const std::string& queue, uint32_t max,
                             int64_t token, int64_t now, int64_t expires,
                             conveyor_status expect = CONVEYOR_OK);
  std::vector<conveyor_status> complete(conveyor_storage* h, const std::vector<conveyor_lease>& l,
                                        int64_t now);
  std::vector<conveyor_status> release(conveyor_storage* h, const std::vector<conveyor_lease>& l,
                                       int64_t now);
  std::vector<conveyor_status> extend(conveyor_storage* h, const std::vector<conveyor_lease>& l,
                                      int64_t expires);
  conveyor_status fail(conveyor_storage* h, conveyor_lease l, const std::string& text,
                       int64_t retry_at, int64_t now, std::string* msg = nullptr);
  conveyor_status get(conveyor_storage* h, int64_t id, int64_t now, JobCopy* out);
  JobCopy job(conveyor_storage* h, int64_t id, int64_t now);
  std::vector<StatsCopy> stats(conveyor_storage* h, int64_t now);
  std::vector<LimitCopy> limits(conveyor_storage* h);
  std::vector<std::pair<std::string, int32_t>> queues(conveyor_storage* h);
  int64_t marker(conveyor_storage* h);
  void pause(conveyor_storage* h, const std::string& q, bool paused);
  // One wait_for_notification call; appends what arrived to out.
  conveyor_status wait_notify(conveyor_storage* h, int64_t timeout_us, std::vector<Notice>* out,
                              std::string* message = nullptr);

  // Runs SQL on a connection of the test's own (not the plugin's).
  pqxx::result sql(const std::string& query);
  // EXPLAIN of statement_sql run with args (e.g. "(1, 'x')") on its generic
  // plan, after the session settings given (e.g. "SET LOCAL jit = off").
  std::string generic_plan(const std::string& statement_sql, const std::string& args,
                           const std::vector<std::string>& settings = {});
  // Terminates every server connection the plugin opened for this test.
  int terminate_plugin_connections();

  const conveyor_storage_plugin* api_ = nullptr;
  std::string dsn_;     // the server's DSN, as given
  std::string schema_;  // this test's schema (also its application_name)
  std::vector<conveyor_storage*> handles_;
  std::unique_ptr<pqxx::connection> admin_;
};

std::vector<int64_t> ids_of(const std::vector<JobCopy>& jobs);
std::vector<conveyor_lease> leases_of(const std::vector<JobCopy>& jobs);

}  // namespace conveyor::postgres::test
