// The "postgres-queue" storage plugin: a queue-storage backend on PostgreSQL
// (append-only ring of partitions, TRUNCATE instead of VACUUM). See
// queue_storage.cc for the options and design.
#ifndef CONVEYOR_PLUGINS_POSTGRES_QUEUE_QUEUE_STORAGE_HPP
#define CONVEYOR_PLUGINS_POSTGRES_QUEUE_QUEUE_STORAGE_HPP

#include "claim_hints.hpp"
#include "lease_slots.hpp"
#include "pg_storage_base.hpp"
#include "promotion_schedule.hpp"
#include "queue_options.hpp"
#include "rescue_window.hpp"

#include <conveyor/storage_plugin.h>
#include <conveyor/storage_plugin.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

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

  const QueueOptions& options() const { return options_; }

 private:
  explicit QueueStorage(QueueOptions options);

  // Starts the ring's maintenance thread and the claim-hint prober (on the
  // first claim: a process that claims serves the queue; one that only
  // enqueues or inspects does not).
  void start_maintenance();

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
