#include "handle.hpp"

#include "call_context.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <span>
#include <sstream>

namespace conveyor::conformance {
namespace {

constexpr char kPoison = '\x01';
// A value no plugin writes into results or err->code: an unwritten one stays visible.
constexpr conveyor_status kUnwritten = host::kUnwritten;

Status outcome(const char* op, const host::Status& s) { return Status{op, s.code, s.message}; }

// Per-lease results (complete, extend_leases, release): "receives per lease
// CONVEYOR_OK or CONVEYOR_E_LEASE_LOST".
void check_results(const char* op, const Status& status,
                   const std::vector<conveyor_status>& results) {
  if (!status.ok()) return;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i] == CONVEYOR_OK || results[i] == CONVEYOR_E_LEASE_LOST) continue;
    ADD_FAILURE() << op << " returned CONVEYOR_OK but results[" << i << "] is "
                  << (results[i] == kUnwritten ? std::string("not written")
                                               : status_name(results[i]))
                  << " (storage_plugin.h: results \"receives per lease CONVEYOR_OK or "
                     "CONVEYOR_E_LEASE_LOST\")";
  }
}

// A batch call's outcome, its results checked and handed to *results.
Status batch(const char* op, host::Result<std::vector<conveyor_status>>&& r,
             std::vector<conveyor_status>* results) {
  Status s = outcome(op, r.status);
  check_results(op, s, r.value);
  if (results != nullptr) *results = std::move(r.value);
  return s;
}

}  // namespace

std::ostream& operator<<(std::ostream& out, const Status& s) {
  out << s.op << " returned " << status_name(s.code);
  if (!s.ok()) out << ": \"" << s.message << "\"";
  return out;
}

void require_ok(const Status& s) {
  if (s.ok()) return;
  std::ostringstream msg;
  msg << s << " where CONVEYOR_OK was required";
  throw CallFailed(msg.str());
}

int64_t next_lease_token() {
  static std::atomic<int64_t> next{1'000'001};
  return next.fetch_add(1);
}

conveyor_error poisoned_error() {
  conveyor_error err;
  err.code = kUnwritten;
  std::memset(err.message, kPoison, sizeof err.message);
  return err;
}

std::string check_error(conveyor_status code, const conveyor_error& err) {
  std::string problems;
  if (err.code != code)
    problems += "err->code is " +
                (err.code == kUnwritten ? std::string("not written") : status_name(err.code)) +
                ", not the returned status (conveyor_error: \"The plugin sets code and message "
                "on failure\"); ";
  const void* nul = std::memchr(err.message, '\0', sizeof err.message);
  if (nul == nullptr) {
    problems += "err->message is not NUL-terminated within CONVEYOR_ERROR_MESSAGE_MAX bytes; ";
  } else if (err.message[0] == '\0') {
    problems += "err->message is empty (say what went wrong and what to fix); ";
  } else if (err.message[0] == kPoison) {
    problems += "err->message was not written; ";
  }
  if (!problems.empty()) problems.resize(problems.size() - 2);
  return problems;
}

// The binding with the conventions every function shares checked around each
// call: a poisoned err before, and after it the reports' form and rules, the
// status a defined one, and a failure's err filled in.
class CheckedBinding : public host::PluginBinding {
 public:
  using PluginBinding::PluginBinding;

 protected:
  void before_call(const char*, conveyor_error& err) noexcept override { err = poisoned_error(); }

  host::Reports* reports_for(const char* op) override { return &new_call_context(op); }

