// One open storage handle of the plugin under test, driven through its C
// function table by the host binding (conveyor/host/plugin_binding.hpp).
// Every call checks the conventions every function shares
// (storage_plugin.h "Conventions for every function"): a known status code;
// on failure err->code equal to the status and a non-empty, NUL-terminated
// message; callbacks only during the call; reported structs well formed. A
// broken convention is a test failure (ADD_FAILURE, safe from any thread).
//
// Two flavours of each operation:
//   Status claim(..., &out)  the raw outcome, for tests that expect errors;
//   claim_jobs(...)          must succeed: throws CallFailed otherwise, which
//                            GoogleTest reports as the test's failure.
#pragma once

#include "reported.hpp"

#include <conveyor/storage_plugin.h>
#include <conveyor/host/plugin_loader.hpp>
#include <conveyor/host/storage_slots.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::conformance {

// The suite's clock: every now_us it passes is near kT0 (2100-01-01), far from
// the wall clock, so a plugin that reads its own clock where the header says
// to use now_us is caught.
inline constexpr int64_t kT0 = 4'102'444'800'000'000;
inline constexpr int64_t kSecond = 1'000'000;
inline constexpr int64_t kLease = 30 * kSecond;

struct Status {
  std::string op;
  conveyor_status code = CONVEYOR_OK;
  std::string message;
  bool ok() const { return code == CONVEYOR_OK; }
};
// "claim returned CONVEYOR_E_INVALID (1): <message>"
std::ostream& operator<<(std::ostream& out, const Status& status);

// A call that had to succeed did not.
class CallFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct JobSpec {
  std::string queue = "default";
  std::string kind = "conformance.job";
  std::string payload = "{}";
  int32_t priority = 0;
  int32_t max_attempts = 3;
  int64_t run_at_us = kT0;
  int32_t cost = 1;      // enqueue_v3 and enqueue_v4 only (ABI 1.2)
  std::string key = "";  // enqueue_v4 only (ABI 1.4)
  int64_t timeout_ms = 0;  // enqueue_v5 only (ABI 1.6)
};

// One key's share of a claim_keys call (ABI 1.4): its key and max_jobs.
using KeyClaim = host::PluginBinding::KeyClaim;

// swap_shared_state's out-parameters as the plugin wrote them.
struct SharedCopy {
  int64_t version = 0;
  int64_t value = 0;
  int32_t applied = 0;
};

// add_shared_state's out-parameters as the plugin wrote them.
struct SharedAddCopy {
  int64_t version = 0;
  int64_t value = 0;
  uint32_t count = 0;
};

// One add of add_shared_states (ABI 1.5): a key and add_shared_state's
// arguments.
using KeyedAdd = host::PluginBinding::KeyedAdd;

// A fresh non-zero lease token per call (tokens are the host's to pick).
int64_t next_lease_token();

class Handle {
 public:
  Handle(std::shared_ptr<const Plugin> plugin, conveyor_storage* storage);
  ~Handle();  // close
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  conveyor_storage* raw() const { return storage_; }
  const conveyor_storage_plugin& table() const { return *table_; }

