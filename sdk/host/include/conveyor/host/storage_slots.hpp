// conveyor/host/storage_slots.hpp: the one list of the function slots of
// conveyor_storage_plugin (storage_plugin.h) the host knows, with the ABI
// minor that introduced each and whether a plugin must fill it.
//
// Everything the host derives from the table's shape comes from this list:
// the loader's required and optional checks, the binding's "is the slot
// there" and "which ABI does it need" answers, Storage::has_slot and the
// conformance suite's choice of tests. A capability is asked for by
// StorageSlot value, so a misspelt slot does not compile, where a name
// looked up at run time would quietly answer "missing".
//
// Adding a slot to storage_plugin.h: add its line at the end of the list.
// The static_asserts below fail the build until list and struct agree.
#pragma once

#include <conveyor/storage_plugin.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

// X(member, Id, minor, required): member is the slot's name in
// conveyor_storage_plugin, Id its StorageSlot enumerator, minor the ABI 1.x
// that added it, required whether the loader refuses a table leaving it NULL.
// In the struct's order; every slot after 1.0 is optional (rule 2).
#define CONVEYOR_STORAGE_SLOTS(X)                          \
  X(open, kOpen, 0, true)                                  \
  X(close, kClose, 0, true)                                \
  X(migrate, kMigrate, 0, true)                            \
  X(enqueue, kEnqueue, 0, true)                            \
  X(claim, kClaim, 0, true)                                \
  X(complete, kComplete, 0, true)                          \
  X(fail, kFail, 0, true)                                  \
  X(extend_leases, kExtendLeases, 0, true)                 \
  X(release, kRelease, 0, true)                            \
  X(rescue_expired, kRescueExpired, 0, true)               \
  X(cancel, kCancel, 0, true)                              \
  X(set_queue_paused, kSetQueuePaused, 0, true)            \
  X(queue_stats, kQueueStats, 0, true)                     \
  X(list_queues, kListQueues, 0, true)                     \
  X(get_job, kGetJob, 0, true)                             \
  X(purge_finished, kPurgeFinished, 0, true)               \
  X(set_rate_limit, kSetRateLimit, 0, true)                \
  X(delete_rate_limit, kDeleteRateLimit, 0, true)          \
  X(list_rate_limits, kListRateLimits, 0, true)            \
  X(change_marker, kChangeMarker, 0, true)                 \
  X(wait_for_notification, kWaitForNotification, 0, false) \
  X(enqueue_v2, kEnqueueV2, 1, false)                      \
  X(claim_kinds, kClaimKinds, 1, false)                    \
  X(list_jobs, kListJobs, 1, false)                        \
  X(retry_jobs, kRetryJobs, 1, false)                      \
  X(delete_jobs, kDeleteJobs, 1, false)                    \
  X(job_counts, kJobCounts, 1, false)                      \
  X(rescue_expired_v2, kRescueExpiredV2, 1, false)         \
  X(swap_shared_state, kSwapSharedState, 2, false)         \
  X(set_rate_limit_v2, kSetRateLimitV2, 2, false)          \
  X(enqueue_v3, kEnqueueV3, 2, false)                      \
  X(add_shared_state, kAddSharedState, 3, false)           \
  X(enqueue_v4, kEnqueueV4, 4, false)                      \
  X(claim_keys, kClaimKeys, 4, false)                      \
  X(list_ready_keys, kListReadyKeys, 4, false)             \
  X(set_key_setting, kSetKeySetting, 5, false)             \
  X(delete_key_setting, kDeleteKeySetting, 5, false)       \
  X(list_key_settings, kListKeySettings, 5, false)         \
  X(delete_shared_states, kDeleteSharedStates, 5, false)   \
  X(add_shared_states, kAddSharedStates, 5, false)         \
  X(enqueue_v5, kEnqueueV5, 6, false)