  void after_call(const char* op, conveyor_status code, const conveyor_error& err,
                  host::Reports* reports) override {
    if (reports != nullptr) {
      std::vector<std::string> problems = reports->problems;
      for (const JobCopy& j : reports->jobs) check_job(j, problems);
      for (const StatsCopy& st : reports->stats) check_stats(st, problems);
      for (const LimitCopy& l : reports->limits) check_limit(l, problems);
      for (const QueueCopy& q : reports->queues) check_queue(q, problems);
      for (const NotificationCopy& n : reports->notifications) check_notification(n, problems);
      for (const KeySettingCopy& k : reports->key_settings) check_key_setting(k, problems);
      for (const std::string& p : problems) ADD_FAILURE() << op << ": " << p;
      if (reports->notifications_off_caller_thread > 0)
        ADD_FAILURE() << op << " called on_notify " << reports->notifications_off_caller_thread
                      << " time(s) on another thread (storage_plugin.h: \"calling on_notify for "
                      << "each on the calling thread\")";
    }
    if (code < CONVEYOR_OK || code > CONVEYOR_E_WRONG_STATE)
      ADD_FAILURE() << op << " returned " << code << ", not a conveyor_status defined in "
                    << "storage_plugin.h";
    if (code != CONVEYOR_OK) {
      if (std::string problems = check_error(code, err); !problems.empty())
        ADD_FAILURE() << op << " returned " << status_name(code) << " but " << problems;
    }
  }
};

Handle::Handle(std::shared_ptr<const Plugin> plugin, conveyor_storage* storage)
    : plugin_(std::move(plugin)),
      table_(&plugin_->table()),
      storage_(storage),
      binding_(std::make_unique<CheckedBinding>(*table_, storage_)) {}

Handle::~Handle() { binding_->close(); }

Status Handle::migrate() { return outcome("migrate", binding_->migrate()); }

Status Handle::enqueue(const std::vector<JobSpec>& jobs, std::vector<int64_t>* ids) {
  auto r = binding_->enqueue(host::new_jobs(std::span<const JobSpec>(jobs)));
  if (ids != nullptr) *ids = std::move(r.value);
  return outcome("enqueue", r.status);
}

Status Handle::claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                     int64_t lease_expires_us, std::vector<JobCopy>* jobs) {
  auto r = binding_->claim(queue, max_jobs, lease_token, now_us, lease_expires_us);
  Status s = outcome("claim", r.status);
  if (s.ok() && r.value.out_claimed != r.value.jobs.size())
    ADD_FAILURE() << "claim set *out_claimed = " << r.value.out_claimed << " but called on_job "
                  << r.value.jobs.size() << " times (storage_plugin.h: \"on_job is called once "
                  << "per claimed job\", \"*out_claimed = number claimed\")";
  if (jobs != nullptr) *jobs = std::move(r.value.jobs);
  return s;
}

Status Handle::complete(const std::vector<conveyor_lease>& leases, int64_t now_us,
                        std::vector<conveyor_status>* results) {
  return batch("complete", binding_->complete(leases, now_us), results);
}

Status Handle::fail(conveyor_lease lease, std::string_view error_text, int64_t retry_at_us,
                    int64_t now_us) {
  return outcome("fail", binding_->fail(lease, error_text, retry_at_us, now_us));
}

Status Handle::extend_leases(const std::vector<conveyor_lease>& leases, int64_t lease_expires_us,
                             std::vector<conveyor_status>* results) {
  return batch("extend_leases", binding_->extend_leases(leases, lease_expires_us), results);
}

Status Handle::release(const std::vector<conveyor_lease>& leases, int64_t now_us,
                       std::vector<conveyor_status>* results) {
  return batch("release", binding_->release(leases, now_us), results);
}

Status Handle::rescue_expired(int64_t now_us, uint32_t max_jobs, uint32_t* rescued) {
  auto r = binding_->rescue_expired(now_us, max_jobs);
  if (rescued != nullptr) *rescued = r.value;
  return outcome("rescue_expired", r.status);
}

Status Handle::cancel(int64_t job_id, int64_t now_us) {
  return outcome("cancel", binding_->cancel(job_id, now_us));
}

Status Handle::set_queue_paused(std::string_view queue, bool paused, int64_t now_us) {
  return outcome("set_queue_paused", binding_->set_queue_paused(queue, paused, now_us));
}

