// What a PostgreSQL storage plugin class is made of beside its job calls:
// the options, the connection pool (every new connection set up by the
// plugin), the run/retry wrapper, and the calls both PostgreSQL plugins serve
// alike through ControlStore: pause/resume, list_queues, rate-limit
// overrides, key settings, shared records, the change marker and
// notifications. A plugin class derives from it and adds its job calls (the
// SDK's adapter calls the inherited ones).
#ifndef CONVEYOR_PLUGINS_POSTGRES_COMMON_PG_STORAGE_BASE_HPP
#define CONVEYOR_PLUGINS_POSTGRES_COMMON_PG_STORAGE_BASE_HPP

#include "connection_pool.hpp"
#include "control_store.hpp"
#include "pg_options.hpp"
#include "pg_run.hpp"

#include <conveyor/storage_plugin.hpp>

#include <pqxx/nontransaction>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

// What every PostgreSQL plugin advertises (CONVEYOR_CAP_NOTIFY included: the
// base class serves wait_for_notification).
#define CONVEYOR_PG_CAPABILITIES                                                 \
  (CONVEYOR_CAP_DURABLE | CONVEYOR_CAP_MULTI_PROCESS | CONVEYOR_CAP_MULTI_HOST | \
   CONVEYOR_CAP_NOTIFY | CONVEYOR_CAP_NOTIFY_DUE)

// The job calls of the SDK's plugin class (storage_plugin.hpp) that a
// PostgreSQL plugin class implements itself; declared once for both.
#define CONVEYOR_PG_JOB_CALLS                                                                    \
  void migrate();                                                                                \
  void enqueue(std::span<const conveyor_new_job> jobs, std::span<int64_t> out_ids);              \
  uint32_t claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token, int64_t now_us, \
                 int64_t lease_expires_us, const sdk::JobSink& sink);                            \
  void complete(std::span<const conveyor_lease> leases, int64_t now_us,                          \
                std::span<conveyor_status> results);                                             \
  void fail(conveyor_lease lease, std::string_view error_text, int64_t retry_at_us,              \
            int64_t now_us);                                                                     \
  void extend_leases(std::span<const conveyor_lease> leases, int64_t lease_expires_us,           \
                     std::span<conveyor_status> results);                                        \
  void release(std::span<const conveyor_lease> leases, int64_t now_us,                           \
               std::span<conveyor_status> results);                                              \
  uint32_t rescue_expired(int64_t now_us, uint32_t max_jobs);                                    \
  void cancel(int64_t job_id, int64_t now_us);                                                   \
  void queue_stats(int64_t now_us, const sdk::QueueStatsSink& sink);                             \
  void get_job(int64_t job_id, int64_t now_us, const sdk::JobSink& sink);                        \
  uint64_t purge_finished(int64_t finalized_before_us, uint32_t max_jobs)

namespace conveyor::postgres {

class PgStorageBase {
 public:
  PgStorageBase(const PgStorageBase&) = delete;
  PgStorageBase& operator=(const PgStorageBase&) = delete;

  void set_queue_paused(std::string_view queue, bool paused, int64_t now_us);
  void list_queues(const sdk::QueueSink& sink);
  void set_rate_limit(std::string_view queue, double rate_per_sec, uint32_t burst, int64_t now_us);
  void delete_rate_limit(std::string_view queue);
  void list_rate_limits(const sdk::RateLimitSink& sink);
  int64_t change_marker();
  void wait_for_notification(int64_t timeout_us, const sdk::NotifySink& sink);
  // ABI 1.2
  void set_rate_limit_scoped(std::string_view queue, double rate_per_sec, uint32_t burst,
                             int32_t scope, int64_t now_us);
  sdk::SharedRecord swap_shared_state(std::string_view key, int64_t expected_version,
                                      int64_t new_value);
  // ABI 1.3
  sdk::SharedAddResult add_shared_state(std::string_view key, const sdk::SharedAdd& add);
  // ABI 1.5 (the table and functions of kKeySettings)
  void set_key_setting(const sdk::KeySetting& setting, int64_t now_us);
  bool delete_key_setting(std::string_view queue, int32_t target, std::string_view key,
                          uint32_t fields);
  void list_key_settings(const sdk::KeySettingSink& sink);
  uint32_t delete_shared_states(std::string_view prefix, int64_t value_below, uint32_t limit);
  // ABI 1.5 (the procedure of kSharedAdds)
  void add_shared_states(std::span<const sdk::KeyedAdd> adds, std::span<sdk::SharedAddResult> out);

 protected:
  // setup runs on every new pooled connection (session settings, statements).
  PgStorageBase(PgOptions options, ConnectionPool::Setup setup);
  ~PgStorageBase();

  // Opens one connection now: a server that cannot be reached fails open,
  // with the reason.
  void connect_now();
  // Throws sdk::Error(CONVEYOR_E_UNSUPPORTED) naming the pooler mode when
  // the connection goes through a pooler in transaction mode (see .cc).
  void refuse_transaction_pooling(pqxx::connection& first);

  template <typename Fn>
  void run(const char* op, Retry retry, Fn&& fn) {
    run_on_pool(*pool_, op, retry, std::forward<Fn>(fn));
  }

  // Runs statement(args...) and returns how many rows it changed.
  template <typename... Args>
  uint64_t rows_changed(const char* op, Retry retry, const char* statement, const Args&... args) {
    uint64_t n = 0;
    run(op, retry, [&](pqxx::connection& c) {
      pqxx::nontransaction tx(c);
      n = tx.exec_prepared(statement, args...).affected_rows();
    });
    return n;
  }

  const PgOptions& pg_options() const { return options_; }
  const std::string& claimer() const { return claimer_; }
  ConnectionPool& pool() { return *pool_; }
  const NotifyChannels& channels() const { return control_->channels(); }
  // Hears of every delayed job another process (or this one) announced, as
  // the listener receives it. Set in the constructor, before any wait.
  void on_later_announced(NotificationListener::LaterSeen seen) {
    control_->on_later_announced(std::move(seen));
  }

 private:
  const PgOptions options_;
  const std::string claimer_;  // "host:pid", stored with each claim
  std::unique_ptr<ConnectionPool> pool_;
  std::unique_ptr<ControlStore> control_;  // queues, overrides, notifications
};

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_COMMON_PG_STORAGE_BASE_HPP
