#include "pg_connect.hpp"

#include "pg_errors.hpp"

#include <conveyor/storage_plugin.hpp>

#include <algorithm>
#include <random>

namespace conveyor::postgres {

PgConnection::PgConnection(const std::string& conninfo) : conn(conninfo), quiet(conn) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  conn.inhibit_reactivation(true);
#pragma GCC diagnostic pop
}

std::unique_ptr<PgConnection> open_connection(const std::string& conninfo,
                                              const std::string& target) {
  try {
    auto c = std::make_unique<PgConnection>(conninfo);
    if (!c->conn.is_open()) throw pqxx::broken_connection("connection not open after connect");
    return c;
  } catch (const sdk::Error&) {
    throw;
  } catch (...) {
    Failure f = classify_current_exception(false);
    throw sdk::Error(CONVEYOR_E_UNAVAILABLE,
                     "cannot connect to PostgreSQL at " + target + ": " + f.message);
  }
}

std::chrono::milliseconds ReconnectBackoff::remaining() const {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now >= not_before_) return std::chrono::milliseconds(0);
  return std::chrono::ceil<std::chrono::milliseconds>(not_before_ - now);
}

void ReconnectBackoff::failed(const std::string& reason) {
  thread_local std::mt19937 rng{std::random_device{}()};
  std::lock_guard lock(mu_);
  failures_ = std::min(failures_ + 1, 16);
  const double base = std::min(5000.0, 100.0 * static_cast<double>(1 << (failures_ - 1)));
  const double jittered = base * std::uniform_real_distribution<double>(0.8, 1.2)(rng);
  not_before_ =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(jittered));
  last_error_ = reason;
}

void ReconnectBackoff::succeeded() {
  std::lock_guard lock(mu_);
  failures_ = 0;
  not_before_ = {};
}

std::string ReconnectBackoff::last_error() const {
  std::lock_guard lock(mu_);
  return last_error_;
}

}  // namespace conveyor::postgres
