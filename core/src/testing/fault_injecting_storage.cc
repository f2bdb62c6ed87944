#include "testing/fault_injecting_storage.hpp"

#include <fmt/format.h>
#include <unistd.h>

namespace conveyor::testing {

const char* to_string(StorageOp op) noexcept {
  switch (op) {
    case StorageOp::kEnqueue:
      return "enqueue";
    case StorageOp::kClaim:
      return "claim";
    case StorageOp::kComplete:
      return "complete";
    case StorageOp::kFail:
      return "fail";
    case StorageOp::kExtendLeases:
      return "extend_leases";
    case StorageOp::kRelease:
      return "release";
    case StorageOp::kRescueExpired:
      return "rescue_expired";
    case StorageOp::kCancel:
      return "cancel";
    case StorageOp::kSetQueuePaused:
      return "set_queue_paused";
    case StorageOp::kQueueStats:
      return "queue_stats";
    case StorageOp::kListQueues:
      return "list_queues";
    case StorageOp::kGetJob:
      return "get_job";
    case StorageOp::kPurgeFinished:
      return "purge_finished";
    case StorageOp::kSetRateLimit:
      return "set_rate_limit";
    case StorageOp::kDeleteRateLimit:
      return "delete_rate_limit";
    case StorageOp::kListRateLimits:
      return "list_rate_limits";
    case StorageOp::kChangeMarker:
      return "change_marker";
    case StorageOp::kWaitForNotification:
      return "wait_for_notification";
    case StorageOp::kClaimKinds:
      return "claim_kinds";
    case StorageOp::kListJobs:
      return "list_jobs";
    case StorageOp::kRetryJobs:
      return "retry_jobs";
    case StorageOp::kDeleteJobs:
      return "delete_jobs";
    case StorageOp::kJobCounts:
      return "job_counts";
    case StorageOp::kSwapSharedState:
      return "swap_shared_state";
    case StorageOp::kAddSharedState:
      return "add_shared_state";
    case StorageOp::kClaimKeys:
      return "claim_keys";
    case StorageOp::kListReadyKeys:
      return "list_ready_keys";
    case StorageOp::kSetKeySetting:
      return "set_key_setting";
    case StorageOp::kDeleteKeySetting:
      return "delete_key_setting";
    case StorageOp::kListKeySettings:
      return "list_key_settings";
    case StorageOp::kDeleteSharedStates:
      return "delete_shared_states";
    case StorageOp::kAddSharedStates:
      return "add_shared_states";
  }
  return "unknown";
}

namespace {
size_t index(StorageOp op) { return static_cast<size_t>(op); }
}  // namespace

FaultInjectingStorage::FaultInjectingStorage(std::shared_ptr<Storage> inner)
    : inner_(std::move(inner)) {}

void FaultInjectingStorage::fail_next(StorageOp op, uint32_t n, conveyor_status status) {
  if (n == 0) return;
  std::lock_guard lock(mu_);
  ops_[index(op)].fail.push_back(Failure{n, status});
}

void FaultInjectingStorage::drop_reply_next(StorageOp op, uint32_t n) {
  std::lock_guard lock(mu_);
  ops_[index(op)].drop_reply += n;
}

void FaultInjectingStorage::set_hook(StorageOp op, Hook hook) {
  std::lock_guard lock(mu_);
  ops_[index(op)].hook = std::move(hook);
}

void FaultInjectingStorage::set_claim_hook(QueueHook hook) {
  std::lock_guard lock(mu_);
  claim_hook_ = std::move(hook);
}

void FaultInjectingStorage::run_claim_hook(std::string_view queue) {
  QueueHook hook;
  {
    std::lock_guard lock(mu_);
    hook = claim_hook_;
  }
  if (hook) hook(queue);  // outside the lock: it may block
}

void FaultInjectingStorage::lose_lease(conveyor_lease lease) {
  std::lock_guard lock(mu_);
  lost_leases_.insert({lease.job_id, lease.lease_token});
}

void FaultInjectingStorage::lose_all_leases(bool lost) {
  std::lock_guard lock(mu_);
  lose_all_ = lost;
}

void FaultInjectingStorage::clear_faults() {
  std::lock_guard lock(mu_);
  for (auto& o : ops_) o = OpFaults{};
  claim_hook_ = nullptr;
  lost_leases_.clear();
  lose_all_ = false;
}

uint64_t FaultInjectingStorage::calls(StorageOp op) const { return calls_[index(op)].load(); }
uint64_t FaultInjectingStorage::faults(StorageOp op) const { return faults_[index(op)].load(); }

bool FaultInjectingStorage::before(StorageOp op) {
  calls_[index(op)].fetch_add(1);
  Hook hook;
  {
    std::lock_guard lock(mu_);
    hook = ops_[index(op)].hook;
  }
  // Outside the lock: a hook may block until the test releases it.
  if (hook) hook();
  std::lock_guard lock(mu_);
  OpFaults& f = ops_[index(op)];
  if (!f.fail.empty()) {
    const conveyor_status status = f.fail.front().status;
    if (--f.fail.front().count == 0) f.fail.erase(f.fail.begin());
    faults_[index(op)].fetch_add(1);
    throw StorageError(
        status, fmt::format("injected fault: {} failed with status {}", to_string(op), status));
  }
  if (f.drop_reply > 0) {
    --f.drop_reply;
    faults_[index(op)].fetch_add(1);
    return true;
  }
  return false;
}

void FaultInjectingStorage::set_after_hook(StorageOp op, Hook hook) {
  std::lock_guard lock(mu_);
  ops_[index(op)].after_hook = std::move(hook);
}

void FaultInjectingStorage::after(StorageOp op, bool drop) {
  Hook hook;
  {
    std::lock_guard lock(mu_);
    hook = ops_[index(op)].after_hook;
  }
  if (hook) hook();  // outside the lock, as before()'s
  if (drop) reply_lost(op);
}

void FaultInjectingStorage::reply_lost(StorageOp op) const {
  throw StorageError(CONVEYOR_E_UNAVAILABLE,
                     fmt::format("injected fault: {} was applied but its reply was lost "
                                 "(connection closed)",
                                 to_string(op)));
}

bool FaultInjectingStorage::lost(const conveyor_lease& lease) const {
  return lose_all_ || lost_leases_.count({lease.job_id, lease.lease_token}) != 0;
}

void FaultInjectingStorage::fail_batches_over(StorageOp op, size_t n) {
  std::lock_guard lock(mu_);
  ops_[index(op)].max_batch = n;
}

template <typename Call>
std::vector<conveyor_status> FaultInjectingStorage::per_lease(
    StorageOp op, std::span<const conveyor_lease> leases, Call&& call) {
  const bool drop = before(op);
  {
    std::lock_guard lock(mu_);
    if (const size_t max = ops_[index(op)].max_batch; max > 0 && leases.size() > max) {
      faults_[index(op)].fetch_add(1);
      throw StorageError(CONVEYOR_E_UNAVAILABLE,
                         fmt::format("injected fault: {} of {} leases cancelled by "
                                     "statement_timeout (more than {})",
                                     to_string(op), leases.size(), max));
    }
  }
  std::vector<conveyor_status> out(leases.size(), CONVEYOR_E_LEASE_LOST);
  std::vector<conveyor_lease> kept;
  std::vector<size_t> kept_at;
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < leases.size(); ++i) {
      if (lost(leases[i])) continue;
      kept.push_back(leases[i]);
      kept_at.push_back(i);
    }
  }
  if (kept.size() < leases.size()) faults_[index(op)].fetch_add(1);
  if (!kept.empty()) {
    std::vector<conveyor_status> r = call(std::span<const conveyor_lease>(kept));
    for (size_t j = 0; j < kept.size(); ++j) out[kept_at[j]] = r.at(j);
  }
  after(op, drop);
  return out;
}

