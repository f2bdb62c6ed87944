// The "sqlite" storage plugin: a canonical (one mutable row per job) backend
// on one SQLite file in WAL mode, safe for several threads and several
// processes (a CLI next to a running server).
//
// Design:
//   * Connections and transactions: see database.hpp. Callbacks run only
//     after the transaction committed and the connection was released, from
//     buffered copies of the rows.
//   * Schema (schema.hpp): list_jobs reads one jobs_list range per final
//     state and kind; claim_kinds reads jobs_claim skipping other kinds (no
//     kind index, which every enqueue and claim would pay for); claim_keys
//     reads one jobs_key range per listed key, and list_ready_keys walks
//     jobs_key one seek per key (keys without available jobs have no entry
//     there, so they are never read); job_counts reads job_counts, per
//     (queue, final state) counts kept by the statements that finalize or
//     unfinalize and a delete trigger, so counting never scans retained
//     jobs; live states are counted from jobs_claim and jobs_lease.
//   * Rows stored by queue: a row's place (pos, the rowid) comes from its
//     queue's block of places, so a claim or completion of a batch rewrites a
//     few table pages even when many queues' jobs arrive interleaved; the job
//     id is a separate, increasing column (meta 'last_job_id') found through
//     the unique index jobs_id.
//   * Shared state: a read on a reader, a swap, an add, a batch of adds
//     (add_shared_states: all of them) or a deletion of records below a
//     value in one BEGIN IMMEDIATE transaction (the file's write lock makes
//     it atomic across processes).
//   * Key settings (key_settings, ABI 1.5): one row per (queue, target,
//     key) with the mask of fields stored; a set or a delete that changed
//     something moves the change marker, as a rate-limit override does.
//   * Notifications (CONVEYOR_CAP_NOTIFY) with no server to send them:
//     wait_for_notification sleeps until the -wal file is written
//     (wal_watch.hpp), then looks for changes (change_detector.hpp). Looks
//     are at least kLookGap apart (a busy writer costs at most 1 / kLookGap
//     looks a second, an idle file none) and at most kFullLookEvery apart (in
//     case a write was missed); without inotify, it looks every kLookGap.
#ifndef CONVEYOR_PLUGINS_SQLITE_SQLITE_STORAGE_HPP
#define CONVEYOR_PLUGINS_SQLITE_SQLITE_STORAGE_HPP

#include <conveyor/storage_plugin.h>
#include <conveyor/storage_plugin.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>

#include "change_detector.hpp"
#include "claimed_places.hpp"
#include "config.hpp"
#include "database.hpp"
#include "schema.hpp"
#include "wal_watch.hpp"

extern "C" CONVEYOR_PLUGIN_EXPORT const conveyor_storage_plugin* conveyor_storage_plugin_entry(
    uint32_t host_abi_major, uint32_t host_abi_minor);

namespace conveyor::sqlite {

class SqliteStorage {
 public:
  static std::unique_ptr<SqliteStorage> open(const sdk::Options& options);
  ~SqliteStorage();
  SqliteStorage(const SqliteStorage&) = delete;
  SqliteStorage& operator=(const SqliteStorage&) = delete;

