// conveyor/host/plugin_binding.hpp: the host's one binding of a storage
// plugin's C function table (storage_plugin.h), shared by the core
// (core/src/storage.cc), the plugins' unit tests (sdk/testing) and the
// conformance suite (sdk/conformance).
//
// Each method makes one call of one slot: it marshals the arguments, passes
// a conveyor_error the binding owns, copies whatever the callbacks report
// into owned C++ values while the plugin's strings are valid, and returns the
// status, the plugin's message and the results. It throws nothing but
// std::bad_alloc; judging the outcome is the caller's (the core throws, the
// tests expect). Malformed reports (a NULL struct, a string with data NULL
// and len > 0, a struct_size below ABI 1.0) are described in the result's
// problems rather than refused, so a test suite can name them.
//
// The binding does not own the handle: close() closes it when the caller says.
// Every method may be called concurrently on one handle (as the plugin must
// allow), close excepted.
#pragma once

#include <conveyor/storage_plugin.h>
#include <conveyor/host/storage_slots.hpp>
#include <conveyor/storage_plugin.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace conveyor::host {

// A job as a plugin reported it: the SDK's owned job, with struct_size and
// reserved0 as reported.
using JobCopy = sdk::OwnedJob;
// A key with ready jobs as a plugin reported it (ABI 1.4, list_ready_keys).
using ReadyKeyCopy = sdk::OwnedReadyKey;
// A key setting as a plugin reported it (ABI 1.5, list_key_settings).
using KeySettingCopy = sdk::KeySetting;

// One conveyor_queue_stats, copied.
struct StatsCopy {
  uint32_t struct_size = 0;
  int32_t paused = 0;
  std::string queue;
  int64_t pending = 0;
  int64_t scheduled = 0;
  int64_t running = 0;
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t cancelled = 0;
  // ABI 1.1: whether struct_size covers oldest_pending_run_at_us, and its
  // value (0: nothing pending).
  bool reports_oldest_pending = false;
  int64_t oldest_pending_run_at = 0;
};

// One conveyor_rate_limit, copied.
struct LimitCopy {
  uint32_t struct_size = 0;
  uint32_t burst = 0;
  std::string queue;
  double rate_per_sec = 0;
  int64_t updated_at_us = 0;
  // ABI 1.2: whether struct_size covers scope, and its value
  // (CONVEYOR_SCOPE_PROCESS when not covered).
  bool reports_scope = false;
  int32_t scope = CONVEYOR_SCOPE_PROCESS;
};

// One list_queues callback.
struct QueueCopy {
  std::string queue;
  int32_t paused = 0;
};

// One on_notify callback.
struct NotificationCopy {
  int32_t kind = 0;
  std::string queue;
};

// What a slot returned. message is the plugin's err.message when code is not
// CONVEYOR_OK (up to its NUL, or all CONVEYOR_ERROR_MESSAGE_MAX bytes when it
// has none), "" otherwise.
struct Status {
  conveyor_status code = CONVEYOR_OK;
  std::string message;
  bool ok() const noexcept { return code == CONVEYOR_OK; }
};

// A status with the call's results, and the problems found in what the
// plugin reported through callbacks (empty when all was well formed).
template <typename T>
struct Result {
  Status status;
  T value{};
  std::vector<std::string> problems;
  bool ok() const noexcept { return status.ok(); }
};

// What the binding puts in a results array (complete, extend_leases,
// release) before the call: a slot the plugin did not write keeps it.
inline constexpr conveyor_status kUnwritten = -77;
// What out-counts (claim's out_claimed, rescue_expired, purge_finished) hold
// before the call, for the same reason.
inline constexpr uint32_t kUnwrittenCount = 0xDEADBEEF;
// What swap_shared_state's out_version and out_value hold before the call.
inline constexpr int64_t kUnwrittenValue = INT64_MIN + 77;

// The ctx of one call's callbacks: the copies they made. Callbacks may come
// from any plugin thread, so it locks. A caller that must survive callbacks
// arriving after their call returned (a broken plugin) gives the binding one
// that outlives the call (PluginBinding::reports_for) and hears of such a
// callback through late_callback.
class Reports {
 public:
  Reports() = default;
  virtual ~Reports() = default;
  Reports(const Reports&) = delete;
  Reports& operator=(const Reports&) = delete;

  std::mutex mu;  // guards everything below
  std::vector<JobCopy> jobs;
  std::vector<StatsCopy> stats;
  std::vector<LimitCopy> limits;
  std::vector<QueueCopy> queues;
  std::vector<NotificationCopy> notifications;
  std::vector<ReadyKeyCopy> ready_keys;
  std::vector<KeySettingCopy> key_settings;
  std::vector<std::string> problems;
  int notifications_off_caller_thread = 0;  // the header wants the caller's thread

