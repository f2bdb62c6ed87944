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

 private:
  explicit PostgresStorage(PgOptions options);

  // Gives back whatever a claim with this token took when its reply was lost.
  void release_orphans(int64_t lease_token, int64_t lease_expires_us) noexcept;
};

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_POSTGRES_STORAGE_HPP