  void migrate();
  void enqueue(std::span<const conveyor_new_job> jobs, std::span<int64_t> out_ids);
  uint32_t claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                 int64_t lease_expires_us, const sdk::JobSink& sink);
  void complete(std::span<const conveyor_lease> leases, int64_t now_us,
                std::span<conveyor_status> results);
  void fail(conveyor_lease lease, std::string_view error_text, int64_t retry_at_us, int64_t now_us);
  void extend_leases(std::span<const conveyor_lease> leases, int64_t lease_expires_us,
                     std::span<conveyor_status> results);
  void release(std::span<const conveyor_lease> leases, int64_t now_us,
               std::span<conveyor_status> results);
  uint32_t rescue_expired(int64_t now_us, uint32_t max_jobs);
  void cancel(int64_t job_id, int64_t now_us);
  void set_queue_paused(std::string_view queue, bool paused, int64_t now_us);
  void queue_stats(int64_t now_us, const sdk::QueueStatsSink& sink);
  void list_queues(const sdk::QueueSink& sink);
  void get_job(int64_t job_id, int64_t now_us, const sdk::JobSink& sink);
  uint64_t purge_finished(int64_t finalized_before_us, uint32_t max_jobs);
  void set_rate_limit(std::string_view queue, double rate_per_sec, uint32_t burst, int64_t now_us);
  void delete_rate_limit(std::string_view queue);
  void list_rate_limits(const sdk::RateLimitSink& sink);
  int64_t change_marker();
  // ABI 1.1
  void enqueue_at(std::span<const conveyor_new_job> jobs, int64_t now_us,
                  std::span<int64_t> out_ids);
  uint32_t claim_kinds(std::string_view queue, std::span<const std::string_view> kinds,
                       uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                       int64_t lease_expires_us, const sdk::JobSink& sink);
  uint32_t list_jobs(std::string_view queue, std::span<const int32_t> states, std::string_view kind,
                     int64_t after_id, uint32_t limit, int64_t now_us, const sdk::JobSink& sink);
  void retry_jobs(std::span<const int64_t> ids, int64_t now_us, std::span<conveyor_status> results);
  void delete_jobs(std::span<const int64_t> ids, std::span<conveyor_status> results);
  void job_counts(int64_t now_us, const sdk::QueueStatsSink& sink);
  uint32_t rescue_expired_v2(int64_t now_us, uint32_t max_jobs, const sdk::JobSink& sink);
  // ABI 1.2 (schema 3)
  sdk::SharedRecord swap_shared_state(std::string_view key, int64_t expected_version,
                                      int64_t new_value);
  // ABI 1.3 (no schema change: shared_state's rows)
  sdk::SharedAddResult add_shared_state(std::string_view key, const sdk::SharedAdd& add);
  void set_rate_limit_scoped(std::string_view queue, double rate_per_sec, uint32_t burst,
                             int32_t scope, int64_t now_us);
  void enqueue_costed(std::span<const conveyor_new_job_v2> jobs, int64_t now_us,
                      std::span<int64_t> out_ids);
  // ABI 1.4 (schema 5: jobs.key and the index jobs_key)
  void enqueue_keyed(std::span<const conveyor_new_job_v3> jobs, int64_t now_us,
                     std::span<int64_t> out_ids);
  uint32_t claim_keys(std::string_view queue, std::span<const std::string_view> kinds,
                      std::span<const sdk::KeyClaim> keys, int64_t lease_token, int64_t now_us,
                      int64_t lease_expires_us, const sdk::JobSink& sink);
  uint32_t list_ready_keys(std::string_view queue, std::optional<std::string_view> after_key,
                           uint32_t limit, uint32_t count_limit, int64_t now_us,
                           const sdk::ReadyKeySink& sink);
  // ABI 1.5 (schema 6: the table key_settings; delete_shared_states deletes
  // shared_state rows)
  void set_key_setting(const sdk::KeySetting& setting, int64_t now_us);
  bool delete_key_setting(std::string_view queue, int32_t target, std::string_view key,
                          uint32_t fields);
  void list_key_settings(const sdk::KeySettingSink& sink);
  uint32_t delete_shared_states(std::string_view prefix, int64_t value_below, uint32_t limit);
  // add_shared_state on each of adds (keys distinct), out[i] for adds[i]; one
  // write transaction for the whole batch (no schema change).
  void add_shared_states(std::span<const sdk::KeyedAdd> adds, std::span<sdk::SharedAddResult> out);
  // ABI 1.6 (schema 7: jobs.started_at, written by the claim's own update,
  // and jobs.timeout_ms)
  void enqueue_timed(std::span<const conveyor_new_job_v4> jobs, int64_t now_us,
                     std::span<int64_t> out_ids);
  // CONVEYOR_CAP_NOTIFY (see the design notes above); from one thread at a
  // time (the host's), others wait.
  void wait_for_notification(int64_t timeout_us, const sdk::NotifySink& sink);

  // The least and the most time between two looks of wait_for_notification.
  static constexpr std::chrono::milliseconds kLookGap{5};
  static constexpr std::chrono::milliseconds kFullLookEvery{250};

 private:
  explicit SqliteStorage(Config config);

  // rescue_expired, reporting each rescued job to sink when it is not null.
  uint32_t rescue(int64_t now_us, uint32_t max_jobs, const sdk::JobSink* sink);
  // costs, keys and timeouts: one per job, or empty for cost 1, the empty
  // key and timeout 0 each.
  void insert_jobs(std::span<const conveyor_new_job> jobs, std::span<const int32_t> costs,
                   std::span<const std::string_view> keys, int64_t created,
                   std::span<int64_t> out_ids, std::span<const int64_t> timeouts = {});
  // Claims, in one write transaction, the ready jobs of queue that
  // pick(conn, probe) names (places, in the order they are reported), unless
  // the queue is paused. With look_first, a look on a reader comes first
  // (probe true: pick may stop at its first place): with nothing to claim
  // there, no write lock is taken. claim_kinds and claim_keys.
  template <typename Pick>
  uint32_t claim_picked(const char* op, std::string_view queue, int64_t lease_token, int64_t now_us,
                        int64_t lease_expires_us, bool look_first, const Pick& pick,
                        const sdk::JobSink& sink);
  // Runs S, a lease-guarded UPDATE taking (value, job id, lease token), once
  // per lease inside one transaction.
  template <const Sql& S>
  void per_lease(const char* op, int64_t value, std::span<const conveyor_lease> leases,
                 std::span<conveyor_status> results);

  // wait_for_notification's state, guarded by watch_mu_. Declared before db_,
  // so its connection closes after the writer and the readers.
  std::mutex watch_mu_;
  ChangeDetector changes_;
  WalWatch wal_;
  std::chrono::steady_clock::time_point looked_;  // the last look

  Database db_;
  // Guarded by db_'s writer mutex: touched only inside write transactions.
  ClaimedPlaces claimed_;
};

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_SQLITE_STORAGE_HPP