  // Set by the binding around the call.
  std::thread::id caller;
  std::atomic<bool> in_call{false};
  // Called for each notification as it arrives (wait_for_notification's
  // on_each), on the plugin's thread; an exception from it becomes a problem.
  std::function<void(int32_t kind, std::string_view queue)> on_notification;

  // A callback came while no call was running. Called without mu held.
  virtual void late_callback() noexcept {}
};

// Copies of one reported struct, checking the rules storage_plugin.h sets for
// it; a broken rule is appended to problems. Reads only the struct_size bytes
// the plugin says it wrote (the rest zero).
JobCopy copy_job(const conveyor_job* job, std::vector<std::string>& problems);
StatsCopy copy_stats(const conveyor_queue_stats* stats, std::vector<std::string>& problems);
LimitCopy copy_limit(const conveyor_rate_limit* limit, std::vector<std::string>& problems);
ReadyKeyCopy copy_ready_key(const conveyor_ready_key* key, std::vector<std::string>& problems);
KeySettingCopy copy_key_setting(const conveyor_key_setting* setting,
                                std::vector<std::string>& problems);

// C views of jobs to enqueue, for any type with queue, kind, payload,
// priority, max_attempts and run_at_us members. The views borrow jobs' strings.
template <typename Spec>
std::vector<conveyor_new_job> new_jobs(std::span<const Spec> jobs) {
  std::vector<conveyor_new_job> out;
  out.reserve(jobs.size());
  for (const Spec& j : jobs)
    out.push_back(conveyor_new_job{sdk::str(j.queue), sdk::str(j.kind), sdk::str(j.payload),
                                   j.priority, j.max_attempts, j.run_at_us});
  return out;
}
// ABI 1.2: the same with each job's cost (Spec has a cost member too).
template <typename Spec>
std::vector<conveyor_new_job_v2> new_jobs_v2(std::span<const Spec> jobs) {
  std::vector<conveyor_new_job_v2> out;
  out.reserve(jobs.size());
  for (const Spec& j : jobs)
    out.push_back(conveyor_new_job_v2{
        conveyor_new_job{sdk::str(j.queue), sdk::str(j.kind), sdk::str(j.payload), j.priority,
                         j.max_attempts, j.run_at_us},
        static_cast<int32_t>(j.cost), 0});
  return out;
}
// ABI 1.4: the same with each job's key (Spec has cost and key members).
template <typename Spec>
std::vector<conveyor_new_job_v3> new_jobs_v3(std::span<const Spec> jobs) {
  std::vector<conveyor_new_job_v3> out;
  out.reserve(jobs.size());
  for (const conveyor_new_job_v2& j : new_jobs_v2(jobs))
    out.push_back(conveyor_new_job_v3{j, conveyor_str{}});
  for (size_t i = 0; i < jobs.size(); ++i) out[i].key = sdk::str(jobs[i].key);
  return out;
}
// ABI 1.6: the same with each job's timeout (Spec has cost, key and
// timeout_ms members).
template <typename Spec>
std::vector<conveyor_new_job_v4> new_jobs_v4(std::span<const Spec> jobs) {
  std::vector<conveyor_new_job_v4> out;
  out.reserve(jobs.size());
  for (const conveyor_new_job_v3& j : new_jobs_v3(jobs)) out.push_back(conveyor_new_job_v4{j, 0});
  for (size_t i = 0; i < jobs.size(); ++i) out[i].timeout_ms = jobs[i].timeout_ms;
  return out;
}

class PluginBinding {
 public:
  using Options = std::vector<std::pair<std::string, std::string>>;

  // table must outlive the binding; handle may be null until open.
  PluginBinding(const conveyor_storage_plugin& table, conveyor_storage* handle) noexcept
      : table_(&table), handle_(handle) {}
  virtual ~PluginBinding() = default;

  const conveyor_storage_plugin& table() const noexcept { return *table_; }
  conveyor_storage* handle() const noexcept { return handle_; }

  // open: the new handle (also kept by this binding). The handle is null
  // unless the status is CONVEYOR_OK, and may be null then too (a broken
  // plugin): the caller judges that.
  Result<conveyor_storage*> open(const Options& options);
  // close: nothing to report. No-op without a handle.
  void close() noexcept;

