// The postgres-queue plugin's [storage.options]: the keys every PostgreSQL
// plugin takes (pg_options.hpp) plus the ring's shape. Documented at the top
// of queue_storage.cc.
#ifndef CONVEYOR_PLUGINS_POSTGRES_QUEUE_QUEUE_OPTIONS_HPP
#define CONVEYOR_PLUGINS_POSTGRES_QUEUE_QUEUE_OPTIONS_HPP

#include "pg_options.hpp"

#include <conveyor/storage_plugin.hpp>

#include <cstdint>

namespace conveyor::pgqueue {

inline constexpr const char* kDefaultSchema = "conveyor_queue";
inline constexpr uint32_t kMinSlots = 3, kMaxSlots = 64, kDefaultSlots = 8;
inline constexpr uint32_t kMinRotationMs = 50, kMaxRotationMs = 3'600'000,
                          kDefaultRotationMs = 2000;

struct QueueOptions {
  postgres::PgOptions pg;  // schema defaults to kDefaultSchema here
  uint32_t slots = kDefaultSlots;
  uint32_t rotation_interval_ms = kDefaultRotationMs;
};

// Throws sdk::Error(CONVEYOR_E_INVALID) naming the option and what is allowed.
QueueOptions parse_queue_options(const sdk::Options& options);

}  // namespace conveyor::pgqueue

#endif  // CONVEYOR_PLUGINS_POSTGRES_QUEUE_QUEUE_OPTIONS_HPP