  // ---- raw outcomes ----
  Status migrate();
  Status enqueue(const std::vector<JobSpec>& jobs, std::vector<int64_t>* ids);
  Status claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token, int64_t now_us,
               int64_t lease_expires_us, std::vector<JobCopy>* jobs);
  Status complete(const std::vector<conveyor_lease>& leases, int64_t now_us,
                  std::vector<conveyor_status>* results);
  Status fail(conveyor_lease lease, std::string_view error_text, int64_t retry_at_us,
              int64_t now_us);
  Status extend_leases(const std::vector<conveyor_lease>& leases, int64_t lease_expires_us,
                       std::vector<conveyor_status>* results);
  Status release(const std::vector<conveyor_lease>& leases, int64_t now_us,
                 std::vector<conveyor_status>* results);
  Status rescue_expired(int64_t now_us, uint32_t max_jobs, uint32_t* rescued);
  Status cancel(int64_t job_id, int64_t now_us);
  Status set_queue_paused(std::string_view queue, bool paused, int64_t now_us);
  Status queue_stats(int64_t now_us, std::vector<StatsCopy>* stats);
  Status list_queues(std::vector<QueueCopy>* queues);
  Status get_job(int64_t job_id, int64_t now_us, std::optional<JobCopy>* job);
  Status purge_finished(int64_t finalized_before_us, uint32_t max_jobs, uint64_t* deleted);
  Status set_rate_limit(std::string_view queue, double rate_per_sec, uint32_t burst,
                        int64_t now_us);
  Status delete_rate_limit(std::string_view queue);
  Status list_rate_limits(std::vector<LimitCopy>* limits);
  Status change_marker(int64_t* marker);
  Status wait_for_notification(int64_t timeout_us, std::vector<NotificationCopy>* notes);

  // ---- ABI 1.1 raw outcomes (the binding answers CONVEYOR_E_UNSUPPORTED
  // without a call when the slot is missing: tests check has_slot first) ----
  Status enqueue_v2(const std::vector<JobSpec>& jobs, int64_t now_us, std::vector<int64_t>* ids);
  Status claim_kinds(std::string_view queue, const std::vector<std::string>& kinds,
                     uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                     int64_t lease_expires_us, std::vector<JobCopy>* jobs);
  Status list_jobs(std::string_view queue, const std::vector<int32_t>& states,
                   std::string_view kind, int64_t after_id, uint32_t limit, int64_t now_us,
                   std::vector<JobCopy>* jobs);
  Status retry_jobs(const std::vector<int64_t>& ids, int64_t now_us,
                    std::vector<conveyor_status>* results);
  Status delete_jobs(const std::vector<int64_t>& ids, std::vector<conveyor_status>* results);
  Status job_counts(int64_t now_us, std::vector<StatsCopy>* stats);
  Status rescue_expired_v2(int64_t now_us, uint32_t max_jobs, std::vector<JobCopy>* jobs);

  // ---- ABI 1.2 raw outcomes (CONVEYOR_E_UNSUPPORTED without a call when
  // the slot is missing) ----
  Status swap_shared_state(std::string_view key, int64_t expected_version, int64_t new_value,
                           SharedCopy* out);
  Status set_rate_limit_v2(std::string_view queue, double rate_per_sec, uint32_t burst,
                           int32_t scope, int64_t now_us);
  Status enqueue_v3(const std::vector<JobSpec>& jobs, int64_t now_us, std::vector<int64_t>* ids);

  // ---- ABI 1.3 raw outcome (as the 1.2 ones) ----
  Status add_shared_state(std::string_view key, int64_t credit, int64_t low, int64_t high,
                          int64_t unit, uint32_t min_count, uint32_t max_count, SharedAddCopy* out);

  // ---- ABI 1.4 raw outcomes (as the 1.2 ones). claim_keys and
  // list_ready_keys also check *out_claimed / *out_listed against the
  // callbacks, and each key's ready count against count_limit. ----
  Status enqueue_v4(const std::vector<JobSpec>& jobs, int64_t now_us, std::vector<int64_t>* ids);
  Status claim_keys(std::string_view queue, const std::vector<std::string>& kinds,
                    const std::vector<KeyClaim>& keys, int64_t lease_token, int64_t now_us,
                    int64_t lease_expires_us, std::vector<JobCopy>* jobs);
  // after_key nullopt: from the first key (after_key NULL).
  Status list_ready_keys(std::string_view queue, const std::optional<std::string>& after_key,
                         uint32_t limit, uint32_t count_limit, int64_t now_us,
                         std::vector<ReadyKeyCopy>* keys);

  // ---- must succeed (throw CallFailed) ----
  int64_t add(const JobSpec& job);
  std::vector<int64_t> add_all(const std::vector<JobSpec>& jobs);
  // Claims with a fresh token and a lease of kLease from now_us.
  std::vector<JobCopy> claim_jobs(std::string_view queue, uint32_t max_jobs, int64_t now_us);
  JobCopy claim_one(std::string_view queue, int64_t now_us);  // exactly one job
  JobCopy job(int64_t job_id, int64_t now_us);
  std::vector<conveyor_status> complete_all(const std::vector<conveyor_lease>& leases,
                                            int64_t now_us);
  void complete_one(conveyor_lease lease, int64_t now_us);  // must be CONVEYOR_OK
  uint32_t rescue(int64_t now_us, uint32_t max_jobs);
  void pause(std::string_view queue, bool paused, int64_t now_us);
  std::vector<StatsCopy> stats(int64_t now_us);
  std::optional<StatsCopy> stats_of(std::string_view queue, int64_t now_us);
  std::vector<QueueCopy> queues();
  std::vector<LimitCopy> limits();
  int64_t marker();
  uint64_t purge(int64_t finalized_before_us, uint32_t max_jobs);
  // ABI 1.1
  std::vector<JobCopy> claim_kinds_jobs(std::string_view queue,
                                        const std::vector<std::string>& kinds, uint32_t max_jobs,
                                        int64_t now_us);
  std::vector<JobCopy> list(std::string_view queue, const std::vector<int32_t>& states,
                            std::string_view kind, int64_t after_id, uint32_t limit,
                            int64_t now_us);
  std::vector<conveyor_status> retry(const std::vector<int64_t>& ids, int64_t now_us);
  std::vector<conveyor_status> remove(const std::vector<int64_t>& ids);
  std::vector<StatsCopy> counts(int64_t now_us);
  // ABI 1.2
  SharedCopy shared(std::string_view key);  // a read (expected_version -1)
  std::vector<int64_t> add_costed(const std::vector<JobSpec>& jobs);  // enqueue_v3 at kT0
  // ABI 1.4
  std::vector<int64_t> add_keyed(const std::vector<JobSpec>& jobs);  // enqueue_v4 at kT0
  // Claims with a fresh token and a lease of kLease from now_us.
  std::vector<JobCopy> claim_keys_jobs(std::string_view queue,
                                       const std::vector<std::string>& kinds,
                                       const std::vector<KeyClaim>& keys, int64_t now_us);
  std::vector<ReadyKeyCopy> ready_keys(std::string_view queue,
                                       const std::optional<std::string>& after_key, uint32_t limit,
                                       uint32_t count_limit, int64_t now_us);
  // ---- ABI 1.6 raw outcome (as the 1.2 ones) ----
  Status enqueue_v5(const std::vector<JobSpec>& jobs, int64_t now_us, std::vector<int64_t>* ids);
  std::vector<int64_t> add_timed(const std::vector<JobSpec>& jobs);  // enqueue_v5 at kT0
  // ---- ABI 1.5 raw outcomes (as the 1.2 ones). delete_key_setting also
  // checks that *out_cleared is 0 or 1, delete_shared_states that
  // *out_deleted was written and is at most limit. ----
  Status set_key_setting(const conveyor_key_setting& setting, int64_t now_us);
  Status set_key_setting(const KeySettingCopy& setting, int64_t now_us);  // its view()
  Status delete_key_setting(std::string_view queue, int32_t target, std::string_view key,
                            uint32_t fields, int32_t* cleared);
  Status list_key_settings(std::vector<KeySettingCopy>* settings);
  Status delete_shared_states(std::string_view prefix, int64_t value_below, uint32_t limit,
                              uint32_t* deleted);
  // Also checks, on CONVEYOR_OK, that every out[i] was written and that each
  // count is 0 or within its add's min_count .. max_count. *out per add, as
  // written (host::kUnwrittenValue / kUnwrittenCount where not).
  Status add_shared_states(const std::vector<KeyedAdd>& adds, std::vector<SharedAddCopy>* out);

  // ABI 1.5, must succeed
  void set_key(const KeySettingCopy& setting, int64_t now_us);
  int32_t clear_key(std::string_view queue, int32_t target, std::string_view key,
                    uint32_t fields);  // *out_cleared
  std::vector<KeySettingCopy> key_settings();
  uint32_t forget_shared(std::string_view prefix, int64_t value_below,
                         uint32_t limit);                                  // *out_deleted
  std::vector<SharedAddCopy> add_many(const std::vector<KeyedAdd>& adds);  // out, per add

  // Whether the plugin's table has this slot (covered and non-NULL).
  bool has_slot(host::StorageSlot slot) const;

 private:
  std::shared_ptr<const Plugin> plugin_;
  const conveyor_storage_plugin* table_;
  conveyor_storage* storage_;
  // The host binding with the shared conventions checked around every call.
  std::unique_ptr<class CheckedBinding> binding_;
};

// Throws CallFailed describing status unless it is CONVEYOR_OK.
void require_ok(const Status& status);

// A conveyor_error filled with a byte pattern, so an error the plugin did not
// write (or did not NUL-terminate) is visible.
conveyor_error poisoned_error();
// Checks a failed call's err (storage_plugin.h "Status" and "Errors"); returns
// a description of what is wrong, or "" when all is well.
std::string check_error(conveyor_status code, const conveyor_error& err);

}  // namespace conveyor::conformance
