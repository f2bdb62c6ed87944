// A pool of connections to one PostgreSQL server, sized by the workload: it
// opens a connection only when every open one is in use, up to pool_size, and
// keeps them for reuse. Every storage call borrows one for its duration.
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
#include <vector>

namespace conveyor::postgres {

class ConnectionPool {
 public:
  // Runs on every new connection before first use (registers statements).
  using Setup = std::function<void(pqxx::connection&)>;

  ConnectionPool(std::string conninfo, std::string target, uint32_t max_size,
                 std::chrono::milliseconds acquire_timeout, Setup setup);
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
    // The connection is broken: close it instead of giving it back.
    void discard() noexcept;

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
  // Connections open now (idle or lent out).
  uint32_t open_count() const;

 private:
  void give_back(std::unique_ptr<PgConnection> c) noexcept;
  void lost(std::unique_ptr<PgConnection> c) noexcept;

  const std::string conninfo_;
  const std::string target_;
  const uint32_t max_size_;
  const std::chrono::milliseconds acquire_timeout_;
  const Setup setup_;
  ReconnectBackoff backoff_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<PgConnection>> idle_;  // mu_
  uint32_t open_ = 0;                                // mu_: idle + lent + being opened
  uint64_t epoch_ = 0;                               // mu_: bumped when one is lost
};

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_CONNECTION_POOL_HPP
