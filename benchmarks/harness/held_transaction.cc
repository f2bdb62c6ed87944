#include "held_transaction.hpp"

#include "postgres_probe.hpp"

#include <fmt/format.h>
#include <pqxx/pqxx>

#include <optional>

namespace conveyor::bench {

struct HeldTransaction::Impl {
  explicit Impl(const std::string& dsn) : conn(dsn) {}
  pqxx::connection conn;
  std::optional<pqxx::work> tx;
};

HeldTransaction::HeldTransaction(const std::string& dsn) {
  try {
    impl_ = std::make_unique<Impl>(dsn);
    pid_ = impl_->conn.backendpid();
    impl_->tx.emplace(impl_->conn);
    xid_ = impl_->tx->exec1("SELECT txid_current()")[0].as<int64_t>();
  } catch (const std::exception& e) {
    throw std::runtime_error(
        fmt::format("cannot hold a transaction open on {}: {}", describe_dsn(dsn), e.what()));
  }
}

HeldTransaction::~HeldTransaction() {
  try {
    if (impl_ && impl_->tx) impl_->tx->abort();
  } catch (const std::exception&) {
    // The connection closes below either way, which ends the transaction.
  }
}

}  // namespace conveyor::bench
