// The "postgres-queue" storage plugin: a queue-storage backend on PostgreSQL
// (append-only ring of partitions, TRUNCATE instead of VACUUM). See
// queue_storage.cc for the options and design.
#ifndef CONVEYOR_PLUGINS_POSTGRES_QUEUE_QUEUE_STORAGE_HPP
#define CONVEYOR_PLUGINS_POSTGRES_QUEUE_QUEUE_STORAGE_HPP

#include "claim_hints.hpp"
#include "lease_slots.hpp"
#include "pg_rows.hpp"
#include "pg_storage_base.hpp"
#include "promotion_schedule.hpp"
#include "queue_options.hpp"
#include "rescue_window.hpp"

#include <conveyor/storage_plugin.h>
#include <conveyor/storage_plugin.hpp>

#include <pqxx/nontransaction>
#include <pqxx/result>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

extern "C" CONVEYOR_PLUGIN_EXPORT const conveyor_storage_plugin* conveyor_storage_plugin_entry(
    uint32_t host_abi_major, uint32_t host_abi_minor);

namespace conveyor::pgqueue {

class HintProber;
class RingMaintainer;

class QueueStorage : public postgres::PgStorageBase {
 public:
  static std::unique_ptr<QueueStorage> open(const sdk::Options& options);
  ~QueueStorage();
  // set_queue_paused, list_queues, the rate-limit calls, change_marker and
  // wait_for_notification come from PgStorageBase.

  CONVEYOR_PG_JOB_CALLS;

  // ABI 1.1 (storage_plugin.h; the adapter has checked the arguments).
  void enqueue_at(std::span<const conveyor_new_job> jobs, int64_t now_us,
                  std::span<int64_t> out_ids);
  // ABI 1.2 (swap_shared_state and set_rate_limit_scoped come from PgStorageBase)
  void enqueue_costed(std::span<const conveyor_new_job_v2> jobs, int64_t now_us,
                      std::span<int64_t> out_ids);
  uint32_t claim_kinds(std::string_view queue, std::span<const std::string_view> kinds,
                       uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                       int64_t lease_expires_us, const sdk::JobSink& sink);
  uint32_t list_jobs(std::string_view queue, std::span<const int32_t> states, std::string_view kind,
                     int64_t after_id, uint32_t limit, int64_t now_us, const sdk::JobSink& sink);
  void retry_jobs(std::span<const int64_t> ids, int64_t now_us, std::span<conveyor_status> results);
  void delete_jobs(std::span<const int64_t> ids, std::span<conveyor_status> results);
  void job_counts(int64_t now_us, const sdk::QueueStatsSink& sink);
  // One sink call per rescued job (AVAILABLE or FAILED, no lease).
  uint32_t rescue_expired_v2(int64_t now_us, uint32_t max_jobs, const sdk::JobSink& sink);
  // ABI 1.4 (job keys; the adapter has checked lengths and duplicate keys)
  void enqueue_keyed(std::span<const conveyor_new_job_v3> jobs, int64_t now_us,
                     std::span<int64_t> out_ids);
  // ABI 1.6 (schema 10: timeout_ms and started_at on entries and `later`)
  void enqueue_timed(std::span<const conveyor_new_job_v4> jobs, int64_t now_us,
                     std::span<int64_t> out_ids);
  uint32_t claim_keys(std::string_view queue, std::span<const std::string_view> kinds,
                      std::span<const sdk::KeyClaim> keys, int64_t lease_token, int64_t now_us,
                      int64_t lease_expires_us, const sdk::JobSink& sink);
  uint32_t list_ready_keys(std::string_view queue, std::optional<std::string_view> after_key,
                           uint32_t limit, uint32_t count_limit, int64_t now_us,
                           const sdk::ReadyKeySink& sink);

  const QueueOptions& options() const { return options_; }

 private:
  explicit QueueStorage(QueueOptions options);

  // Starts the ring's maintenance thread and the claim-hint prober (on the
  // first claim: a process that claims serves the queue; one that only
  // enqueues or inspects does not).
  void start_maintenance();

  // enqueue, enqueue_at, enqueue_costed and enqueue_keyed: due (into the
  // ring) and created at `now`; costs one per job, or empty for cost 1 each;
  // keys one per job, or empty for the empty key.
  void enqueue_with(std::span<const conveyor_new_job> jobs, std::span<const int32_t> costs,
                    std::span<const std::string_view> keys, int64_t now, std::span<int64_t> out_ids,
                    std::span<const int64_t> timeouts = {});
  // claim and claim_kinds: kinds empty claims any kind.
  // Most claim statements one claim runs while it keeps losing rows to
  // concurrent claimers (the claim comment in claim_with).
  static constexpr int kClaimRounds = 4;
  uint32_t claim_with(std::string_view queue, std::span<const std::string_view> kinds,
                      uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                      int64_t lease_expires_us, const sdk::JobSink& sink);
  // Runs one claim statement of queue q (claim, claim_kinds, claim_keys):
  // promotes the queue's due `later` rows first (when due), then statement
  // from the claim hint, and appends the jobs it claimed to all (their
  // slots remembered). moves_hint: the walk moves the hint (an unfiltered
  // claim); otherwise the hint is only its start. Returns how many
  // candidates it lost to concurrent claimers. A lost connection gives back
  // what the token took (release_orphans) and rethrows.
  using ClaimStatement =
      std::function<pqxx::result(pqxx::nontransaction&, const ClaimHints::Start&)>;
  uint32_t claim_round(const char* op, const std::string& q, int64_t lease_token, int64_t now_us,
                       int64_t lease_expires_us, bool moves_hint, const ClaimStatement& statement,
                       std::vector<postgres::OwnedJob>& all);
  // Moves the queue's due `later` rows into the ring when the promotion
  // schedule says some may be due (promotion_schedule.hpp).
  void promote_due(pqxx::nontransaction& tx, const std::string& q, int64_t now_us);
  // rescue_expired and rescue_expired_v2: sink (if any) gets each rescued job.
  uint32_t rescue_with(int64_t now_us, uint32_t max_jobs, const sdk::JobSink* sink);
  // retry_jobs and delete_jobs: runs statement(ids[], extra...) and maps its
  // per-id outcome (0 applied, 1 not found, 2 wrong state) to results;
  // a repeated id's later occurrences get `repeated` where the first applied.
  template <typename... Extra>
  void per_id_batch(const char* op, const char* statement, std::span<const int64_t> ids,
                    conveyor_status repeated, std::span<conveyor_status> results,
                    const Extra&... extra);

  // Gives back whatever a claim with this token took when its reply was lost.
  void release_orphans(int64_t lease_token, int64_t lease_expires_us, int64_t now_us) noexcept;

  const QueueOptions options_;
  ClaimHints hints_;
  PromotionSchedule promotions_;
  LeaseSlots lease_slots_;
  RescueWindow rescue_window_;
  std::once_flag maintenance_started_;
  std::unique_ptr<RingMaintainer> maintainer_;
  std::unique_ptr<HintProber> prober_;
};

}  // namespace conveyor::pgqueue

#endif  // CONVEYOR_PLUGINS_POSTGRES_QUEUE_QUEUE_STORAGE_HPP
