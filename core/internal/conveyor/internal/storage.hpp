// Storage: what the core needs from a job store. The implementation over a
// plugin's C function table is PluginStorage (core/src/plugin_storage.hpp);
// tests wrap any Storage in a FaultInjectingStorage.
//
// Conventions, for every method unless it says otherwise:
//  - Success returns normally. Failure throws StorageError; transient() tells
//    whether a retry may succeed (the store was busy or unreachable). A call
//    that throws may still have been applied (the reply can be lost after the
//    commit), so callers that retry must tolerate that.
//  - Thread-safe: any method may be called from any thread concurrently,
//    except that the destructor runs after every call has returned.
//  - Times are microseconds since the Unix epoch, read by the caller.
#pragma once

#include <conveyor/storage_plugin.h>
#include <conveyor/host/plugin_loader.hpp>
#include <conveyor/host/storage_slots.hpp>
#include <conveyor/job.hpp>
#include <conveyor/rate_limit.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor {

// A slot of the plugin's function table (storage_slots.hpp), for has_slot.
using host::StorageSlot;

// The lease a claimed job holds, as Storage's complete, fail and extend take
// it (the embedding API's Job carries its parts, id and lease_token).
inline conveyor_lease lease_of(const Job& job) { return conveyor_lease{job.id, job.lease_token}; }

// A failed storage call. code() is the plugin's CONVEYOR_E_* status.
class StorageError : public std::runtime_error {
 public:
  StorageError(conveyor_status code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  conveyor_status code() const noexcept { return code_; }
  // Worth retrying later (busy, unreachable).
  bool transient() const noexcept { return code_ == CONVEYOR_E_UNAVAILABLE; }

 private:
  conveyor_status code_;
};

class Storage {
 public:
  // Opens the plugin with options and migrates the schema: a PluginStorage.
  // Throws StorageError.
  static std::shared_ptr<Storage> open(
      std::shared_ptr<const Plugin> plugin,
      const std::vector<std::pair<std::string, std::string>>& options);
  virtual ~Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // The plugin behind this storage. Never throws.
  virtual const PluginInfo& plugin_info() const = 0;
  // Whether the plugin declared a CONVEYOR_CAP_* bit. Never throws.
  virtual bool has_capability(uint64_t cap) const = 0;

  // Inserts jobs atomically (all or none); their ids, in order. created_at is
  // now_us when the plugin has ABI 1.1's enqueue_v2, the plugin's clock otherwise.
  virtual std::vector<int64_t> enqueue(std::span<const NewJob> jobs, int64_t now_us) = 0;
  // Leases up to max_jobs due jobs of queue under lease_token until
  // lease_expires_us, in the plugin's order (priority, run_at, id). Empty
  // when none is due or the queue is paused.
  virtual std::vector<Job> claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token,
                                 int64_t now_us, int64_t lease_expires_us) = 0;
  // Marks leased jobs completed. Per lease, in order: CONVEYOR_OK or
  // CONVEYOR_E_LEASE_LOST (the lease expired or was taken over; nothing done).
  virtual std::vector<conveyor_status> complete(std::span<const conveyor_lease> leases,
                                                int64_t now_us) = 0;
  // Records a failed attempt: the job runs again at retry_at_us (>= 0) or
  // fails for good (< 0). CONVEYOR_OK or CONVEYOR_E_LEASE_LOST.
  virtual conveyor_status fail(conveyor_lease lease, std::string_view error_text,
                               int64_t retry_at_us, int64_t now_us) = 0;
  // Moves the leases' expiry to lease_expires_us. Per lease: CONVEYOR_OK or
  // CONVEYOR_E_LEASE_LOST.
  virtual std::vector<conveyor_status> extend_leases(std::span<const conveyor_lease> leases,
                                                     int64_t lease_expires_us) = 0;
  // Gives leased jobs back unrun (available now, attempt not counted). Per
  // lease: CONVEYOR_OK or CONVEYOR_E_LEASE_LOST.
  virtual std::vector<conveyor_status> release(std::span<const conveyor_lease> leases,
                                               int64_t now_us) = 0;
  // What one rescue_expired call changed.
  struct Rescued {
    uint32_t count = 0;
    // Each rescued job after the change (available again, or failed); empty
    // from a plugin without ABI 1.1's rescue_expired_v2, which reports only
    // the count.
    std::vector<Job> jobs;
  };
  // Rescues up to max_jobs running jobs whose lease expired before now_us
  // (runnable again, or failed with no attempts left).
  virtual Rescued rescue_expired(int64_t now_us, uint32_t max_jobs) = 0;
  // Cancels a job; false when it does not exist or is already final.
  virtual bool cancel(int64_t job_id, int64_t now_us) = 0;
  virtual void set_queue_paused(std::string_view queue, bool paused, int64_t now_us) = 0;
  // Counts per known queue.
  virtual std::vector<QueueStats> queue_stats(int64_t now_us) = 0;
  // Known queues and whether each is paused (cheap; for discovery).
  virtual std::vector<std::pair<std::string, bool>> list_queues() = 0;
  // nullopt when the job does not exist (or was purged).
  virtual std::optional<Job> get_job(int64_t job_id, int64_t now_us) = 0;
  // Deletes up to max_jobs final jobs finalized before the cutoff; how many.
  virtual uint64_t purge_finished(int64_t finalized_before_us, uint32_t max_jobs) = 0;
  // Stores a queue's rate-limit override.
  virtual void set_rate_limit(std::string_view queue, const RateLimit& limit, int64_t now_us) = 0;
  // false when the queue had no override.
  virtual bool delete_rate_limit(std::string_view queue) = 0;
  virtual std::vector<RateLimitOverride> list_rate_limits() = 0;
  // A value that changes whenever any process pauses or resumes a queue or
  // sets or deletes an override. Cheap.
  virtual int64_t change_marker() = 0;
  // Only with CONVEYOR_CAP_NOTIFY (else throws CONVEYOR_E_UNSUPPORTED).
  // Blocks until a notification arrives or timeout_us passes, calling fn on
  // the calling thread for each; if fn throws, the wait throws StorageError.
  virtual void wait_for_notification(
      int64_t timeout_us, const std::function<void(int32_t kind, std::string_view queue)>& fn) = 0;

