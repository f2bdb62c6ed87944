#include "pg_connect.hpp"

#include "pg_errors.hpp"

#include <conveyor/storage_plugin.hpp>

#include <pqxx/nontransaction>

#include <algorithm>
#include <random>

namespace conveyor::postgres {
namespace {

constexpr double kMaxBackoffMs = 500.0;

}  // namespace

PgConnection::PgConnection(const std::string& conninfo) : conn(conninfo), quiet(conn) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  conn.inhibit_reactivation(true);
#pragma GCC diagnostic pop
}

std::string session_settings_sql(const SessionSettings& settings, int server_version_num) {
  std::string sql = "SET statement_timeout = " + std::to_string(settings.statement_timeout_ms) +
                    "; SET idle_in_transaction_session_timeout = " +
                    std::to_string(settings.idle_in_transaction_ms);
  if (server_version_num >= 140000) sql += "; SET idle_session_timeout = 0";
  return sql;
}

std::unique_ptr<PgConnection> open_connection(const std::string& conninfo,
                                              const std::string& target,
                                              const SessionSettings& settings) {
  try {
    auto c = std::make_unique<PgConnection>(conninfo);
    if (!c->conn.is_open()) throw pqxx::broken_connection("connection not open after connect");
    pqxx::nontransaction tx(c->conn);
    tx.exec(session_settings_sql(settings, c->conn.server_version()));
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
  const auto now = std::chrono::steady_clock::now();
  last_error_ = reason;
  // An attempt that started before an earlier failure pushed the next one
  // out: the same outage, already counted.
  if (now < not_before_) return;
  failures_ = std::min(failures_ + 1, 16);
  const double base = std::min(kMaxBackoffMs, 100.0 * static_cast<double>(1 << (failures_ - 1)));
  const double jittered = base * std::uniform_real_distribution<double>(0.8, 1.2)(rng);
  not_before_ = now + std::chrono::milliseconds(static_cast<int64_t>(jittered));
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
