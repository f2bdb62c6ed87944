// The "postgres" storage plugin: a canonical backend (one mutable row per
// job) on PostgreSQL, for several `conveyor serve` processes on several hosts
// sharing one database. See postgres_storage.cc for the options and design.
#ifndef CONVEYOR_PLUGINS_POSTGRES_POSTGRES_STORAGE_HPP
#define CONVEYOR_PLUGINS_POSTGRES_POSTGRES_STORAGE_HPP

#include "pg_options.hpp"

#include <conveyor/storage_plugin.h>
#include <conveyor/storage_plugin.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

extern "C" CONVEYOR_PLUGIN_EXPORT const conveyor_storage_plugin* conveyor_storage_plugin_entry(
    uint32_t host_abi_major, uint32_t host_abi_minor);

namespace conveyor::postgres {

class ConnectionPool;
class NotificationListener;
struct NotifyChannels;

class PostgresStorage {
 public:
  static std::unique_ptr<PostgresStorage> open(const sdk::Options& options);
  ~PostgresStorage();
  PostgresStorage(const PostgresStorage&) = delete;
  PostgresStorage& operator=(const PostgresStorage&) = delete;

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
  void wait_for_notification(int64_t timeout_us, const sdk::NotifySink& sink);

 private:
  explicit PostgresStorage(PgOptions options);

  // Whether a call may be repeated on a fresh connection after its
  // connection broke (its outcome then unknown): only when repeating it
  // cannot change what it does or reports.
  enum class Retry { kNever, kAfterConnectionLoss };

  // Runs fn(connection) on a pooled connection. Translates failures into
  // sdk::Error (ConnectionLost for a lost connection), retries serialization
  // failures and deadlocks a few times. fn must be safe to run again from
  // scratch (it resets whatever it collects).
  template <typename Fn>
  void run(const char* op, Retry retry, Fn&& fn);

  // complete / extend_leases / release: one statement for the whole batch;
  // a lease is current iff the statement returned it.
  void lease_batch(const char* op, const char* statement, std::span<const conveyor_lease> leases,
                   int64_t value, std::span<conveyor_status> results);

  // Gives back whatever a claim with this token took when its reply was lost.
  void release_orphans(int64_t lease_token, int64_t lease_expires_us) noexcept;

  // Queues not paused: woken after the listener (re)connects.
  std::vector<std::string> wakeable_queues();

  const PgOptions options_;
  const std::string claimer_;  // "host:pid", stored as jobs.claimed_by
  std::unique_ptr<NotifyChannels> channels_;
  std::unique_ptr<ConnectionPool> pool_;
  std::mutex listener_mu_;
  std::unique_ptr<NotificationListener> listener_;  // opened by the first wait
};

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_POSTGRES_STORAGE_HPP
