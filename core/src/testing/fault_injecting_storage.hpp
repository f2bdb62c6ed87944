// FaultInjectingStorage: a Storage decorator for tests, in the spirit of
// LevelDB's fault-injection Env. It forwards every call to an inner Storage
// and, on command, per operation:
//   - fails the next N calls with a status, without calling the inner storage;
//   - applies the next N calls to the inner storage, then throws UNAVAILABLE
//     as if the connection died after the commit (the reply is lost);
//   - runs a hook before each call, so a test can block a call or advance a
//     fake clock at an exact point;
//   - reports CONVEYOR_E_LEASE_LOST for chosen leases (or all) in complete,
//     fail, extend_leases and release, without passing those to the inner
//     storage.
// It counts the calls of each operation (faulted ones included).
// Thread-safe: commands and calls may come from any thread concurrently.
#pragma once

#include <conveyor/internal/storage.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor::testing {

enum class StorageOp {
  kEnqueue,
  kClaim,
  kComplete,
  kFail,
  kExtendLeases,
  kRelease,
  kRescueExpired,
  kCancel,
  kSetQueuePaused,
  kQueueStats,
  kListQueues,
  kGetJob,
  kPurgeFinished,
  kSetRateLimit,
  kDeleteRateLimit,
  kListRateLimits,
  kChangeMarker,
  kWaitForNotification,
  // ABI 1.1
  kClaimKinds,
  kListJobs,
  kRetryJobs,
  kDeleteJobs,
  kJobCounts,
  // ABI 1.2
  kSwapSharedState,
  // ABI 1.3
  kAddSharedState,
  // ABI 1.4
  kClaimKeys,
  kListReadyKeys,
  // ABI 1.5
  kSetKeySetting,
  kDeleteKeySetting,
  kListKeySettings,
  kDeleteSharedStates,
  kAddSharedStates,
};
inline constexpr size_t kStorageOpCount = static_cast<size_t>(StorageOp::kAddSharedStates) + 1;
// "enqueue", "claim", "extend_leases", ...: the Storage method's name.
const char* to_string(StorageOp op) noexcept;

class FaultInjectingStorage final : public Storage {
 public:
  // Runs before a call of its operation, on the caller's thread, with no lock
  // held (it may block, or call this storage).
  using Hook = std::function<void()>;

  explicit FaultInjectingStorage(std::shared_ptr<Storage> inner);

  // The next n calls of op throw StorageError(status) and never reach the
  // inner storage. Adds to any failures still pending for op.
  void fail_next(StorageOp op, uint32_t n = 1, conveyor_status status = CONVEYOR_E_UNAVAILABLE);
  // The next n calls of op are applied to the inner storage, then throw
  // StorageError(UNAVAILABLE): committed, reply lost. Pending fail_next
  // failures of op come first.
  void drop_reply_next(StorageOp op, uint32_t n = 1);
  // From now on, calls of op with more than n leases throw a transient
  // StorageError, as a statement cut off by the database's statement_timeout
  // would (0: no such limit).
  void fail_batches_over(StorageOp op, size_t n);
  // Sets (or with an empty hook removes) the hook of op.
  void set_hook(StorageOp op, Hook hook);
  // Runs before each claim, claim_kinds and claim_keys (after their hook), with the
  // queue claimed from, on the caller's thread, no lock held: it may block,
  // so one queue's claims can be made slow. An empty hook removes it.
  using QueueHook = std::function<void(std::string_view queue)>;
  void set_claim_hook(QueueHook hook);
  // Sets (or removes) the hook run after op's call returned from the inner
  // storage, before its result (or dropped reply) goes back: a test can
  // stall a caller between a read and what it does with it.
  void set_after_hook(StorageOp op, Hook hook);
  // complete, fail, extend_leases and release report CONVEYOR_E_LEASE_LOST
  // for this exact lease (job id and token) from now on.
  void lose_lease(conveyor_lease lease);
  // ... or for every lease (true), until called with false.
  void lose_all_leases(bool lost);
  // has_slot(slot) says false from now on, as on a plugin of an older minor
  // (the call itself still reaches the inner storage).
  void hide_slot(StorageSlot slot);
  // The same by the slot's name; a name no slot has throws
  // std::invalid_argument, so a misspelt one cannot hide nothing quietly.
  void hide_slot(std::string_view slot) { hide_slot(host::storage_slot_named(slot)); }
  // Removes every pending fault, hook and lost lease. Counts stay.
  void clear_faults();

  // Calls of op so far, whatever became of them.
  uint64_t calls(StorageOp op) const;
  // Faults injected so far into op: failed, reply dropped, or lease lost.
  uint64_t faults(StorageOp op) const;
  Storage& inner() { return *inner_; }

  const PluginInfo& plugin_info() const override { return inner_->plugin_info(); }
  bool has_capability(uint64_t cap) const override { return inner_->has_capability(cap); }

