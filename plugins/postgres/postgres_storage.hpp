// The "postgres" storage plugin: a canonical backend (one mutable row per
// job) on PostgreSQL, for several `conveyor serve` processes on several hosts
// sharing one database. See postgres_storage.cc for the options and design.
#ifndef CONVEYOR_PLUGINS_POSTGRES_POSTGRES_STORAGE_HPP
#define CONVEYOR_PLUGINS_POSTGRES_POSTGRES_STORAGE_HPP

#include "pg_storage_base.hpp"

#include <conveyor/storage_plugin.h>
#include <conveyor/storage_plugin.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

extern "C" CONVEYOR_PLUGIN_EXPORT const conveyor_storage_plugin* conveyor_storage_plugin_entry(
    uint32_t host_abi_major, uint32_t host_abi_minor);

namespace conveyor::postgres {

class PostgresStorage : public PgStorageBase {
 public:
  static std::unique_ptr<PostgresStorage> open(const sdk::Options& options);
  // set_queue_paused, list_queues, the rate-limit calls, change_marker and
  // wait_for_notification come from PgStorageBase.

  CONVEYOR_PG_JOB_CALLS;

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
  // ABI 1.2 (swap_shared_state and set_rate_limit_scoped come from PgStorageBase)
  void enqueue_costed(std::span<const conveyor_new_job_v2> jobs, int64_t now_us,
                      std::span<int64_t> out_ids);
  // ABI 1.4 (job keys; the adapter has checked lengths and duplicate keys)
  void enqueue_keyed(std::span<const conveyor_new_job_v3> jobs, int64_t now_us,
                     std::span<int64_t> out_ids);
  // ABI 1.6 (schema 9: jobs.timeout_ms; started_at is jobs.claimed_at)
  void enqueue_timed(std::span<const conveyor_new_job_v4> jobs, int64_t now_us,
                     std::span<int64_t> out_ids);
  uint32_t claim_keys(std::string_view queue, std::span<const std::string_view> kinds,
                      std::span<const sdk::KeyClaim> keys, int64_t lease_token, int64_t now_us,
                      int64_t lease_expires_us, const sdk::JobSink& sink);
  uint32_t list_ready_keys(std::string_view queue, std::optional<std::string_view> after_key,
                           uint32_t limit, uint32_t count_limit, int64_t now_us,
                           const sdk::ReadyKeySink& sink);

 private:
  // Folds job_counts' delta rows into one per (queue, state); false when
  // another process was doing it.
  void compact_counts();

  // costs: one per job, or empty for cost 1 each; keys: one per job, or
  // empty for the empty key.
  void insert_jobs(std::span<const conveyor_new_job> jobs, std::span<const int32_t> costs,
                   std::span<const std::string_view> keys, int64_t created,
                   std::span<int64_t> out_ids, std::span<const int64_t> timeouts = {});
  explicit PostgresStorage(PgOptions options);

  // Gives back whatever a claim with this token took when its reply was lost.
  void release_orphans(int64_t lease_token, int64_t lease_expires_us) noexcept;
  // claim, claim_kinds and claim_keys: runs the prepared statement (queue,
  // now, max_jobs, token, expiry, claimer, then extra) and reports the jobs it claimed;
  // releases them (release_orphans) when the connection broke mid-claim.
  template <typename... Extra>
  uint32_t run_claim(const char* what, const char* statement, const std::string& queue,
                     uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                     int64_t lease_expires_us, const sdk::JobSink& sink, const Extra&... extra);
};

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_POSTGRES_STORAGE_HPP
