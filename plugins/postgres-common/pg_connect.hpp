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
  uint64_t epoch = 0;  // the pool's epoch when opened
};

// Opens a connection; throws sdk::Error(CONVEYOR_E_UNAVAILABLE) naming
// target and libpq's reason (within the connect timeout of conninfo).
std::unique_ptr<PgConnection> open_connection(const std::string& conninfo,
                                              const std::string& target);

// Exponential backoff between connection attempts: 100 ms doubling to 5 s,
// with +-20% jitter; reset by a success. Thread-safe.
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