Status Handle::queue_stats(int64_t now_us, std::vector<StatsCopy>* stats) {
  auto r = binding_->queue_stats(now_us);
  if (stats != nullptr) *stats = std::move(r.value);
  return outcome("queue_stats", r.status);
}

Status Handle::list_queues(std::vector<QueueCopy>* queues) {
  auto r = binding_->list_queues();
  if (queues != nullptr) *queues = std::move(r.value);
  return outcome("list_queues", r.status);
}

Status Handle::get_job(int64_t job_id, int64_t now_us, std::optional<JobCopy>* job) {
  auto r = binding_->get_job(job_id, now_us);
  Status s = outcome("get_job", r.status);
  const std::vector<JobCopy>& jobs = r.value;
  if (s.ok() && jobs.size() != 1)
    ADD_FAILURE() << "get_job(" << job_id << ") returned CONVEYOR_OK but called on_job "
                  << jobs.size() << " times (storage_plugin.h: \"Reports one job through "
                  << "on_job\")";
  if (s.ok() && jobs.size() == 1 && jobs[0].id != job_id)
    ADD_FAILURE() << "get_job(" << job_id << ") reported job " << jobs[0].id;
  if (job != nullptr) {
    job->reset();
    if (s.ok() && !r.value.empty()) *job = std::move(r.value.front());
  }
  return s;
}

Status Handle::purge_finished(int64_t finalized_before_us, uint32_t max_jobs, uint64_t* deleted) {
  auto r = binding_->purge_finished(finalized_before_us, max_jobs);
  if (deleted != nullptr) *deleted = r.value;
  return outcome("purge_finished", r.status);
}

Status Handle::set_rate_limit(std::string_view queue, double rate_per_sec, uint32_t burst,
                              int64_t now_us) {
  return outcome("set_rate_limit", binding_->set_rate_limit(queue, rate_per_sec, burst, now_us));
}

Status Handle::delete_rate_limit(std::string_view queue) {
  return outcome("delete_rate_limit", binding_->delete_rate_limit(queue));
}

Status Handle::list_rate_limits(std::vector<LimitCopy>* limits) {
  auto r = binding_->list_rate_limits();
  if (limits != nullptr) *limits = std::move(r.value);
  return outcome("list_rate_limits", r.status);
}

Status Handle::change_marker(int64_t* marker) {
  auto r = binding_->change_marker();
  if (marker != nullptr) *marker = r.value;
  return outcome("change_marker", r.status);
}

Status Handle::wait_for_notification(int64_t timeout_us, std::vector<NotificationCopy>* notes) {
  if (table_->wait_for_notification == nullptr)
    throw CallFailed("wait_for_notification is NULL in the plugin's table");
  auto r = binding_->wait_for_notification(timeout_us);
  if (notes != nullptr) *notes = std::move(r.value);
  return outcome("wait_for_notification", r.status);
}

// ---- ABI 1.1 ----

namespace {
// Per-id results (retry_jobs, delete_jobs): "per id CONVEYOR_OK, or
// CONVEYOR_E_NOT_FOUND ... or CONVEYOR_E_WRONG_STATE".
Status id_batch(const char* op, host::Result<std::vector<conveyor_status>>&& r,
                std::vector<conveyor_status>* results) {
  Status s = outcome(op, r.status);
  if (s.ok())
    for (size_t i = 0; i < r.value.size(); ++i) {
      const conveyor_status c = r.value[i];
      if (c == CONVEYOR_OK || c == CONVEYOR_E_NOT_FOUND || c == CONVEYOR_E_WRONG_STATE) continue;
      ADD_FAILURE() << op << " returned CONVEYOR_OK but results[" << i << "] is "
                    << (c == kUnwritten ? std::string("not written") : status_name(c))
                    << " (storage_plugin.h: results receives per id CONVEYOR_OK, "
                       "CONVEYOR_E_NOT_FOUND or CONVEYOR_E_WRONG_STATE)";
    }
  if (results != nullptr) *results = std::move(r.value);
  return s;
}
}  // namespace