std::vector<int64_t> FaultInjectingStorage::enqueue(std::span<const NewJob> jobs, int64_t now_us) {
  const bool drop = before(StorageOp::kEnqueue);
  auto r = inner_->enqueue(jobs, now_us);
  after(StorageOp::kEnqueue, drop);
  return r;
}

std::vector<Job> FaultInjectingStorage::claim(std::string_view queue, uint32_t max_jobs,
                                              int64_t lease_token, int64_t now_us,
                                              int64_t lease_expires_us) {
  const bool drop = before(StorageOp::kClaim);
  run_claim_hook(queue);
  auto r = inner_->claim(queue, max_jobs, lease_token, now_us, lease_expires_us);
  after(StorageOp::kClaim, drop);
  return r;
}

std::vector<conveyor_status> FaultInjectingStorage::complete(std::span<const conveyor_lease> leases,
                                                             int64_t now_us) {
  return per_lease(StorageOp::kComplete, leases,
                   [&](std::span<const conveyor_lease> l) { return inner_->complete(l, now_us); });
}

conveyor_status FaultInjectingStorage::fail(conveyor_lease lease, std::string_view error_text,
                                            int64_t retry_at_us, int64_t now_us) {
  auto r = per_lease(
      StorageOp::kFail, std::span<const conveyor_lease>(&lease, 1),
      [&](std::span<const conveyor_lease> l) {
        return std::vector<conveyor_status>{inner_->fail(l[0], error_text, retry_at_us, now_us)};
      });
  return r[0];
}

