// PostgreSQL for the integration tests: the shared server named by
// CONVEYOR_TEST_PG_DSN (each test in a schema of its own), psql to inspect
// it, and throwaway clusters of a test's own (scripts/pg-cluster.sh) for
// tests that stop and start the server.
#pragma once

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace conveyor::test {

// CONVEYOR_TEST_PG_DSN, if set and not empty.
std::optional<std::string> pg_dsn();
// CI=true: a test that cannot run must fail, never skip.
bool running_in_ci();

// A schema name no other test (or run) uses: prefix + random digits.
std::string fresh_schema_name(const std::string& prefix);
// A TOML basic string (quoted, escaped).
std::string toml_string(const std::string& s);

// Writes DIR/conveyor.toml for a PostgreSQL-kind plugin built in this tree
// ("postgres", "postgres-queue") on dsn and schema, followed by extra.
std::filesystem::path write_postgres_config(const TempDir& dir, const std::string& plugin,
                                            const std::string& dsn, const std::string& schema,
                                            const std::string& extra = "");

// Runs argv (argv[0] looked up in PATH) to completion, capturing its output.
CommandResult run_program(const std::vector<std::string>& argv);

// Runs sql with psql (unaligned, tuples only, stop on error) and returns the
// non-empty output lines. Throws std::runtime_error with psql's message.
std::vector<std::string> psql(const std::string& dsn, const std::string& sql);
int64_t psql_int(const std::string& dsn, const std::string& sql);

// A test's TearDown: drops schema (CASCADE) on dsn unless schema is empty (the
// test never made one); a failure to drop fails the test (non-fatally).
void drop_schema(const std::string& dsn, const std::string& schema);

// For a test (or its SetUp) on the shared PostgreSQL server: skips it when
// CONVEYOR_TEST_PG_DSN is not set, and fails it then when CI=true.
#define CONVEYOR_NEED_PG_DSN()                                                \
  do {                                                                        \
    if (!::conveyor::test::pg_dsn()) {                                        \
      if (::conveyor::test::running_in_ci())                                  \
        FAIL() << "CI=true but CONVEYOR_TEST_PG_DSN is not set";              \
      GTEST_SKIP() << "set CONVEYOR_TEST_PG_DSN to run the PostgreSQL tests"; \
    }                                                                         \
  } while (0)

// For a test (or its SetUp) on a storage plugin built in this tree ("sqlite",
// "postgres", ...): skips it when the plugin's library is not built, and fails
// it then when CI=true.
#define CONVEYOR_NEED_BUILT_PLUGIN(plugin)                                             \
  do {                                                                                 \
    const auto conveyor_plugin_so_ = std::filesystem::path(CONVEYOR_TEST_PLUGIN_DIR) / \
                                     ("libconveyor-" + std::string(plugin) + ".so");   \
    if (!std::filesystem::exists(conveyor_plugin_so_)) {                               \
      if (::conveyor::test::running_in_ci())                                           \
        FAIL() << "CI=true but the plugin is not built: " << conveyor_plugin_so_;      \
      GTEST_SKIP() << "plugin not built: " << conveyor_plugin_so_;                     \
    }                                                                                  \
  } while (0)

// For a test (or its SetUp) that starts a ThrowawayCluster: skips it when the
// PostgreSQL 15 server binaries are missing, and fails it then when CI=true
// (CI must never pass by skipping).
#define CONVEYOR_NEED_PG_SERVER_BINARIES()                                              \
  do {                                                                                  \
    if (!::conveyor::test::ThrowawayCluster::available()) {                             \
      if (::conveyor::test::running_in_ci())                                            \
        FAIL() << "CI=true but PostgreSQL 15 server binaries are missing";              \
      GTEST_SKIP() << "PostgreSQL 15 server binaries (/usr/lib/postgresql/15/bin) not " \
                      "installed";                                                      \
    }                                                                                   \
  } while (0)

// A PostgreSQL 15 cluster of the test's own, in a temporary directory, on the
// first free port of [first_port, last_port]; stopped (immediate) and removed
// when destroyed, whatever happened in between.
class ThrowawayCluster {
 public:
  // Whether the PostgreSQL 15 server binaries are installed.
  static bool available();
  // Throws std::runtime_error when no port of the range works.
  ThrowawayCluster(int first_port, int last_port);
  ~ThrowawayCluster();
  ThrowawayCluster(const ThrowawayCluster&) = delete;
  ThrowawayCluster& operator=(const ThrowawayCluster&) = delete;

  const std::string& dsn() const { return dsn_; }
  int port() const { return port_; }
  // Stops the server (pg_ctl stop -m mode: "fast" or "immediate"), keeping
  // its data, and returns once it is down. Throws on failure.
  void halt(const std::string& mode);
  // Starts the halted server again and returns once it accepts connections.
  void resume();
  std::string server_log() const;

 private:
  void run_script(const std::vector<std::string>& args);

  TempDir dir_;
  std::filesystem::path dir_path_;  // the cluster: dir_/PORT
  std::string dsn_;
  int port_ = 0;
  bool started_ = false;
};

}  // namespace conveyor::test