  // ---- ABI 1.1 (storage_plugin.h). On a plugin without the slot each
  // throws StorageError(CONVEYOR_E_UNSUPPORTED) whose message names the
  // plugin, its ABI and what needed the slot, except job_counts (below).
  // Whether the plugin's table covers the slot and fills it. The optional
  // slots (wait_for_notification and every slot after 1.0) are the ones worth
  // asking about: a loaded plugin has every required one.
  virtual bool has_slot(StorageSlot slot) const = 0;
  // claim, only jobs whose kind is in kinds (empty: any kind, as claim).
  virtual std::vector<Job> claim_kinds(std::string_view queue, std::span<const std::string> kinds,
                                       uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                                       int64_t lease_expires_us) = 0;
  // One page of a queue's jobs in id order. Bad queries (empty queue, limit
  // 0 or above kListJobsMax, after_id < 0) throw CONVEYOR_E_INVALID.
  virtual std::vector<Job> list_jobs(const JobQuery& query, int64_t now_us) = 0;
  // Per id, in order: FAILED/CANCELLED jobs become available now with
  // attempts reset (CONVEYOR_OK), else NOT_FOUND / WRONG_STATE, unchanged.
  virtual std::vector<conveyor_status> retry_jobs(std::span<const int64_t> ids, int64_t now_us) = 0;
  // Per id, in order: final jobs deleted (CONVEYOR_OK), else NOT_FOUND /
  // WRONG_STATE, unchanged.
  virtual std::vector<conveyor_status> delete_jobs(std::span<const int64_t> ids) = 0;
  // queue_stats without scanning retained jobs (job_counts). On a plugin
  // without the slot: queue_stats (a scan, but the same answer).
  virtual std::vector<QueueStats> job_counts(int64_t now_us) = 0;

  // ---- ABI 1.2. set_rate_limit with scope kFleet, and enqueue of a job
  // whose cost is not 1, throw CONVEYOR_E_UNSUPPORTED (naming the plugin and
  // its ABI) on a plugin without set_rate_limit_v2 / enqueue_v3; with scope
  // kProcess and cost 1 they work on every plugin.
  // A shared record after swap_shared_state (storage_plugin.h).
  struct SharedRecord {
    int64_t version = 0;
    int64_t value = 0;
    bool applied = false;
  };
  // Compare-and-set of key's record; expected_version < 0 only reads. Throws
  // CONVEYOR_E_UNSUPPORTED on a plugin without the slot.
  virtual SharedRecord swap_shared_state(std::string_view key, int64_t expected_version,
                                         int64_t new_value) = 0;