std::vector<conveyor_status> FaultInjectingStorage::extend_leases(
    std::span<const conveyor_lease> leases, int64_t lease_expires_us) {
  return per_lease(StorageOp::kExtendLeases, leases, [&](std::span<const conveyor_lease> l) {
    return inner_->extend_leases(l, lease_expires_us);
  });
}

std::vector<conveyor_status> FaultInjectingStorage::release(std::span<const conveyor_lease> leases,
                                                            int64_t now_us) {
  return per_lease(StorageOp::kRelease, leases,
                   [&](std::span<const conveyor_lease> l) { return inner_->release(l, now_us); });
}

Storage::Rescued FaultInjectingStorage::rescue_expired(int64_t now_us, uint32_t max_jobs) {
  const bool drop = before(StorageOp::kRescueExpired);
  auto r = inner_->rescue_expired(now_us, max_jobs);
  after(StorageOp::kRescueExpired, drop);
  return r;
}

bool FaultInjectingStorage::cancel(int64_t job_id, int64_t now_us) {
  const bool drop = before(StorageOp::kCancel);
  auto r = inner_->cancel(job_id, now_us);
  after(StorageOp::kCancel, drop);
  return r;
}

void FaultInjectingStorage::set_queue_paused(std::string_view queue, bool paused, int64_t now_us) {
  const bool drop = before(StorageOp::kSetQueuePaused);
  inner_->set_queue_paused(queue, paused, now_us);
  after(StorageOp::kSetQueuePaused, drop);
}

std::vector<QueueStats> FaultInjectingStorage::queue_stats(int64_t now_us) {
  const bool drop = before(StorageOp::kQueueStats);
  auto r = inner_->queue_stats(now_us);
  after(StorageOp::kQueueStats, drop);
  return r;
}

std::vector<std::pair<std::string, bool>> FaultInjectingStorage::list_queues() {
  const bool drop = before(StorageOp::kListQueues);
  auto r = inner_->list_queues();
  after(StorageOp::kListQueues, drop);
  return r;
}

std::optional<Job> FaultInjectingStorage::get_job(int64_t job_id, int64_t now_us) {
  const bool drop = before(StorageOp::kGetJob);
  auto r = inner_->get_job(job_id, now_us);
  after(StorageOp::kGetJob, drop);
  return r;
}

