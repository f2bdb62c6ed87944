// A pool of connections to one PostgreSQL server, sized by the workload: it
// opens a connection only when every open one is in use, up to pool_size, and
// keeps them for reuse. Every storage call borrows one for its duration.
//
// Every new connection gets the plugin's session settings (pg_connect.hpp)
// before the plugin's own setup. Connections idle for idle_close are closed
// (a process that drained gives its server slots back).
//
// After a connection is found broken, every connection opened before it is
// retired as well (after a server restart they are all dead), and new ones
// are opened with backoff (pg_connect.hpp), so callers fail fast with the
// reason while the server is away and carry on once it is back.
#ifndef CONVEYOR_PLUGINS_POSTGRES_CONNECTION_POOL_HPP
#define CONVEYOR_PLUGINS_POSTGRES_CONNECTION_POOL_HPP

#include "pg_connect.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace conveyor::postgres {

class ConnectionPool {
 public:
  // Runs on every new connection before first use (registers statements).
  using Setup = std::function<void(pqxx::connection&)>;

  // idle_close zero: idle connections are kept.
  ConnectionPool(std::string conninfo, std::string target, uint32_t max_size,
                 std::chrono::milliseconds acquire_timeout, SessionSettings session, Setup setup,
                 std::chrono::milliseconds idle_close = std::chrono::milliseconds(0));
  ~ConnectionPool();
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // A borrowed connection, given back when destroyed.
  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    pqxx::connection& conn() { return c_->conn; }
    // The connection is broken, or in a state not worth trusting (its
    // statement was cancelled): close it instead of giving it back.
    // server_gone: the server closed it (restart, terminate, network), so
    // every connection opened before it is retired too.
    void discard(bool server_gone = true) noexcept;

   private:
    friend class ConnectionPool;
    Lease(ConnectionPool* pool, std::unique_ptr<PgConnection> c) : pool_(pool), c_(std::move(c)) {}
    ConnectionPool* pool_;
    std::unique_ptr<PgConnection> c_;
  };

  // Borrows an idle connection or opens one. Throws
  // sdk::Error(CONVEYOR_E_UNAVAILABLE) when the server cannot be reached (or
  // is in backoff after a failure), or when every connection stayed busy for
  // the acquire timeout.
  Lease acquire();

  const std::string& target() const { return target_; }
  const SessionSettings& session() const { return session_; }
  // Connections open now (idle or lent out).
  uint32_t open_count() const;

 private:
  void give_back(std::unique_ptr<PgConnection> c) noexcept;
  void lost(std::unique_ptr<PgConnection> c, bool server_gone) noexcept;
  void close_idle_loop();

  const std::string conninfo_;
  const std::string target_;
  const uint32_t max_size_;
  const std::chrono::milliseconds acquire_timeout_;
  const SessionSettings session_;
  const Setup setup_;
  const std::chrono::milliseconds idle_close_;
  ReconnectBackoff backoff_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<PgConnection>> idle_;  // mu_
  uint32_t open_ = 0;                                // mu_: idle + lent + being opened
  uint64_t epoch_ = 0;                               // mu_: bumped when one is lost
  bool stopping_ = false;                            // mu_
  std::condition_variable closer_cv_;
  std::thread closer_;  // closes connections idle for idle_close_ (when set)
};

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_CONNECTION_POOL_HPP