namespace conveyor::host {

// One slot of the function table.
enum class StorageSlot : std::uint8_t {
#define CONVEYOR_SLOT_ID(member, id, minor, required) id,
  CONVEYOR_STORAGE_SLOTS(CONVEYOR_SLOT_ID)
#undef CONVEYOR_SLOT_ID
};

// What the list says about one slot, with where it sits in the struct.
struct SlotInfo {
  StorageSlot slot;
  std::string_view name;  // the member's name, for messages
  std::size_t offset;     // offsetof(conveyor_storage_plugin, member)
  std::size_t size;       // sizeof the member
  std::uint32_t minor;    // ABI 1.minor introduced it
  bool required;
};

// Every slot, indexed by StorageSlot.
inline constexpr SlotInfo kStorageSlots[] = {
#define CONVEYOR_SLOT_INFO(member, id, minor, required) \
  SlotInfo{StorageSlot::id,                             \
           #member,                                     \
           offsetof(conveyor_storage_plugin, member),   \
           sizeof(conveyor_storage_plugin::member),     \
           static_cast<std::uint32_t>(minor),           \
           required},
    CONVEYOR_STORAGE_SLOTS(CONVEYOR_SLOT_INFO)
#undef CONVEYOR_SLOT_INFO
};
inline constexpr std::size_t kStorageSlotCount = sizeof kStorageSlots / sizeof kStorageSlots[0];

constexpr const SlotInfo& slot_info(StorageSlot slot) noexcept {
  return kStorageSlots[static_cast<std::size_t>(slot)];
}
constexpr std::string_view slot_name(StorageSlot slot) noexcept { return slot_info(slot).name; }
constexpr std::uint32_t slot_minor(StorageSlot slot) noexcept { return slot_info(slot).minor; }

// The slot with this member name, if the host knows one.
constexpr std::optional<StorageSlot> find_storage_slot(std::string_view name) noexcept {
  for (const SlotInfo& s : kStorageSlots)
    if (s.name == name) return s.slot;
  return std::nullopt;
}

// A slot named by a literal, checked while compiling: an unknown name is an
// error there (a throw cannot be constant-evaluated), never a quiet "missing".
consteval StorageSlot slot_named(std::string_view name) {
  const std::optional<StorageSlot> slot = find_storage_slot(name);
  if (!slot) throw std::invalid_argument("no such slot in conveyor_storage_plugin");
  return *slot;
}

// For a name that arrives at run time: an unknown one throws
// std::invalid_argument naming it, so the mistake is loud.
inline StorageSlot storage_slot_named(std::string_view name) {
  if (const std::optional<StorageSlot> slot = find_storage_slot(name)) return *slot;
  throw std::invalid_argument("no storage plugin slot is named '" + std::string(name) +
                              "' (conveyor/host/storage_slots.hpp lists them)");
}

// The size of a table of ABI 1.minor: the end of its last slot of that minor
// or older (the list is in the struct's order, so that is the last of them).
constexpr std::size_t table_size_of_minor(std::uint32_t minor) noexcept {
  std::size_t end = 0;
  for (const SlotInfo& s : kStorageSlots)
    if (s.minor <= minor) end = s.offset + s.size;
  return end;
}

namespace slot_checks {

// The slots tile the struct from open to its end in list order: none left
// out, none repeated, none out of order, nothing after the last.
constexpr bool tiles_the_struct() {
  std::size_t at = offsetof(conveyor_storage_plugin, open);
  for (std::size_t i = 0; i < kStorageSlotCount; ++i) {
    const SlotInfo& s = kStorageSlots[i];
    if (static_cast<std::size_t>(s.slot) != i || s.offset != at) return false;
    at += s.size;
  }
  return at == sizeof(conveyor_storage_plugin);
}

// Minors never decrease along the struct (append only, rule 1), only 1.0
// slots are required (rule 2), and the newest minor is the header's.
constexpr bool minors_follow_the_rules() {
  std::uint32_t last = 0;
  for (const SlotInfo& s : kStorageSlots) {
    if (s.minor < last || (s.required && s.minor != 0)) return false;
    last = s.minor;
  }
  return last == CONVEYOR_ABI_MINOR;
}

}  // namespace slot_checks

static_assert(slot_checks::tiles_the_struct(),
              "CONVEYOR_STORAGE_SLOTS and conveyor_storage_plugin differ: list every slot of "
              "storage_plugin.h once, in the struct's order");
static_assert(slot_checks::minors_follow_the_rules(),
              "CONVEYOR_STORAGE_SLOTS: minors must not decrease, only 1.0 slots may be "
              "required, and the last slot's minor must be CONVEYOR_ABI_MINOR");
static_assert(table_size_of_minor(0) == CONVEYOR_PLUGIN_V1_0_SIZE, "1.0 slots differ");
static_assert(table_size_of_minor(1) == CONVEYOR_PLUGIN_V1_1_SIZE, "1.1 slots differ");
static_assert(table_size_of_minor(2) == CONVEYOR_PLUGIN_V1_2_SIZE, "1.2 slots differ");
static_assert(table_size_of_minor(3) == CONVEYOR_PLUGIN_V1_3_SIZE, "1.3 slots differ");
static_assert(table_size_of_minor(4) == CONVEYOR_PLUGIN_V1_4_SIZE, "1.4 slots differ");
static_assert(table_size_of_minor(5) == CONVEYOR_PLUGIN_V1_5_SIZE, "1.5 slots differ");
static_assert(table_size_of_minor(6) == CONVEYOR_PLUGIN_V1_6_SIZE, "1.6 slots differ");
static_assert(table_size_of_minor(CONVEYOR_ABI_MINOR) == sizeof(conveyor_storage_plugin),
              "the newest minor's slots end the struct");

}  // namespace conveyor::host