uint64_t FaultInjectingStorage::purge_finished(int64_t finalized_before_us, uint32_t max_jobs) {
  const bool drop = before(StorageOp::kPurgeFinished);
  auto r = inner_->purge_finished(finalized_before_us, max_jobs);
  after(StorageOp::kPurgeFinished, drop);
  return r;
}

void FaultInjectingStorage::set_rate_limit(std::string_view queue, const RateLimit& limit,
                                           int64_t now_us) {
  const bool drop = before(StorageOp::kSetRateLimit);
  inner_->set_rate_limit(queue, limit, now_us);
  after(StorageOp::kSetRateLimit, drop);
}

bool FaultInjectingStorage::delete_rate_limit(std::string_view queue) {
  const bool drop = before(StorageOp::kDeleteRateLimit);
  auto r = inner_->delete_rate_limit(queue);
  after(StorageOp::kDeleteRateLimit, drop);
  return r;
}

std::vector<RateLimitOverride> FaultInjectingStorage::list_rate_limits() {
  const bool drop = before(StorageOp::kListRateLimits);
  auto r = inner_->list_rate_limits();
  after(StorageOp::kListRateLimits, drop);
  return r;
}

int64_t FaultInjectingStorage::change_marker() {
  const bool drop = before(StorageOp::kChangeMarker);
  auto r = inner_->change_marker();
  after(StorageOp::kChangeMarker, drop);
  return r;
}

void FaultInjectingStorage::wait_for_notification(
    int64_t timeout_us, const std::function<void(int32_t kind, std::string_view queue)>& fn) {
  const bool drop = before(StorageOp::kWaitForNotification);
  inner_->wait_for_notification(timeout_us, fn);
  after(StorageOp::kWaitForNotification, drop);
}

std::shared_ptr<Storage> open_memory_storage() {
  // Handles with the same name share one store in the process: a fresh name
  // per call keeps tests apart.
  static std::atomic<uint64_t> next{0};
  const std::string name = fmt::format("test-{}-{}", ::getpid(), next.fetch_add(1));
  return Storage::open(load_plugin(CONVEYOR_TEST_MEMORY_PLUGIN), {{"name", name}});
}

std::vector<Job> FaultInjectingStorage::claim_kinds(std::string_view queue,
                                                    std::span<const std::string> kinds,
                                                    uint32_t max_jobs, int64_t lease_token,
                                                    int64_t now_us, int64_t lease_expires_us) {
  const bool drop = before(StorageOp::kClaimKinds);
  run_claim_hook(queue);
  auto r = inner_->claim_kinds(queue, kinds, max_jobs, lease_token, now_us, lease_expires_us);
  after(StorageOp::kClaimKinds, drop);
  return r;
}

std::vector<Job> FaultInjectingStorage::list_jobs(const JobQuery& query, int64_t now_us) {
  const bool drop = before(StorageOp::kListJobs);
  auto r = inner_->list_jobs(query, now_us);
  after(StorageOp::kListJobs, drop);
  return r;
}

std::vector<conveyor_status> FaultInjectingStorage::retry_jobs(std::span<const int64_t> ids,
                                                               int64_t now_us) {
  const bool drop = before(StorageOp::kRetryJobs);
  auto r = inner_->retry_jobs(ids, now_us);
  after(StorageOp::kRetryJobs, drop);
  return r;
}

std::vector<conveyor_status> FaultInjectingStorage::delete_jobs(std::span<const int64_t> ids) {
  const bool drop = before(StorageOp::kDeleteJobs);
  auto r = inner_->delete_jobs(ids);
  after(StorageOp::kDeleteJobs, drop);
  return r;
}