bool Handle::has_slot(host::StorageSlot slot) const { return binding_->has_slot(slot); }

Status Handle::enqueue_v2(const std::vector<JobSpec>& jobs, int64_t now_us,
                          std::vector<int64_t>* ids) {
  auto r = binding_->enqueue_v2(host::new_jobs(std::span<const JobSpec>(jobs)), now_us);
  if (ids != nullptr) *ids = std::move(r.value);
  return outcome("enqueue_v2", r.status);
}

Status Handle::claim_kinds(std::string_view queue, const std::vector<std::string>& kinds,
                           uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                           int64_t lease_expires_us, std::vector<JobCopy>* jobs) {
  auto r = binding_->claim_kinds(queue, kinds, max_jobs, lease_token, now_us, lease_expires_us);
  Status s = outcome("claim_kinds", r.status);
  if (s.ok() && r.value.out_claimed != r.value.jobs.size())
    ADD_FAILURE() << "claim_kinds set *out_claimed = " << r.value.out_claimed
                  << " but called on_job " << r.value.jobs.size() << " times";
  if (jobs != nullptr) *jobs = std::move(r.value.jobs);
  return s;
}

Status Handle::list_jobs(std::string_view queue, const std::vector<int32_t>& states,
                         std::string_view kind, int64_t after_id, uint32_t limit, int64_t now_us,
                         std::vector<JobCopy>* jobs) {
  auto r = binding_->list_jobs(queue, states, kind, after_id, limit, now_us);
  Status s = outcome("list_jobs", r.status);
  if (s.ok() && r.value.out_listed != r.value.jobs.size())
    ADD_FAILURE() << "list_jobs set *out_listed = " << r.value.out_listed << " but called on_job "
                  << r.value.jobs.size() << " times (storage_plugin.h: \"*out_listed = number "
                  << "reported\")";
  if (jobs != nullptr) *jobs = std::move(r.value.jobs);
  return s;
}

Status Handle::retry_jobs(const std::vector<int64_t>& ids, int64_t now_us,
                          std::vector<conveyor_status>* results) {
  return id_batch("retry_jobs", binding_->retry_jobs(ids, now_us), results);
}

Status Handle::delete_jobs(const std::vector<int64_t>& ids, std::vector<conveyor_status>* results) {
  return id_batch("delete_jobs", binding_->delete_jobs(ids), results);
}

Status Handle::job_counts(int64_t now_us, std::vector<StatsCopy>* stats) {
  auto r = binding_->job_counts(now_us);
  if (stats != nullptr) *stats = std::move(r.value);
  return outcome("job_counts", r.status);
}

Status Handle::rescue_expired_v2(int64_t now_us, uint32_t max_jobs, std::vector<JobCopy>* jobs) {
  auto r = binding_->rescue_expired_v2(now_us, max_jobs);
  Status s = outcome("rescue_expired_v2", r.status);
  if (s.ok() && r.value.out_rescued != r.value.jobs.size())
    ADD_FAILURE() << "rescue_expired_v2 set *out_rescued = " << r.value.out_rescued
                  << " but called on_job " << r.value.jobs.size()
                  << " times (storage_plugin.h: \"one on_job call per rescued job\")";
  if (jobs != nullptr) *jobs = std::move(r.value.jobs);
  return s;
}

Status Handle::swap_shared_state(std::string_view key, int64_t expected_version, int64_t new_value,
                                 SharedCopy* out) {
  auto r = binding_->swap_shared_state(key, expected_version, new_value);
  Status s = outcome("swap_shared_state", r.status);
  if (s.ok()) {
    if (r.value.version == host::kUnwrittenValue || r.value.value == host::kUnwrittenValue ||
        r.value.applied == static_cast<int32_t>(host::kUnwrittenCount))
      ADD_FAILURE() << "swap_shared_state returned CONVEYOR_OK without writing *out_version, "
                    << "*out_value and *out_applied (storage_plugin.h: \"Either way *out_version "
                    << "and *out_value receive the record\")";
    else if (r.value.applied != 0 && r.value.applied != 1)
      ADD_FAILURE() << "swap_shared_state set *out_applied = " << r.value.applied << ", not 0 or 1";
  }
  if (out != nullptr) *out = SharedCopy{r.value.version, r.value.value, r.value.applied};
  return s;
}

