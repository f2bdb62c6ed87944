// The ring slot of each claim this process made, by (job id, lease token), so
// a lease-guarded batch looks the claim mark up in one partition instead of
// probing every slot's index. A lease this process does not know (claimed by
// another process, or forgotten) is looked up in every slot: the memo is a
// shortcut, never a filter of correctness.
#ifndef CONVEYOR_PLUGINS_POSTGRES_QUEUE_LEASE_SLOTS_HPP
#define CONVEYOR_PLUGINS_POSTGRES_QUEUE_LEASE_SLOTS_HPP

#include "connection_pool.hpp"

#include <conveyor/storage_plugin.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <utility>

namespace conveyor::pgqueue {

class LeaseSlots {
 public:
  static constexpr int32_t kUnknown = -1;
  void remember(int64_t job_id, int64_t lease_token, int32_t slot);
  int32_t slot_of(int64_t job_id, int64_t lease_token);
  void forget(int64_t job_id, int64_t lease_token);

 private:
  // Bounds the memory of leases closed by other processes or never closed.
  static constexpr size_t kMaxRemembered = 1'000'000;
  std::mutex mu_;
  std::map<std::pair<int64_t, int64_t>, int32_t> slots_;  // mu_
};

// postgres::run_lease_batch with the leases' slots as a fourth parameter
// ($4 integer[], kUnknown where not known); leases that end (close = true)
// are forgotten.
void run_slotted_lease_batch(postgres::ConnectionPool& pool, LeaseSlots& slots, const char* op,
                             const char* statement, std::span<const conveyor_lease> leases,
                             int64_t value, bool close, std::span<conveyor_status> results);

}  // namespace conveyor::pgqueue

#endif  // CONVEYOR_PLUGINS_POSTGRES_QUEUE_LEASE_SLOTS_HPP