  Status migrate();
  // ids as written (0 where the plugin wrote none).
  Result<std::vector<int64_t>> enqueue(std::span<const conveyor_new_job> jobs);
  struct Claimed {
    std::vector<JobCopy> jobs;
    uint32_t out_claimed = kUnwrittenCount;
  };
  Result<Claimed> claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token,
                        int64_t now_us, int64_t lease_expires_us);
  // Per lease as written (kUnwritten where not).
  Result<std::vector<conveyor_status>> complete(std::span<const conveyor_lease> leases,
                                                int64_t now_us);
  Status fail(conveyor_lease lease, std::string_view error_text, int64_t retry_at_us,
              int64_t now_us);
  Result<std::vector<conveyor_status>> extend_leases(std::span<const conveyor_lease> leases,
                                                     int64_t lease_expires_us);
  Result<std::vector<conveyor_status>> release(std::span<const conveyor_lease> leases,
                                               int64_t now_us);
  Result<uint32_t> rescue_expired(int64_t now_us, uint32_t max_jobs);
  Status cancel(int64_t job_id, int64_t now_us);
  Status set_queue_paused(std::string_view queue, bool paused, int64_t now_us);
  Result<std::vector<StatsCopy>> queue_stats(int64_t now_us);
  Result<std::vector<QueueCopy>> list_queues();
  // Every job on_job reported (one, from a well-behaved plugin on success).
  Result<std::vector<JobCopy>> get_job(int64_t job_id, int64_t now_us);
  Result<uint64_t> purge_finished(int64_t finalized_before_us, uint32_t max_jobs);
  Status set_rate_limit(std::string_view queue, double rate_per_sec, uint32_t burst,
                        int64_t now_us);
  Status delete_rate_limit(std::string_view queue);
  Result<std::vector<LimitCopy>> list_rate_limits();
  Result<int64_t> change_marker();
  // The optional slot: CONVEYOR_E_UNSUPPORTED, without a call, when it is
  // NULL. on_each (may be empty) sees each notification as it arrives.
  Result<std::vector<NotificationCopy>> wait_for_notification(
      int64_t timeout_us, std::function<void(int32_t kind, std::string_view queue)> on_each = {});

  // ABI 1.1 slots. Each is optional: when the plugin's table does not cover
  // it (an older plugin) or it is NULL, the result is CONVEYOR_E_UNSUPPORTED,
  // without a call, with a message naming the plugin, its ABI and what needs
  // the slot ("storage plugin 'x' implements ABI 1.0; listing jobs needs ABI
  // 1.1 (slot list_jobs)").
  Result<std::vector<int64_t>> enqueue_v2(std::span<const conveyor_new_job> jobs, int64_t now_us);
  Result<Claimed> claim_kinds(std::string_view queue, std::span<const std::string> kinds,
                              uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                              int64_t lease_expires_us);
  struct Listed {
    std::vector<JobCopy> jobs;
    uint32_t out_listed = kUnwrittenCount;
  };
  // kind empty: every kind; states empty: every state.
  Result<Listed> list_jobs(std::string_view queue, std::span<const int32_t> states,
                           std::string_view kind, int64_t after_id, uint32_t limit, int64_t now_us);
  // Per id as written (kUnwritten where not).
  Result<std::vector<conveyor_status>> retry_jobs(std::span<const int64_t> job_ids, int64_t now_us);
  Result<std::vector<conveyor_status>> delete_jobs(std::span<const int64_t> job_ids);
  Result<std::vector<StatsCopy>> job_counts(int64_t now_us);
  struct Rescued {
    std::vector<JobCopy> jobs;  // each rescued job, after the change
    uint32_t out_rescued = kUnwrittenCount;
  };
  Result<Rescued> rescue_expired_v2(int64_t now_us, uint32_t max_jobs);

  // ABI 1.2 slots, optional like the 1.1 ones (CONVEYOR_E_UNSUPPORTED
  // naming the plugin, its ABI and "needs ABI 1.2 (slot ...)" when missing).
  struct Shared {
    int64_t version = 0;  // as written (kUnwrittenValue where not)
    int64_t value = 0;
    int32_t applied = 0;  // as written (kUnwrittenCount where not)
  };
  Result<Shared> swap_shared_state(std::string_view key, int64_t expected_version,
                                   int64_t new_value);
  Status set_rate_limit_v2(std::string_view queue, double rate_per_sec, uint32_t burst,
                           int32_t scope, int64_t now_us);
  Result<std::vector<int64_t>> enqueue_v3(std::span<const conveyor_new_job_v2> jobs,
                                          int64_t now_us);

  // ABI 1.3, optional ("needs ABI 1.3 (slot add_shared_state)" when missing).
  struct SharedAdded {
    int64_t version = 0;  // as written (kUnwrittenValue where not)
    int64_t value = 0;
    uint32_t count = 0;  // as written (kUnwrittenCount where not)
  };
  Result<SharedAdded> add_shared_state(std::string_view key, int64_t credit, int64_t low,
                                       int64_t high, int64_t unit, uint32_t min_count,
                                       uint32_t max_count);

  // ABI 1.4, optional ("needs ABI 1.4 (slot ...)" when missing).
  Result<std::vector<int64_t>> enqueue_v4(std::span<const conveyor_new_job_v3> jobs,
                                          int64_t now_us);
  // ABI 1.6, optional ("needs ABI 1.6 (slot ...)" when missing).
  Result<std::vector<int64_t>> enqueue_v5(std::span<const conveyor_new_job_v4> jobs,
                                          int64_t now_us);
  // One key's share of a claim_keys call.
  struct KeyClaim {
    std::string key;
    uint32_t max_jobs = 0;
  };
  Result<Claimed> claim_keys(std::string_view queue, std::span<const std::string> kinds,
                             std::span<const KeyClaim> keys, int64_t lease_token, int64_t now_us,
                             int64_t lease_expires_us);
  struct ReadyKeys {
    std::vector<ReadyKeyCopy> keys;
    uint32_t out_listed = kUnwrittenCount;
  };
  // after_key nullopt: from the first key.
  Result<ReadyKeys> list_ready_keys(std::string_view queue,
                                    const std::optional<std::string>& after_key, uint32_t limit,
                                    uint32_t count_limit, int64_t now_us);

  // ABI 1.5, optional ("needs ABI 1.5 (slot ...)" when missing).
  Status set_key_setting(const conveyor_key_setting& setting, int64_t now_us);
  // The value is *out_cleared as written (kUnwritten where not).
  Result<int32_t> delete_key_setting(std::string_view queue, int32_t target, std::string_view key,
                                     uint32_t fields);
  Result<std::vector<KeySettingCopy>> list_key_settings();
  // The value is *out_deleted as written (kUnwrittenCount where not).
  Result<uint32_t> delete_shared_states(std::string_view prefix, int64_t value_below,
                                        uint32_t limit);
  // One add of add_shared_states: the key and add_shared_state's arguments.
  struct KeyedAdd {
    std::string key;
    int64_t credit = 0, low = 0, high = 0, unit = 1;
    uint32_t min_count = 1, max_count = 1;
  };
  // Per add, in order, as written (kUnwrittenValue / kUnwrittenCount where
  // not: the binding fills out with them before the call).
  Result<std::vector<SharedAdded>> add_shared_states(std::span<const KeyedAdd> adds);

  // Whether the table covers the slot (struct_size reaches its end) and it
  // is non-NULL.
  bool has_slot(StorageSlot slot) const noexcept;
  // The CONVEYOR_E_UNSUPPORTED status for a missing slot, naming it and the
  // ABI minor that introduced it (storage_slots.hpp); need is what the caller
  // wanted ("listing jobs").
  Status missing_slot(StorageSlot slot, std::string_view need) const;

 protected:
  // Hooks around every call, for a caller that checks the conventions every
  // function shares. op is the slot's name.
  // Before the slot runs; err is zeroed (an override may poison it).
  virtual void before_call(const char* op, conveyor_error& err) noexcept {
    (void)op;
    (void)err;
  }
  // The ctx for this call's callbacks, or nullptr for one that lives as long
  // as the call. What is returned must outlive every callback of the call.
  virtual Reports* reports_for(const char* op) {
    (void)op;
    return nullptr;
  }
  // After the slot returned; reports is null for a slot without callbacks
  // and is locked by the caller of this hook.
  virtual void after_call(const char* op, conveyor_status code, const conveyor_error& err,
                          Reports* reports) {
    (void)op;
    (void)code;
    (void)err;
    (void)reports;
  }

 private:
  using LeaseSlot = conveyor_status (*)(conveyor_storage*, const conveyor_lease*, size_t, int64_t,
                                        conveyor_status*, conveyor_error*);
  Result<std::vector<conveyor_status>> lease_batch(const char* op, LeaseSlot slot,
                                                   std::span<const conveyor_lease> leases,
                                                   int64_t time_us);
  // One call of a slot without callbacks: slot(err) returns its status.
  template <typename Slot>
  Status run(const char* op, Slot&& slot);
  // One call of a slot with one out-value: slot(&value, err), value starting
  // as unwritten.
  template <typename T, typename Slot>
  Result<T> run_out(const char* op, T unwritten, Slot&& slot);
  // One call of a slot with callbacks: slot(err, ctx) returns its status;
  // take(reports) moves the copies out, under the reports' lock.
  template <typename Slot, typename Take>
  Status run_reporting(const char* op, std::vector<std::string>& problems, Slot&& slot, Take&& take,
                       std::function<void(int32_t, std::string_view)> on_each = {});

  const conveyor_storage_plugin* table_;
  conveyor_storage* handle_;
};

}  // namespace conveyor::host