Status Handle::add_shared_state(std::string_view key, int64_t credit, int64_t low, int64_t high,
                                int64_t unit, uint32_t min_count, uint32_t max_count,
                                SharedAddCopy* out) {
  auto r = binding_->add_shared_state(key, credit, low, high, unit, min_count, max_count);
  Status s = outcome("add_shared_state", r.status);
  if (s.ok()) {
    if (r.value.version == host::kUnwrittenValue || r.value.value == host::kUnwrittenValue ||
        r.value.count == host::kUnwrittenCount)
      ADD_FAILURE() << "add_shared_state returned CONVEYOR_OK without writing *out_version, "
                    << "*out_value and *out_count";
    else if (r.value.count != 0 && (r.value.count < min_count || r.value.count > max_count))
      ADD_FAILURE() << "add_shared_state added " << r.value.count << " units, outside min_count "
                    << min_count << " .. max_count " << max_count << " (and not 0)";
  }
  if (out != nullptr) *out = SharedAddCopy{r.value.version, r.value.value, r.value.count};
  return s;
}

Status Handle::set_rate_limit_v2(std::string_view queue, double rate_per_sec, uint32_t burst,
                                 int32_t scope, int64_t now_us) {
  return outcome("set_rate_limit_v2",
                 binding_->set_rate_limit_v2(queue, rate_per_sec, burst, scope, now_us));
}

Status Handle::enqueue_v3(const std::vector<JobSpec>& jobs, int64_t now_us,
                          std::vector<int64_t>* ids) {
  auto r = binding_->enqueue_v3(host::new_jobs_v2(std::span<const JobSpec>(jobs)), now_us);
  if (ids != nullptr) *ids = std::move(r.value);
  return outcome("enqueue_v3", r.status);
}

std::vector<JobCopy> Handle::claim_kinds_jobs(std::string_view queue,
                                              const std::vector<std::string>& kinds,
                                              uint32_t max_jobs, int64_t now_us) {
  std::vector<JobCopy> jobs;
  require_ok(
      claim_kinds(queue, kinds, max_jobs, next_lease_token(), now_us, now_us + kLease, &jobs));
  return jobs;
}

std::vector<JobCopy> Handle::list(std::string_view queue, const std::vector<int32_t>& states,
                                  std::string_view kind, int64_t after_id, uint32_t limit,
                                  int64_t now_us) {
  std::vector<JobCopy> jobs;
  require_ok(list_jobs(queue, states, kind, after_id, limit, now_us, &jobs));
  return jobs;
}

// ---- ABI 1.4 ----

Status Handle::enqueue_v4(const std::vector<JobSpec>& jobs, int64_t now_us,
                          std::vector<int64_t>* ids) {
  auto r = binding_->enqueue_v4(host::new_jobs_v3(std::span<const JobSpec>(jobs)), now_us);
  if (ids != nullptr) *ids = std::move(r.value);
  return outcome("enqueue_v4", r.status);
}

Status Handle::claim_keys(std::string_view queue, const std::vector<std::string>& kinds,
                          const std::vector<KeyClaim>& keys, int64_t lease_token, int64_t now_us,
                          int64_t lease_expires_us, std::vector<JobCopy>* jobs) {
  auto r = binding_->claim_keys(queue, kinds, keys, lease_token, now_us, lease_expires_us);
  Status s = outcome("claim_keys", r.status);
  if (s.ok() && r.value.out_claimed != r.value.jobs.size())
    ADD_FAILURE() << "claim_keys set *out_claimed = " << r.value.out_claimed
                  << " but called on_job " << r.value.jobs.size()
                  << " times (storage_plugin.h claim_keys: on_job \"once per claimed job\", "
                     "*out_claimed \"the total\")";
  if (jobs != nullptr) *jobs = std::move(r.value.jobs);
  return s;
}

