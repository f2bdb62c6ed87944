#include "connection_pool.hpp"

#include <poll.h>
#include <conveyor/storage_plugin.hpp>

#include <algorithm>
#include <utility>

namespace conveyor::postgres {
namespace {

// An idle connection has nothing to read unless the server wrote to it, which
// for the plugin's connections means it is closing them (a terminated
// backend or a server shutting down sends an error, then hangs up). One
// poll() spares the next call a failure on a connection that is already
// dead; at worst a harmless message costs a reconnect.
bool looks_alive(PgConnection& c) noexcept {
  if (!c.conn.is_open()) return false;
  pollfd p{c.conn.sock(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

}  // namespace

ConnectionPool::ConnectionPool(std::string conninfo, std::string target, uint32_t max_size,
                               std::chrono::milliseconds acquire_timeout, SessionSettings session,
                               Setup setup, std::chrono::milliseconds idle_close)
    : conninfo_(std::move(conninfo)),
      target_(std::move(target)),
      max_size_(max_size),
      acquire_timeout_(acquire_timeout),
      session_(session),
      setup_(std::move(setup)),
      idle_close_(idle_close) {
  if (idle_close_.count() > 0) closer_ = std::thread([this] { close_idle_loop(); });
}

ConnectionPool::~ConnectionPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  closer_cv_.notify_all();
  if (closer_.joinable()) closer_.join();
}

void ConnectionPool::close_idle_loop() {
  // Checked a few times per idle_close_: a connection is closed between
  // idle_close_ and 1.25 x idle_close_ after its last use.
  const auto period =
      std::max<std::chrono::milliseconds>(idle_close_ / 4, std::chrono::milliseconds(50));
  std::unique_lock lock(mu_);
  while (!closer_cv_.wait_for(lock, period, [this] { return stopping_; })) {
    const auto cutoff = std::chrono::steady_clock::now() - idle_close_;
    std::vector<std::unique_ptr<PgConnection>> stale;
    // idle_ is used last-in first-out: the longest idle are at the front.
    auto keep = idle_.begin();
    while (keep != idle_.end() && (*keep)->idle_since <= cutoff) ++keep;
    for (auto it = idle_.begin(); it != keep; ++it) stale.push_back(std::move(*it));
    idle_.erase(idle_.begin(), keep);
    open_ -= static_cast<uint32_t>(stale.size());
    if (stale.empty()) continue;
    lock.unlock();
    cv_.notify_all();
    stale.clear();  // closed outside the lock
    lock.lock();
  }
}

ConnectionPool::Lease::Lease(Lease&& other) noexcept
    : pool_(other.pool_), c_(std::move(other.c_)) {}

ConnectionPool::Lease::~Lease() {
  if (c_) pool_->give_back(std::move(c_));
}

void ConnectionPool::Lease::discard(bool server_gone) noexcept {
  if (c_) pool_->lost(std::move(c_), server_gone);
}

ConnectionPool::Lease ConnectionPool::acquire() {
  std::vector<std::unique_ptr<PgConnection>> retired;  // closed outside the lock
  std::unique_lock lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + acquire_timeout_;
  for (;;) {
    while (!idle_.empty()) {
      std::unique_ptr<PgConnection> c = std::move(idle_.back());
      idle_.pop_back();
      if (c->epoch == epoch_ && looks_alive(*c)) return Lease(this, std::move(c));
      --open_;
      retired.push_back(std::move(c));
    }
    if (open_ < max_size_) {
      if (auto wait = backoff_.remaining(); wait.count() > 0)
        throw sdk::Error(CONVEYOR_E_UNAVAILABLE, backoff_.last_error() + " (next attempt in " +
                                                     std::to_string(wait.count()) + " ms)");
      ++open_;
      const uint64_t epoch = epoch_;
      lock.unlock();
      retired.clear();
      try {
        std::unique_ptr<PgConnection> c = open_connection(conninfo_, target_, session_);
        c->epoch = epoch;
        setup_(c->conn);
        backoff_.succeeded();
        return Lease(this, std::move(c));
      } catch (const std::exception& e) {
        backoff_.failed(e.what());
        lock.lock();
        --open_;
        cv_.notify_one();
        throw sdk::Error(CONVEYOR_E_UNAVAILABLE, e.what());
      }
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && idle_.empty() &&
        open_ >= max_size_)
      throw sdk::Error(CONVEYOR_E_UNAVAILABLE, "all " + std::to_string(max_size_) +
                                                   " connections to PostgreSQL at " + target_ +
                                                   " stayed busy for " +
                                                   std::to_string(acquire_timeout_.count()) +
                                                   " ms (raise storage option pool_size)");
  }
}

void ConnectionPool::give_back(std::unique_ptr<PgConnection> c) noexcept {
  std::unique_lock lock(mu_);
  if (c->epoch == epoch_ && c->conn.is_open()) {
    try {
      c->idle_since = std::chrono::steady_clock::now();
      idle_.push_back(std::move(c));
    } catch (...) {
      --open_;
    }
  } else {
    --open_;
  }
  lock.unlock();
  cv_.notify_one();
  c.reset();  // a retired connection is closed outside the lock
}

void ConnectionPool::lost(std::unique_ptr<PgConnection> c, bool server_gone) noexcept {
  {
    std::lock_guard lock(mu_);
    --open_;
    // Connections opened before this one broke are likely dead too.
    if (server_gone && c->epoch == epoch_) ++epoch_;
  }
  cv_.notify_one();
  c.reset();
}

uint32_t ConnectionPool::open_count() const {
  std::lock_guard lock(mu_);
  return open_;
}

}  // namespace conveyor::postgres
