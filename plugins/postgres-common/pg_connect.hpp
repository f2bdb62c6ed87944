// Opening one connection to PostgreSQL, and the backoff between attempts
// after a failure (so a server that is down is not hammered and callers fail
// fast with the reason instead of each waiting for a connect timeout).
#ifndef CONVEYOR_PLUGINS_POSTGRES_PG_CONNECT_HPP
#define CONVEYOR_PLUGINS_POSTGRES_PG_CONNECT_HPP

#include <pqxx/connection>
#include <pqxx/errorhandler>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace conveyor::postgres {

// One server connection. libpqxx's silent reconnect ("reactivation") is off:
// a broken connection is dropped by its owner, which reconnects explicitly.
// Server notices (e.g. "schema already exists, skipping") are not printed.
struct PgConnection {
  explicit PgConnection(const std::string& conninfo);
  pqxx::connection conn;
  pqxx::quiet_errorhandler quiet;
  uint64_t epoch = 0;                                  // the pool's epoch when opened
  std::chrono::steady_clock::time_point idle_since{};  // when last given back to the pool
};

// The session settings the plugin sets on each of its connections when it
// opens it, so that what the database or role sets (ALTER DATABASE ... SET
// statement_timeout, idle_session_timeout) cannot break its calls:
//   statement_timeout                    statement_timeout_ms (0: no limit)
//   idle_in_transaction_session_timeout  idle_in_transaction_ms: a transaction
//                                        of the plugin's that hangs cannot hold
//                                        its locks for ever
//   idle_session_timeout = 0             (PostgreSQL 14+): an idle pooled
//                                        connection or the LISTEN connection is
//                                        never closed by the server
struct SessionSettings {
  uint32_t statement_timeout_ms = 60000;
  uint32_t idle_in_transaction_ms = 60000;
};

// Opens a connection and applies settings; throws
// sdk::Error(CONVEYOR_E_UNAVAILABLE) naming target and libpq's reason
// (within the connect timeout of conninfo).
std::unique_ptr<PgConnection> open_connection(const std::string& conninfo,
                                              const std::string& target,
                                              const SessionSettings& settings);

// The SET statements open_connection runs for settings on a server of
// server_version_num.
std::string session_settings_sql(const SessionSettings& settings, int server_version_num);

// Exponential backoff between connection attempts: 100 ms doubling to
// 500 ms, with +-20% jitter; reset by a success. A refused connection costs
// the server next to nothing, so a server that is back is found within about
// half a second. Failures of attempts that were already under way when an
// earlier one failed count once. Thread-safe.
class ReconnectBackoff {
 public:
  // How long until the next attempt is allowed (zero: now).
  std::chrono::milliseconds remaining() const;
  void failed(const std::string& reason);
  void succeeded();
  std::string last_error() const;

 private:
  mutable std::mutex mu_;
  int failures_ = 0;
  std::chrono::steady_clock::time_point not_before_{};
  std::string last_error_;
};

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_PG_CONNECT_HPP