Status Handle::list_ready_keys(std::string_view queue, const std::optional<std::string>& after_key,
                               uint32_t limit, uint32_t count_limit, int64_t now_us,
                               std::vector<ReadyKeyCopy>* keys) {
  auto r = binding_->list_ready_keys(queue, after_key, limit, count_limit, now_us);
  Status s = outcome("list_ready_keys", r.status);
  if (s.ok()) {
    if (r.value.out_listed != r.value.keys.size())
      ADD_FAILURE() << "list_ready_keys set *out_listed = " << r.value.out_listed
                    << " but called on_key " << r.value.keys.size()
                    << " times (storage_plugin.h: \"*out_listed = number reported\")";
    for (const ReadyKeyCopy& k : r.value.keys)
      if (k.ready > static_cast<int64_t>(count_limit))
        ADD_FAILURE() << "list_ready_keys reported key \"" << k.key << "\" with ready = " << k.ready
                      << ", above count_limit " << count_limit
                      << " (storage_plugin.h conveyor_ready_key.ready: \"min(ready jobs, "
                         "count_limit)\")";
  }
  if (keys != nullptr) *keys = std::move(r.value.keys);
  return s;
}

// ---- ABI 1.6 ----

Status Handle::enqueue_v5(const std::vector<JobSpec>& jobs, int64_t now_us,
                          std::vector<int64_t>* ids) {
  auto r = binding_->enqueue_v5(host::new_jobs_v4(std::span<const JobSpec>(jobs)), now_us);
  if (ids != nullptr) *ids = std::move(r.value);
  return outcome("enqueue_v5", r.status);
}

std::vector<int64_t> Handle::add_timed(const std::vector<JobSpec>& jobs) {
  std::vector<int64_t> ids;
  require_ok(enqueue_v5(jobs, kT0, &ids));
  return ids;
}

std::vector<int64_t> Handle::add_keyed(const std::vector<JobSpec>& jobs) {
  std::vector<int64_t> ids;
  require_ok(enqueue_v4(jobs, kT0, &ids));
  return ids;
}

std::vector<JobCopy> Handle::claim_keys_jobs(std::string_view queue,
                                             const std::vector<std::string>& kinds,
                                             const std::vector<KeyClaim>& keys, int64_t now_us) {
  std::vector<JobCopy> jobs;
  require_ok(claim_keys(queue, kinds, keys, next_lease_token(), now_us, now_us + kLease, &jobs));
  return jobs;
}

std::vector<ReadyKeyCopy> Handle::ready_keys(std::string_view queue,
                                             const std::optional<std::string>& after_key,
                                             uint32_t limit, uint32_t count_limit, int64_t now_us) {
  std::vector<ReadyKeyCopy> keys;
  require_ok(list_ready_keys(queue, after_key, limit, count_limit, now_us, &keys));
  return keys;
}

// ---- ABI 1.5 ----

Status Handle::set_key_setting(const conveyor_key_setting& setting, int64_t now_us) {
  return outcome("set_key_setting", binding_->set_key_setting(setting, now_us));
}

Status Handle::set_key_setting(const KeySettingCopy& setting, int64_t now_us) {
  return set_key_setting(setting.view(), now_us);
}

Status Handle::delete_key_setting(std::string_view queue, int32_t target, std::string_view key,
                                  uint32_t fields, int32_t* cleared) {
  auto r = binding_->delete_key_setting(queue, target, key, fields);
  Status s = outcome("delete_key_setting", r.status);
  if (s.ok() && r.value != 0 && r.value != 1)
    ADD_FAILURE() << "delete_key_setting returned CONVEYOR_OK but *out_cleared is "
                  << (r.value == kUnwritten ? std::string("not written") : std::to_string(r.value))
                  << " (storage_plugin.h delete_key_setting: \"*out_cleared = 1 when any of those "
                     "fields was set ..., else 0\")";
  if (cleared != nullptr) *cleared = r.value;
  return s;
}