  // ---- ABI 1.3 ----
  // add_shared_state's inputs and result (storage_plugin.h): with v key's
  // value, base = max(v - credit, low); count = the most units, at most
  // max_count, with base + unit * count <= high; applied (version + 1) when
  // count >= min_count, else nothing changes and count is 0.
  struct SharedAdd {
    int64_t credit = 0;
    int64_t low = 0;
    int64_t high = 0;
    int64_t unit = 1;
    uint32_t min_count = 1;
    uint32_t max_count = 1;
  };
  struct SharedAdded {
    int64_t version = 0;
    int64_t value = 0;
    uint32_t count = 0;
  };
  // Throws CONVEYOR_E_UNSUPPORTED on a plugin without the slot
  // (has_slot(StorageSlot::kAddSharedState) says which).
  virtual SharedAdded add_shared_state(std::string_view key, const SharedAdd& add) = 0;

  // ---- ABI 1.4 (job keys). enqueue of a job with a non-empty key, and
  // both calls below, throw CONVEYOR_E_UNSUPPORTED naming the plugin and its
  // ABI on a plugin without enqueue_v4 / claim_keys / list_ready_keys. ----
  // One key's share of a claim_keys call.
  struct KeyClaim {
    std::string key;
    uint32_t max_jobs = 0;
  };
  // Up to each key's max_jobs ready jobs of that key, in claim order, in one
  // call; kinds as claim_kinds (empty: any kind). Jobs of other keys are
  // untouched. Throws CONVEYOR_E_INVALID for a key listed twice.
  virtual std::vector<Job> claim_keys(std::string_view queue, std::span<const std::string> kinds,
                                      std::span<const KeyClaim> keys, int64_t lease_token,
                                      int64_t now_us, int64_t lease_expires_us) = 0;
  // A key with ready jobs, counted up to the call's count_limit.
  struct ReadyKey {
    std::string key;
    int64_t ready = 0;
  };
  // One page of the queue's keys that have ready jobs, in bytewise key order,
  // after after_key (nullopt: from the first); fewer than limit: no more.
  virtual std::vector<ReadyKey> list_ready_keys(std::string_view queue,
                                                const std::optional<std::string>& after_key,
                                                uint32_t limit, uint32_t count_limit,
                                                int64_t now_us) = 0;

  // ---- ABI 1.5 (settings of keys made at run time). Each throws
  // CONVEYOR_E_UNSUPPORTED naming the plugin and its ABI on a plugin
  // without the slot. ----
  // Stores what setting sets (its limit, its weight, or both; at least
  // one), keeping what it leaves unset. The caller validated it.
  virtual void set_key_setting(const KeyOverride& setting, int64_t now_us) = 0;
  // Clears the limit (limit true) and/or the weight (weight true) of key
  // (nullopt: every key) of queue; whether any of them was set.
  virtual bool delete_key_setting(std::string_view queue, const std::optional<std::string>& key,
                                  bool limit, bool weight) = 0;
  // Every stored setting, in (queue, one key before every key, key) order.
  virtual std::vector<KeyOverride> list_key_settings() = 0;
  // Deletes up to limit shared records whose key starts with prefix and
  // whose value is below value_below; how many.
  virtual uint32_t delete_shared_states(std::string_view prefix, int64_t value_below,
                                        uint32_t limit) = 0;
  // add_shared_state on each key, results in order: one call per
  // CONVEYOR_SHARED_ADDS_MAX adds on a plugin with add_shared_states, else
  // one add_shared_state call each (throws CONVEYOR_E_UNSUPPORTED without
  // that either). Keys must be distinct. On a throw, which adds applied is
  // unknown.
  struct KeyedAdd {
    std::string_view key;
    SharedAdd add;
  };
  virtual std::vector<SharedAdded> add_shared_states(std::span<const KeyedAdd> adds) = 0;

 protected:
  Storage() = default;
};

// "" when storage has slot; otherwise why what cannot be done, naming the
// plugin, its ABI and the slot with the minor that introduced it. Never throws
// but std::bad_alloc.
std::string missing_slot_reason(const Storage& storage, StorageSlot slot, std::string_view what);

// Loads the configured plugin and opens it: resolve, load, open, migrate.
struct StorageConfig;
std::shared_ptr<Storage> open_storage(const StorageConfig& config);

}  // namespace conveyor