  std::vector<int64_t> enqueue(std::span<const NewJob> jobs, int64_t now_us) override;
  std::vector<Job> claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token,
                         int64_t now_us, int64_t lease_expires_us) override;
  std::vector<conveyor_status> complete(std::span<const conveyor_lease> leases,
                                        int64_t now_us) override;
  conveyor_status fail(conveyor_lease lease, std::string_view error_text, int64_t retry_at_us,
                       int64_t now_us) override;
  std::vector<conveyor_status> extend_leases(std::span<const conveyor_lease> leases,
                                             int64_t lease_expires_us) override;
  std::vector<conveyor_status> release(std::span<const conveyor_lease> leases,
                                       int64_t now_us) override;
  Rescued rescue_expired(int64_t now_us, uint32_t max_jobs) override;
  bool cancel(int64_t job_id, int64_t now_us) override;
  void set_queue_paused(std::string_view queue, bool paused, int64_t now_us) override;
  std::vector<QueueStats> queue_stats(int64_t now_us) override;
  std::vector<std::pair<std::string, bool>> list_queues() override;
  std::optional<Job> get_job(int64_t job_id, int64_t now_us) override;
  uint64_t purge_finished(int64_t finalized_before_us, uint32_t max_jobs) override;
  void set_rate_limit(std::string_view queue, const RateLimit& limit, int64_t now_us) override;
  bool delete_rate_limit(std::string_view queue) override;
  std::vector<RateLimitOverride> list_rate_limits() override;
  int64_t change_marker() override;
  void wait_for_notification(
      int64_t timeout_us,
      const std::function<void(int32_t kind, std::string_view queue)>& fn) override;

  bool has_slot(StorageSlot slot) const override;
  std::vector<Job> claim_kinds(std::string_view queue, std::span<const std::string> kinds,
                               uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                               int64_t lease_expires_us) override;
  std::vector<Job> list_jobs(const JobQuery& query, int64_t now_us) override;
  std::vector<conveyor_status> retry_jobs(std::span<const int64_t> ids, int64_t now_us) override;
  std::vector<conveyor_status> delete_jobs(std::span<const int64_t> ids) override;
  std::vector<QueueStats> job_counts(int64_t now_us) override;
  SharedRecord swap_shared_state(std::string_view key, int64_t expected_version,
                                 int64_t new_value) override;
  SharedAdded add_shared_state(std::string_view key, const SharedAdd& add) override;
  std::vector<Job> claim_keys(std::string_view queue, std::span<const std::string> kinds,
                              std::span<const KeyClaim> keys, int64_t lease_token, int64_t now_us,
                              int64_t lease_expires_us) override;
  std::vector<ReadyKey> list_ready_keys(std::string_view queue,
                                        const std::optional<std::string>& after_key, uint32_t limit,
                                        uint32_t count_limit, int64_t now_us) override;
  void set_key_setting(const KeyOverride& setting, int64_t now_us) override;
  bool delete_key_setting(std::string_view queue, const std::optional<std::string>& key, bool limit,
                          bool weight) override;
  std::vector<KeyOverride> list_key_settings() override;
  uint32_t delete_shared_states(std::string_view prefix, int64_t value_below,
                                uint32_t limit) override;
  std::vector<SharedAdded> add_shared_states(std::span<const KeyedAdd> adds) override;

 private:
  struct Failure {
    uint32_t count = 0;
    conveyor_status status = CONVEYOR_E_UNAVAILABLE;
  };
  struct OpFaults {
    std::vector<Failure> fail;  // in order; front first
    uint32_t drop_reply = 0;
    size_t max_batch = 0;  // 0: any size
    Hook hook;
    Hook after_hook;
  };

  // Counts the call, runs the hook, throws an injected failure. Returns
  // whether the reply of this call must be dropped after applying it.
  bool before(StorageOp op);
  // Runs the after-hook, then throws the lost reply if drop.
  void after(StorageOp op, bool drop);
  [[noreturn]] void reply_lost(StorageOp op) const;
  // Applies call to the leases not lost, splicing LEASE_LOST in for the rest.
  template <typename Call>
  std::vector<conveyor_status> per_lease(StorageOp op, std::span<const conveyor_lease> leases,
                                         Call&& call);
  bool lost(const conveyor_lease& lease) const;  // mu_ held
  void run_claim_hook(std::string_view queue);

  const std::shared_ptr<Storage> inner_;
  mutable std::mutex mu_;
  std::array<OpFaults, kStorageOpCount> ops_;          // mu_
  std::set<std::pair<int64_t, int64_t>> lost_leases_;  // mu_: (job id, token)
  bool lose_all_ = false;                              // mu_
  std::set<StorageSlot> hidden_slots_;                 // mu_
  QueueHook claim_hook_;                               // mu_
  std::array<std::atomic<uint64_t>, kStorageOpCount> calls_{};
  std::array<std::atomic<uint64_t>, kStorageOpCount> faults_{};
};

// Opens a fresh in-memory store (the SDK's memory_cpp example plugin, loaded
// through the real loader). Each call gets a store of its own.
std::shared_ptr<Storage> open_memory_storage();

}  // namespace conveyor::testing