Status Handle::list_key_settings(std::vector<KeySettingCopy>* settings) {
  auto r = binding_->list_key_settings();
  if (settings != nullptr) *settings = std::move(r.value);
  return outcome("list_key_settings", r.status);
}

Status Handle::delete_shared_states(std::string_view prefix, int64_t value_below, uint32_t limit,
                                    uint32_t* deleted) {
  auto r = binding_->delete_shared_states(prefix, value_below, limit);
  Status s = outcome("delete_shared_states", r.status);
  if (s.ok() && r.value == host::kUnwrittenCount)
    ADD_FAILURE() << "delete_shared_states returned CONVEYOR_OK without writing *out_deleted";
  else if (s.ok() && r.value > limit)
    ADD_FAILURE() << "delete_shared_states set *out_deleted = " << r.value << " with limit "
                  << limit << " (storage_plugin.h: \"Deletes up to limit shared records\")";
  if (deleted != nullptr) *deleted = r.value;
  return s;
}

Status Handle::add_shared_states(const std::vector<KeyedAdd>& adds,
                                 std::vector<SharedAddCopy>* out) {
  auto r = binding_->add_shared_states(std::span<const KeyedAdd>(adds));
  Status s = outcome("add_shared_states", r.status);
  if (s.ok()) {
    for (size_t i = 0; i < adds.size() && i < r.value.size(); ++i) {
      const host::PluginBinding::SharedAdded& o = r.value[i];
      const KeyedAdd& a = adds[i];
      if (o.version == host::kUnwrittenValue || o.value == host::kUnwrittenValue ||
          o.count == host::kUnwrittenCount)
        ADD_FAILURE() << "add_shared_states returned CONVEYOR_OK without writing out[" << i
                      << "] (key \"" << a.key << "\") (storage_plugin.h: \"out[i] ... receives "
                      << "its out-parameters\")";
      else if (o.count != 0 && (o.count < a.min_count || o.count > a.max_count))
        ADD_FAILURE() << "add_shared_states: out[" << i << "] (key \"" << a.key << "\") added "
                      << o.count << " units, outside min_count " << a.min_count << " .. max_count "
                      << a.max_count << " (and not 0)";
    }
  }
  if (out != nullptr) {
    out->clear();
    for (const host::PluginBinding::SharedAdded& o : r.value)
      out->push_back(SharedAddCopy{o.version, o.value, o.count});
  }
  return s;
}

void Handle::set_key(const KeySettingCopy& setting, int64_t now_us) {
  require_ok(set_key_setting(setting, now_us));
}

int32_t Handle::clear_key(std::string_view queue, int32_t target, std::string_view key,
                          uint32_t fields) {
  int32_t cleared = 0;
  require_ok(delete_key_setting(queue, target, key, fields, &cleared));
  return cleared;
}

std::vector<KeySettingCopy> Handle::key_settings() {
  std::vector<KeySettingCopy> settings;
  require_ok(list_key_settings(&settings));
  return settings;
}

uint32_t Handle::forget_shared(std::string_view prefix, int64_t value_below, uint32_t limit) {
  uint32_t deleted = 0;
  require_ok(delete_shared_states(prefix, value_below, limit, &deleted));
  return deleted;
}

std::vector<SharedAddCopy> Handle::add_many(const std::vector<KeyedAdd>& adds) {
  std::vector<SharedAddCopy> out;
  require_ok(add_shared_states(adds, &out));
  return out;
}

std::vector<conveyor_status> Handle::retry(const std::vector<int64_t>& ids, int64_t now_us) {
  std::vector<conveyor_status> r;
  require_ok(retry_jobs(ids, now_us, &r));
  return r;
}

std::vector<conveyor_status> Handle::remove(const std::vector<int64_t>& ids) {
  std::vector<conveyor_status> r;
  require_ok(delete_jobs(ids, &r));
  return r;
}

