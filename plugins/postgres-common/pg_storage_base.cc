#include "pg_storage_base.hpp"

#include "connection_budget.hpp"
#include "pg_log.hpp"
#include "pg_rows.hpp"

#include <chrono>

namespace conveyor::postgres {
namespace {

// idle_in_transaction_session_timeout on the plugin's connections: none of
// its transactions waits on the client, so one idle this long is stuck (a
// hung process) and must not hold its locks any longer.
constexpr uint32_t kIdleInTransactionMs = 60'000;

}  // namespace

PgStorageBase::PgStorageBase(PgOptions options, ConnectionPool::Setup setup)
    : options_(std::move(options)), claimer_(claimer_identity()) {
  SessionSettings session;
  session.statement_timeout_ms = options_.statement_timeout_ms;
  session.idle_in_transaction_ms = kIdleInTransactionMs;
  pool_ = std::make_unique<ConnectionPool>(options_.conninfo, options_.target, options_.pool_size,
                                           std::chrono::seconds(options_.connect_timeout_s),
                                           session, std::move(setup),
                                           std::chrono::seconds(options_.idle_close_s));
  control_ = std::make_unique<ControlStore>(*pool_, options_);
}

PgStorageBase::~PgStorageBase() {
  control_.reset();  // closes the LISTEN connection
  pool_.reset();
}

namespace {

int backend_pid(pqxx::connection& c) {
  pqxx::nontransaction tx(c);
  return tx.exec1("SELECT pg_backend_pid()")[0].as<int>();
}

}  // namespace

// A pooler in transaction (or statement) mode hands a server session to
// another client between transactions; the plugins need a session of their
// own (named prepared statements, LISTEN). On a direct connection or in
// session mode, two live client connections never share a backend, and a
// connection's backend never changes; in transaction mode (PgBouncer reuses
// the server connection released last) they do.
void PgStorageBase::refuse_transaction_pooling(pqxx::connection& first) {
  const int before = backend_pid(first);
  const std::unique_ptr<PgConnection> second =
      open_connection(options_.conninfo, options_.target, pool_->session());
  const int other = backend_pid(second->conn);
  const int after = backend_pid(first);
  if (before != other && before == after) return;
  throw sdk::Error(
      CONVEYOR_E_UNSUPPORTED,
      "PostgreSQL at " + options_.target +
          " is reached through a pooler in transaction mode (PgBouncer pool_mode = "
          "transaction, or a hosted pooler's transaction port): two client connections shared "
          "server session " +
          std::to_string(before == other ? before : after) +
          ". The plugin needs a session of its own (named prepared statements, LISTEN): use "
          "the pooler's session mode (PgBouncer pool_mode = session) or connect to PostgreSQL "
          "directly");
}

void PgStorageBase::connect_now() {
  ConnectionPool::Lease lease = pool_->acquire();
  refuse_transaction_pooling(lease.conn());
  // Advice only: a server that hides its numbers does not fail the open.
  try {
    if (auto warning = connection_budget_warning(read_connection_budget(lease.conn()),
                                                 options_.pool_size, options_.target))
      log_warning(*warning);
  } catch (...) {
    if (!lease.conn().is_open()) lease.discard();
  }
}

void PgStorageBase::set_queue_paused(std::string_view queue, bool paused, int64_t /*now_us*/) {
  control_->set_queue_paused(queue, paused);
}

void PgStorageBase::list_queues(const sdk::QueueSink& sink) { control_->list_queues(sink); }

void PgStorageBase::set_rate_limit(std::string_view queue, double rate_per_sec, uint32_t burst,
                                   int64_t now_us) {
  control_->set_rate_limit(queue, rate_per_sec, burst, CONVEYOR_SCOPE_PROCESS, now_us);
}

void PgStorageBase::set_rate_limit_scoped(std::string_view queue, double rate_per_sec,
                                          uint32_t burst, int32_t scope, int64_t now_us) {
  control_->set_rate_limit(queue, rate_per_sec, burst, scope, now_us);
}

sdk::SharedRecord PgStorageBase::swap_shared_state(std::string_view key, int64_t expected_version,
                                                   int64_t new_value) {
  return control_->swap_shared_state(key, expected_version, new_value);
}

sdk::SharedAddResult PgStorageBase::add_shared_state(std::string_view key,
                                                     const sdk::SharedAdd& add) {
  return control_->add_shared_state(key, add);
}

void PgStorageBase::set_key_setting(const sdk::KeySetting& setting, int64_t now_us) {
  control_->set_key_setting(setting, now_us);
}

bool PgStorageBase::delete_key_setting(std::string_view queue, int32_t target, std::string_view key,
                                       uint32_t fields) {
  return control_->delete_key_setting(queue, target, key, fields);
}

void PgStorageBase::list_key_settings(const sdk::KeySettingSink& sink) {
  control_->list_key_settings(sink);
}

uint32_t PgStorageBase::delete_shared_states(std::string_view prefix, int64_t value_below,
                                             uint32_t limit) {
  return control_->delete_shared_states(prefix, value_below, limit);
}

void PgStorageBase::add_shared_states(std::span<const sdk::KeyedAdd> adds,
                                      std::span<sdk::SharedAddResult> out) {
  control_->add_shared_states(adds, out);
}

void PgStorageBase::delete_rate_limit(std::string_view queue) {
  control_->delete_rate_limit(queue);
}

void PgStorageBase::list_rate_limits(const sdk::RateLimitSink& sink) {
  control_->list_rate_limits(sink);
}

int64_t PgStorageBase::change_marker() { return control_->change_marker(); }

void PgStorageBase::wait_for_notification(int64_t timeout_us, const sdk::NotifySink& sink) {
  control_->wait_for_notification(timeout_us, sink);
}

}  // namespace conveyor::postgres