std::vector<QueueStats> FaultInjectingStorage::job_counts(int64_t now_us) {
  const bool drop = before(StorageOp::kJobCounts);
  auto r = inner_->job_counts(now_us);
  after(StorageOp::kJobCounts, drop);
  return r;
}

Storage::SharedRecord FaultInjectingStorage::swap_shared_state(std::string_view key,
                                                               int64_t expected_version,
                                                               int64_t new_value) {
  const bool drop = before(StorageOp::kSwapSharedState);
  auto r = inner_->swap_shared_state(key, expected_version, new_value);
  after(StorageOp::kSwapSharedState, drop);
  return r;
}

void FaultInjectingStorage::hide_slot(StorageSlot slot) {
  std::lock_guard lock(mu_);
  hidden_slots_.insert(slot);
}

bool FaultInjectingStorage::has_slot(StorageSlot slot) const {
  {
    std::lock_guard lock(mu_);
    if (hidden_slots_.count(slot) != 0) return false;
  }
  return inner_->has_slot(slot);
}

Storage::SharedAdded FaultInjectingStorage::add_shared_state(std::string_view key,
                                                             const SharedAdd& add) {
  const bool drop = before(StorageOp::kAddSharedState);
  auto r = inner_->add_shared_state(key, add);
  after(StorageOp::kAddSharedState, drop);
  return r;
}

std::vector<Job> FaultInjectingStorage::claim_keys(std::string_view queue,
                                                   std::span<const std::string> kinds,
                                                   std::span<const KeyClaim> keys,
                                                   int64_t lease_token, int64_t now_us,
                                                   int64_t lease_expires_us) {
  const bool drop = before(StorageOp::kClaimKeys);
  run_claim_hook(queue);
  auto r = inner_->claim_keys(queue, kinds, keys, lease_token, now_us, lease_expires_us);
  after(StorageOp::kClaimKeys, drop);
  return r;
}

std::vector<Storage::ReadyKey> FaultInjectingStorage::list_ready_keys(
    std::string_view queue, const std::optional<std::string>& after_key, uint32_t limit,
    uint32_t count_limit, int64_t now_us) {
  const bool drop = before(StorageOp::kListReadyKeys);
  auto r = inner_->list_ready_keys(queue, after_key, limit, count_limit, now_us);
  after(StorageOp::kListReadyKeys, drop);
  return r;
}

void FaultInjectingStorage::set_key_setting(const KeyOverride& setting, int64_t now_us) {
  const bool drop = before(StorageOp::kSetKeySetting);
  inner_->set_key_setting(setting, now_us);
  after(StorageOp::kSetKeySetting, drop);
}

bool FaultInjectingStorage::delete_key_setting(std::string_view queue,
                                               const std::optional<std::string>& key, bool limit,
                                               bool weight) {
  const bool drop = before(StorageOp::kDeleteKeySetting);
  const bool r = inner_->delete_key_setting(queue, key, limit, weight);
  after(StorageOp::kDeleteKeySetting, drop);
  return r;
}

std::vector<KeyOverride> FaultInjectingStorage::list_key_settings() {
  const bool drop = before(StorageOp::kListKeySettings);
  auto r = inner_->list_key_settings();
  after(StorageOp::kListKeySettings, drop);
  return r;
}

uint32_t FaultInjectingStorage::delete_shared_states(std::string_view prefix, int64_t value_below,
                                                     uint32_t limit) {
  const bool drop = before(StorageOp::kDeleteSharedStates);
  const uint32_t r = inner_->delete_shared_states(prefix, value_below, limit);
  after(StorageOp::kDeleteSharedStates, drop);
  return r;
}

std::vector<Storage::SharedAdded> FaultInjectingStorage::add_shared_states(
    std::span<const KeyedAdd> adds) {
  const bool drop = before(StorageOp::kAddSharedStates);
  auto r = inner_->add_shared_states(adds);
  after(StorageOp::kAddSharedStates, drop);
  return r;
}

}  // namespace conveyor::testing