std::vector<StatsCopy> Handle::counts(int64_t now_us) {
  std::vector<StatsCopy> s;
  require_ok(job_counts(now_us, &s));
  return s;
}

SharedCopy Handle::shared(std::string_view key) {
  SharedCopy out;
  require_ok(swap_shared_state(key, -1, 0, &out));
  return out;
}

std::vector<int64_t> Handle::add_costed(const std::vector<JobSpec>& jobs) {
  std::vector<int64_t> ids;
  require_ok(enqueue_v3(jobs, kT0, &ids));
  return ids;
}

// ---- must succeed ----

int64_t Handle::add(const JobSpec& job) { return add_all({job}).at(0); }

std::vector<int64_t> Handle::add_all(const std::vector<JobSpec>& jobs) {
  std::vector<int64_t> ids;
  require_ok(enqueue(jobs, &ids));
  return ids;
}

std::vector<JobCopy> Handle::claim_jobs(std::string_view queue, uint32_t max_jobs, int64_t now_us) {
  std::vector<JobCopy> jobs;
  require_ok(claim(queue, max_jobs, next_lease_token(), now_us, now_us + kLease, &jobs));
  return jobs;
}

JobCopy Handle::claim_one(std::string_view queue, int64_t now_us) {
  std::vector<JobCopy> jobs = claim_jobs(queue, 1, now_us);
  if (jobs.size() != 1)
    throw CallFailed("claim(queue '" + std::string(queue) + "', max_jobs 1) claimed " +
                     std::to_string(jobs.size()) + " jobs where one ready job was expected");
  return jobs[0];
}

JobCopy Handle::job(int64_t job_id, int64_t now_us) {
  std::optional<JobCopy> j;
  require_ok(get_job(job_id, now_us, &j));
  if (!j) throw CallFailed("get_job(" + std::to_string(job_id) + ") reported no job");
  return *j;
}

std::vector<conveyor_status> Handle::complete_all(const std::vector<conveyor_lease>& leases,
                                                  int64_t now_us) {
  std::vector<conveyor_status> results;
  require_ok(complete(leases, now_us, &results));
  return results;
}

void Handle::complete_one(conveyor_lease lease, int64_t now_us) {
  std::vector<conveyor_status> r = complete_all({lease}, now_us);
  if (r.at(0) != CONVEYOR_OK)
    throw CallFailed("complete of job " + std::to_string(lease.job_id) +
                     " under its current "
                     "lease gave " +
                     status_name(r[0]) + " where CONVEYOR_OK was required");
}

uint32_t Handle::rescue(int64_t now_us, uint32_t max_jobs) {
  uint32_t n = 0;
  require_ok(rescue_expired(now_us, max_jobs, &n));
  return n;
}

void Handle::pause(std::string_view queue, bool paused, int64_t now_us) {
  require_ok(set_queue_paused(queue, paused, now_us));
}

std::vector<StatsCopy> Handle::stats(int64_t now_us) {
  std::vector<StatsCopy> s;
  require_ok(queue_stats(now_us, &s));
  return s;
}

std::optional<StatsCopy> Handle::stats_of(std::string_view queue, int64_t now_us) {
  for (StatsCopy& s : stats(now_us))
    if (s.queue == queue) return s;
  return std::nullopt;
}

std::vector<QueueCopy> Handle::queues() {
  std::vector<QueueCopy> q;
  require_ok(list_queues(&q));
  return q;
}

std::vector<LimitCopy> Handle::limits() {
  std::vector<LimitCopy> l;
  require_ok(list_rate_limits(&l));
  return l;
}

int64_t Handle::marker() {
  int64_t m = 0;
  require_ok(change_marker(&m));
  return m;
}

uint64_t Handle::purge(int64_t finalized_before_us, uint32_t max_jobs) {
  uint64_t n = 0;
  require_ok(purge_finished(finalized_before_us, max_jobs, &n));
  return n;
}

}  // namespace conveyor::conformance
