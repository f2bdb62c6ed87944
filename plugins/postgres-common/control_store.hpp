// What the PostgreSQL plugins share above the jobs: the queues table (known
// queues and their paused flag), durable rate-limit overrides and key
// settings, shared records, the change marker, and notifications
// (LISTEN/NOTIFY through NotificationListener).
// Both plugins create the same three tables in their schemas (kControlTables)
// and serve these calls with the same statements (kControlStatements).
#ifndef CONVEYOR_PLUGINS_POSTGRES_COMMON_CONTROL_STORE_HPP
#define CONVEYOR_PLUGINS_POSTGRES_COMMON_CONTROL_STORE_HPP

#include "notification_listener.hpp"
#include "pg_options.hpp"
#include "pg_sql.hpp"

#include <conveyor/storage_plugin.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::postgres {

class ConnectionPool;

// DDL of the control tables ("{s}" is the schema): part of each plugin's
// first migration step.
//   queues(name, paused)   every queue ever enqueued into or paused;
//                          enqueue statements insert into it
//   rate_limits(queue, rate, burst, updated_at)
//   meta(key, value)       'change_marker'
extern const char* const kControlTables;
// ABI 1.2's additions to them, part of each plugin's migration step for 1.2:
//   rate_limits.scope      CONVEYOR_SCOPE_* (0 for rows from before)
//   shared_state(key, version, value)   swap_shared_state's records
extern const char* const kControlTablesV12;
// The next step (no ABI change): swap_shared_state's records move from
// shared_state rows into two sequences per key, changed in place, so swaps
// leave no dead tuples (see control_store.cc):
//   shared_keys(key, version_seq, value_seq), shared_key_ids,
//   functions shared_key_create and swap_shared_state
extern const char* const kSharedStateInPlace;
// ABI 1.3, the step after: function add_shared_state on those sequences.
extern const char* const kSharedAdd;
// ABI 1.5, the step after that (see control_store.cc):
//   key_settings(queue, target, key, rate, burst, scope, weight, updated_at)
//                          set_key_setting's rows, a NULL column a field not
//                          stored
//   functions delete_key_setting and delete_shared_states
extern const char* const kKeySettings;
// ABI 1.5 too, the step after that: procedure add_shared_states (many
// add_shared_state calls in one CALL, in the order of the keys' locks, a
// transaction per page of them; see control_store.cc).
extern const char* const kSharedAdds;

// The statements ControlStore runs; prepare them on every pooled connection.
extern const std::span<const Statement> kControlStatements;

class ControlStore {
 public:
  // pool and options must outlive the store.
  ControlStore(ConnectionPool& pool, const PgOptions& options);
  ~ControlStore();
  ControlStore(const ControlStore&) = delete;
  ControlStore& operator=(const ControlStore&) = delete;

  // The plugin's notification channels (its enqueue sends on jobs).
  const NotifyChannels& channels() const { return channels_; }

  void set_queue_paused(std::string_view queue, bool paused);
  void list_queues(const sdk::QueueSink& sink);
  void set_rate_limit(std::string_view queue, double rate_per_sec, uint32_t burst, int32_t scope,
                      int64_t now_us);
  // ABI 1.2: one statement (one round trip) per call, no dead tuple; key
  // already checked for length by the SDK adapter.
  sdk::SharedRecord swap_shared_state(std::string_view key, int64_t expected_version,
                                      int64_t new_value);
  // ABI 1.3: one statement per call under the key's lock, no dead tuple.
  sdk::SharedAddResult add_shared_state(std::string_view key, const sdk::SharedAdd& add);
  // ABI 1.5 (the adapter has checked every add and that the keys are
  // distinct): one statement for them all; out[i] is adds[i]'s result.
  // Each add commits with its page (kSharedAddsPage adds), not alone.
  void add_shared_states(std::span<const sdk::KeyedAdd> adds, std::span<sdk::SharedAddResult> out);
  void delete_rate_limit(std::string_view queue);
  void list_rate_limits(const sdk::RateLimitSink& sink);
  int64_t change_marker();
  // ABI 1.5 (the SDK adapter has checked the ranges, the target and the
  // key's length): set and delete are one statement each, and advance the
  // change marker and notify as set_rate_limit does.
  void set_key_setting(const sdk::KeySetting& setting, int64_t now_us);
  bool delete_key_setting(std::string_view queue, int32_t target, std::string_view key,
                          uint32_t fields);
  void list_key_settings(const sdk::KeySettingSink& sink);
  // One statement per kSharedDeletePage records read (see control_store.cc).
  uint32_t delete_shared_states(std::string_view prefix, int64_t value_below, uint32_t limit);
  // Opens the LISTEN connection on first use.
  void wait_for_notification(int64_t timeout_us, const sdk::NotifySink& sink);
  // Passed to the listener (NotificationListener::LaterSeen); before the
  // first wait_for_notification.
  void on_later_announced(NotificationListener::LaterSeen seen) { later_seen_ = std::move(seen); }

 private:
  // Queues not paused: woken after the listener (re)connects.
  std::vector<std::string> wakeable_queues();

  ConnectionPool& pool_;
  const PgOptions& options_;
  const NotifyChannels channels_;
  std::mutex listener_mu_;
  NotificationListener::LaterSeen later_seen_;
  std::unique_ptr<NotificationListener> listener_;  // opened by the first wait
};

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_COMMON_CONTROL_STORE_HPP
