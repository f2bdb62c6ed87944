#include "conveyor/host/plugin_binding.hpp"

#include <cstddef>
#include <cstring>
#include <exception>
#include <type_traits>

namespace conveyor::host {
namespace {

// Copies a plugin string; "data may be NULL only when len is 0".
std::string copy_str(conveyor_str s, const char* what, std::vector<std::string>& problems) {
  if (s.len == 0) return {};
  if (s.data == nullptr) {
    problems.push_back(std::string(what) + " has data NULL with len " + std::to_string(s.len) +
                       " (storage_plugin.h: \"data may be NULL only when len is 0\")");
    return {};
  }
  return std::string(s.data, s.len);
}

// Reads a reported struct whose first member is struct_size: only the part the
// plugin says it wrote, the rest zero. Reporting a struct smaller than ABI 1.0
// defines is itself a violation (every 1.0 field exists in every plugin).
// v1_0_size: the struct's size in ABI 1.0, the least a plugin may report.
// A larger struct_size below sizeof(T) is a plugin built against an older
// minor: its fields are copied and the newer ones stay zero.
template <typename T>
T read_sized(const T* reported, const char* what, std::vector<std::string>& problems,
             size_t v1_0_size = sizeof(T)) {
  static_assert(std::is_trivially_copyable_v<T>);
  T copy;
  std::memset(&copy, 0, sizeof copy);
  uint32_t size = 0;
  std::memcpy(&size, reported, sizeof size);
  if (size < v1_0_size) {
    problems.push_back(std::string(what) + ".struct_size is " + std::to_string(size) +
                       ", smaller than sizeof(" + what + ") = " + std::to_string(v1_0_size) +
                       " in ABI 1.0 (storage_plugin.h rule 5: set struct_size = sizeof as built)");
    std::memcpy(&copy, reported, size < sizeof size ? sizeof size : size);
  } else {
    std::memcpy(&copy, reported, size < sizeof copy ? size : sizeof copy);
  }
  return copy;
}

std::string message_of(const conveyor_error& err) {
  const void* nul = std::memchr(err.message, '\0', sizeof err.message);
  return nul != nullptr ? std::string(err.message) : std::string(err.message, sizeof err.message);
}

conveyor_str cstr(std::string_view s) { return conveyor_str{s.data(), s.size()}; }

template <typename T>
const T* data_or_null(std::span<const T> items) {
  return items.empty() ? nullptr : items.data();
}

// A take for run_reporting: moves one kind of copies out of the reports.
template <typename T>
auto moving(std::vector<T> Reports::*field, std::vector<T>& into) {
  return [field, &into](Reports& rep) {
    into = std::move(rep.*field);
    (rep.*field).clear();
  };
}

// Callbacks run inside plugin code, possibly C: nothing may leave them.
// Runs at the start of each: a callback after its call returned is reported.
Reports& enter(void* ctx) noexcept {
  auto& r = *static_cast<Reports*>(ctx);
  if (!r.in_call.load()) r.late_callback();
  return r;
}

template <typename Body>
void guarded(Reports& r, Body&& body) noexcept {
  try {
    std::lock_guard lock(r.mu);
    try {
      body();
    } catch (const std::exception& e) {
      r.problems.push_back(std::string("copying a report failed: ") + e.what());
    }
  } catch (...) {
    // Out of memory even for the problem, or the lock failed: nothing more
    // can be recorded, and nothing may be thrown into the plugin.
  }
}

void on_job(void* ctx, const conveyor_job* job) {
  Reports& r = enter(ctx);
  guarded(r, [&] { r.jobs.push_back(copy_job(job, r.problems)); });
}

void on_ready_key(void* ctx, const conveyor_ready_key* key) {
  Reports& r = enter(ctx);
  guarded(r, [&] { r.ready_keys.push_back(copy_ready_key(key, r.problems)); });
}

void on_key_setting(void* ctx, const conveyor_key_setting* setting) {
  Reports& r = enter(ctx);
  guarded(r, [&] { r.key_settings.push_back(copy_key_setting(setting, r.problems)); });
}

void on_stats(void* ctx, const conveyor_queue_stats* stats) {
  Reports& r = enter(ctx);
  guarded(r, [&] { r.stats.push_back(copy_stats(stats, r.problems)); });
}

void on_limit(void* ctx, const conveyor_rate_limit* limit) {
  Reports& r = enter(ctx);
  guarded(r, [&] { r.limits.push_back(copy_limit(limit, r.problems)); });
}

void on_queue(void* ctx, conveyor_str queue, int32_t paused) {
  Reports& r = enter(ctx);
  guarded(r, [&] {
    r.queues.push_back(QueueCopy{copy_str(queue, "list_queues queue", r.problems), paused});
  });
}

void on_notify(void* ctx, int32_t kind, conveyor_str queue) {
  Reports& r = enter(ctx);
  NotificationCopy note;
  guarded(r, [&] {
    if (std::this_thread::get_id() != r.caller) ++r.notifications_off_caller_thread;
    note = NotificationCopy{kind, copy_str(queue, "notification queue", r.problems)};
    r.notifications.push_back(note);
  });
  if (!r.on_notification) return;
  // Outside the lock: the handler is the caller's code.
  std::string failure;
  try {
    r.on_notification(note.kind, note.queue);
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  if (!failure.empty())
    guarded(r, [&] { r.problems.push_back("the notification handler failed: " + failure); });
}

}  // namespace

JobCopy copy_job(const conveyor_job* reported, std::vector<std::string>& problems) {
  if (reported == nullptr) {
    problems.push_back("on_job was called with a NULL job");
    return {};
  }
  const conveyor_job j =
      read_sized(reported, "conveyor_job", problems, offsetof(conveyor_job, cost));
  JobCopy c;
  c.struct_size = j.struct_size;
  c.state = j.state;
  c.id = j.id;
  c.queue = copy_str(j.queue, "conveyor_job.queue", problems);
  c.kind = copy_str(j.kind, "conveyor_job.kind", problems);
  c.payload = copy_str(j.payload, "conveyor_job.payload", problems);
  c.priority = j.priority;
  c.attempt = j.attempt;
  c.max_attempts = j.max_attempts;
  c.reserved0 = j.reserved0;
  c.run_at = j.run_at_us;
  c.created_at = j.created_at_us;
  c.finalized_at = j.finalized_at_us;
  c.lease_token = j.lease_token;
  c.lease_expires = j.lease_expires_us;
  c.last_error = copy_str(j.last_error, "conveyor_job.last_error", problems);
  // ABI 1.2: cost only when struct_size covers it. A plugin built with the
  // 1.2 header that leaves it zero (it has no enqueue_v3) means 1.
  const bool covers_cost = j.struct_size >= offsetof(conveyor_job, cost) + sizeof j.cost;
  c.cost = covers_cost && j.cost > 0 ? j.cost : 1;
  // ABI 1.4: key only when struct_size covers it (else the empty key).
  if (j.struct_size >= offsetof(conveyor_job, key) + sizeof j.key)
    c.key = copy_str(j.key, "conveyor_job.key", problems);
  // ABI 1.6: started_at and timeout only when struct_size covers both (else 0).
  if (j.struct_size >= offsetof(conveyor_job, timeout_ms) + sizeof j.timeout_ms) {
    c.started_at = j.started_at_us;
    c.timeout_ms = j.timeout_ms;
  }
  return c;
}

ReadyKeyCopy copy_ready_key(const conveyor_ready_key* reported,
                            std::vector<std::string>& problems) {
  if (reported == nullptr) {
    problems.push_back("on_key was called with a NULL key");
    return {};
  }
  const conveyor_ready_key k =
      read_sized(reported, "conveyor_ready_key", problems, offsetof(conveyor_ready_key, ready));
  ReadyKeyCopy c;
  c.key = copy_str(k.key, "conveyor_ready_key.key", problems);
  c.ready = k.ready;
  if (k.ready < 1)
    problems.push_back("conveyor_ready_key.ready is " + std::to_string(k.ready) + " for key \"" +
                       c.key + "\"; a listed key has at least 1 ready job");
  return c;
}

KeySettingCopy copy_key_setting(const conveyor_key_setting* reported,
                                std::vector<std::string>& problems) {
  if (reported == nullptr) {
    problems.push_back("on_setting was called with a NULL setting");
    return {};
  }
  const conveyor_key_setting k =
      read_sized(reported, "conveyor_key_setting", problems, sizeof(conveyor_key_setting));
  KeySettingCopy c;
  c.queue = copy_str(k.queue, "conveyor_key_setting.queue", problems);
  c.key = copy_str(k.key, "conveyor_key_setting.key", problems);
  c.target = k.target;
  c.fields = k.fields;
  c.rate_per_sec = k.rate_per_sec;
  c.burst = k.burst;
  c.scope = k.scope;
  c.weight = k.weight;
  c.updated_at = k.updated_at_us;
  if (c.fields == 0 || (c.fields & ~CONVEYOR_KEY_FIELDS_ALL) != 0)
    problems.push_back("conveyor_key_setting.fields is " + std::to_string(c.fields) +
                       " for queue \"" + c.queue + "\" key \"" + c.key +
                       "\"; a listed setting has at least one known field");
  return c;
}

StatsCopy copy_stats(const conveyor_queue_stats* reported, std::vector<std::string>& problems) {
  if (reported == nullptr) {
    problems.push_back("on_stats was called with NULL stats");
    return {};
  }
  const conveyor_queue_stats s =
      read_sized(reported, "conveyor_queue_stats", problems,
                 offsetof(conveyor_queue_stats, oldest_pending_run_at_us));
  StatsCopy c{s.struct_size, s.paused,    copy_str(s.queue, "conveyor_queue_stats.queue", problems),
              s.pending,     s.scheduled, s.running,
              s.completed,   s.failed,    s.cancelled};
  c.reports_oldest_pending =
      s.struct_size >=
      offsetof(conveyor_queue_stats, oldest_pending_run_at_us) + sizeof s.oldest_pending_run_at_us;
  c.oldest_pending_run_at = s.oldest_pending_run_at_us;
  return c;
}

LimitCopy copy_limit(const conveyor_rate_limit* reported, std::vector<std::string>& problems) {
  if (reported == nullptr) {
    problems.push_back("on_limit was called with a NULL limit");
    return {};
  }
  const conveyor_rate_limit l =
      read_sized(reported, "conveyor_rate_limit", problems, offsetof(conveyor_rate_limit, scope));
  LimitCopy c{l.struct_size, l.burst, copy_str(l.queue, "conveyor_rate_limit.queue", problems),
              l.rate_per_sec, l.updated_at_us};
  // ABI 1.2: scope only when struct_size covers it (zero-filled otherwise:
  // CONVEYOR_SCOPE_PROCESS).
  c.reports_scope = l.struct_size >= offsetof(conveyor_rate_limit, scope) + sizeof l.scope;
  c.scope = l.scope;
  return c;
}

template <typename Slot>
Status PluginBinding::run(const char* op, Slot&& slot) {
  conveyor_error err;
  std::memset(&err, 0, sizeof err);
  before_call(op, err);
  Status s;
  s.code = slot(&err);
  if (!s.ok()) s.message = message_of(err);
  after_call(op, s.code, err, nullptr);
  return s;
}

template <typename T, typename Slot>
Result<T> PluginBinding::run_out(const char* op, T unwritten, Slot&& slot) {
  Result<T> r;
  r.value = unwritten;
  r.status = run(op, [&](conveyor_error* e) { return slot(&r.value, e); });
  return r;
}

template <typename Slot, typename Take>
Status PluginBinding::run_reporting(const char* op, std::vector<std::string>& problems, Slot&& slot,
                                    Take&& take,
                                    std::function<void(int32_t, std::string_view)> on_each) {
  conveyor_error err;
  std::memset(&err, 0, sizeof err);
  before_call(op, err);
  Reports local;
  Reports* r = reports_for(op);
  if (r == nullptr) r = &local;
  r->caller = std::this_thread::get_id();
  r->on_notification = std::move(on_each);
  r->in_call.store(true);
  Status s;
  s.code = slot(&err, static_cast<void*>(r));
  r->in_call.store(false);
  if (!s.ok()) s.message = message_of(err);
  std::lock_guard lock(r->mu);
  after_call(op, s.code, err, r);
  problems = std::move(r->problems);
  r->problems.clear();
  take(*r);
  return s;
}

Result<conveyor_storage*> PluginBinding::open(const Options& options) {
  std::vector<conveyor_option> c;
  c.reserve(options.size());
  for (const auto& [k, v] : options) c.push_back({cstr(k), cstr(v)});
  Result<conveyor_storage*> r;
  conveyor_storage* out = nullptr;
  r.status = run("open", [&](conveyor_error* e) {
    return table_->open(c.empty() ? nullptr : c.data(), c.size(), &out, e);
  });
  if (r.ok()) handle_ = out;
  r.value = r.ok() ? out : nullptr;
  return r;
}

void PluginBinding::close() noexcept {
  if (handle_ != nullptr) table_->close(handle_);
  handle_ = nullptr;
}

Status PluginBinding::migrate() {
  return run("migrate", [&](conveyor_error* e) { return table_->migrate(handle_, e); });
}

Result<std::vector<int64_t>> PluginBinding::enqueue(std::span<const conveyor_new_job> jobs) {
  Result<std::vector<int64_t>> r;
  r.value.assign(jobs.size(), 0);
  r.status = run("enqueue", [&](conveyor_error* e) {
    return table_->enqueue(handle_, data_or_null(jobs), jobs.size(),
                           r.value.empty() ? nullptr : r.value.data(), e);
  });
  return r;
}

Result<PluginBinding::Claimed> PluginBinding::claim(std::string_view queue, uint32_t max_jobs,
                                                    int64_t lease_token, int64_t now_us,
                                                    int64_t lease_expires_us) {
  Result<Claimed> r;
  uint32_t claimed = kUnwrittenCount;
  r.status = run_reporting(
      "claim", r.problems,
      [&](conveyor_error* e, void* ctx) {
        return table_->claim(handle_, cstr(queue), max_jobs, lease_token, now_us, lease_expires_us,
                             &on_job, ctx, &claimed, e);
      },
      moving(&Reports::jobs, r.value.jobs));
  r.value.out_claimed = claimed;
  return r;
}

// complete, extend_leases and release share one shape: a batch of leases and
// a time in, one status per lease out.
Result<std::vector<conveyor_status>> PluginBinding::lease_batch(
    const char* op, LeaseSlot slot, std::span<const conveyor_lease> leases, int64_t time_us) {
  Result<std::vector<conveyor_status>> r;
  r.value.assign(leases.size(), kUnwritten);
  r.status = run(op, [&](conveyor_error* e) {
    return slot(handle_, data_or_null(leases), leases.size(), time_us,
                r.value.empty() ? nullptr : r.value.data(), e);
  });
  return r;
}

Result<std::vector<conveyor_status>> PluginBinding::complete(std::span<const conveyor_lease> leases,
                                                             int64_t now_us) {
  return lease_batch("complete", table_->complete, leases, now_us);
}

Result<std::vector<conveyor_status>> PluginBinding::extend_leases(
    std::span<const conveyor_lease> leases, int64_t lease_expires_us) {
  return lease_batch("extend_leases", table_->extend_leases, leases, lease_expires_us);
}

Result<std::vector<conveyor_status>> PluginBinding::release(std::span<const conveyor_lease> leases,
                                                            int64_t now_us) {
  return lease_batch("release", table_->release, leases, now_us);
}

Status PluginBinding::fail(conveyor_lease lease, std::string_view error_text, int64_t retry_at_us,
                           int64_t now_us) {
  return run("fail", [&](conveyor_error* e) {
    return table_->fail(handle_, lease, cstr(error_text), retry_at_us, now_us, e);
  });
}

Result<uint32_t> PluginBinding::rescue_expired(int64_t now_us, uint32_t max_jobs) {
  return run_out("rescue_expired", kUnwrittenCount, [&](uint32_t* out, conveyor_error* e) {
    return table_->rescue_expired(handle_, now_us, max_jobs, out, e);
  });
}

Status PluginBinding::cancel(int64_t job_id, int64_t now_us) {
  return run("cancel",
             [&](conveyor_error* e) { return table_->cancel(handle_, job_id, now_us, e); });
}

Status PluginBinding::set_queue_paused(std::string_view queue, bool paused, int64_t now_us) {
  return run("set_queue_paused", [&](conveyor_error* e) {
    return table_->set_queue_paused(handle_, cstr(queue), paused ? 1 : 0, now_us, e);
  });
}

Result<std::vector<StatsCopy>> PluginBinding::queue_stats(int64_t now_us) {
  Result<std::vector<StatsCopy>> r;
  r.status = run_reporting(
      "queue_stats", r.problems,
      [&](conveyor_error* e, void* ctx) {
        return table_->queue_stats(handle_, now_us, &on_stats, ctx, e);
      },
      moving(&Reports::stats, r.value));
  return r;
}

Result<std::vector<QueueCopy>> PluginBinding::list_queues() {
  Result<std::vector<QueueCopy>> r;
  r.status = run_reporting(
      "list_queues", r.problems,
      [&](conveyor_error* e, void* ctx) { return table_->list_queues(handle_, &on_queue, ctx, e); },
      moving(&Reports::queues, r.value));
  return r;
}

Result<std::vector<JobCopy>> PluginBinding::get_job(int64_t job_id, int64_t now_us) {
  Result<std::vector<JobCopy>> r;
  r.status = run_reporting(
      "get_job", r.problems,
      [&](conveyor_error* e, void* ctx) {
        return table_->get_job(handle_, job_id, now_us, &on_job, ctx, e);
      },
      moving(&Reports::jobs, r.value));
  return r;
}

Result<uint64_t> PluginBinding::purge_finished(int64_t finalized_before_us, uint32_t max_jobs) {
  return run_out("purge_finished", uint64_t{kUnwrittenCount},
                 [&](uint64_t* out, conveyor_error* e) {
                   return table_->purge_finished(handle_, finalized_before_us, max_jobs, out, e);
                 });
}

Status PluginBinding::set_rate_limit(std::string_view queue, double rate_per_sec, uint32_t burst,
                                     int64_t now_us) {
  return run("set_rate_limit", [&](conveyor_error* e) {
    return table_->set_rate_limit(handle_, cstr(queue), rate_per_sec, burst, now_us, e);
  });
}

Status PluginBinding::delete_rate_limit(std::string_view queue) {
  return run("delete_rate_limit",
             [&](conveyor_error* e) { return table_->delete_rate_limit(handle_, cstr(queue), e); });
}

Result<std::vector<LimitCopy>> PluginBinding::list_rate_limits() {
  Result<std::vector<LimitCopy>> r;
  r.status = run_reporting(
      "list_rate_limits", r.problems,
      [&](conveyor_error* e, void* ctx) {
        return table_->list_rate_limits(handle_, &on_limit, ctx, e);
      },
      moving(&Reports::limits, r.value));
  return r;
}

Result<int64_t> PluginBinding::change_marker() {
  return run_out("change_marker", int64_t{0}, [&](int64_t* out, conveyor_error* e) {
    return table_->change_marker(handle_, out, e);
  });
}

Result<std::vector<NotificationCopy>> PluginBinding::wait_for_notification(
    int64_t timeout_us, std::function<void(int32_t kind, std::string_view queue)> on_each) {
  Result<std::vector<NotificationCopy>> r;
  if (table_->wait_for_notification == nullptr) {
    r.status = Status{CONVEYOR_E_UNSUPPORTED,
                      std::string("storage plugin '") + (table_->name ? table_->name : "?") +
                          "' does not support notifications (wait_for_notification is NULL)"};
    return r;
  }
  r.status = run_reporting(
      "wait_for_notification", r.problems,
      [&](conveyor_error* e, void* ctx) {
        return table_->wait_for_notification(handle_, timeout_us, &on_notify, ctx, e);
      },
      moving(&Reports::notifications, r.value), std::move(on_each));
  return r;
}

bool PluginBinding::has_slot(StorageSlot slot) const noexcept {
  const SlotInfo& s = slot_info(slot);
  if (s.offset + s.size > table_->struct_size) return false;
  void (*fn)() = nullptr;
  static_assert(sizeof fn == sizeof table_->open, "function pointers differ in size");
  std::memcpy(&fn, reinterpret_cast<const unsigned char*>(table_) + s.offset, sizeof fn);
  return fn != nullptr;
}

Status PluginBinding::missing_slot(StorageSlot slot, std::string_view need) const {
  const std::string name = table_->name != nullptr ? table_->name : "?";
  const std::string abi =
      std::to_string(table_->abi_major) + "." + std::to_string(table_->abi_minor);
  const std::string slot_name(host::slot_name(slot));
  const uint32_t minor = slot_minor(slot);
  if (table_->abi_minor < minor)
    return Status{CONVEYOR_E_UNSUPPORTED, "storage plugin '" + name + "' implements ABI " + abi +
                                              "; " + std::string(need) + " needs ABI 1." +
                                              std::to_string(minor) + " (slot " + slot_name +
                                              "): upgrade the plugin"};
  return Status{CONVEYOR_E_UNSUPPORTED, "storage plugin '" + name + "' (ABI " + abi +
                                            ") does not implement " + slot_name + ", which " +
                                            std::string(need) + " needs"};
}

Result<std::vector<int64_t>> PluginBinding::enqueue_v2(std::span<const conveyor_new_job> jobs,
                                                       int64_t now_us) {
  Result<std::vector<int64_t>> r;
  if (!has_slot(StorageSlot::kEnqueueV2)) {
    r.status = missing_slot(StorageSlot::kEnqueueV2, "enqueueing with the host's clock");
    return r;
  }
  r.value.assign(jobs.size(), 0);
  r.status = run("enqueue_v2", [&](conveyor_error* e) {
    return table_->enqueue_v2(handle_, data_or_null(jobs), jobs.size(), now_us,
                              r.value.empty() ? nullptr : r.value.data(), e);
  });
  return r;
}

Result<PluginBinding::Claimed> PluginBinding::claim_kinds(std::string_view queue,
                                                          std::span<const std::string> kinds,
                                                          uint32_t max_jobs, int64_t lease_token,
                                                          int64_t now_us,
                                                          int64_t lease_expires_us) {
  Result<Claimed> r;
  if (!has_slot(StorageSlot::kClaimKinds)) {
    r.status = missing_slot(StorageSlot::kClaimKinds, "claiming only some kinds");
    return r;
  }
  std::vector<conveyor_str> c;
  c.reserve(kinds.size());
  for (const std::string& k : kinds) c.push_back(cstr(k));
  uint32_t claimed = kUnwrittenCount;
  r.status = run_reporting(
      "claim_kinds", r.problems,
      [&](conveyor_error* e, void* ctx) {
        return table_->claim_kinds(handle_, cstr(queue), c.empty() ? nullptr : c.data(), c.size(),
                                   max_jobs, lease_token, now_us, lease_expires_us, &on_job, ctx,
                                   &claimed, e);
      },
      moving(&Reports::jobs, r.value.jobs));
  r.value.out_claimed = claimed;
  return r;
}

Result<PluginBinding::Listed> PluginBinding::list_jobs(std::string_view queue,
                                                       std::span<const int32_t> states,
                                                       std::string_view kind, int64_t after_id,
                                                       uint32_t limit, int64_t now_us) {
  Result<Listed> r;
  if (!has_slot(StorageSlot::kListJobs)) {
    r.status = missing_slot(StorageSlot::kListJobs, "listing jobs");
    return r;
  }
  uint32_t listed = kUnwrittenCount;
  r.status = run_reporting(
      "list_jobs", r.problems,
      [&](conveyor_error* e, void* ctx) {
        return table_->list_jobs(handle_, cstr(queue), data_or_null(states), states.size(),
                                 cstr(kind), after_id, limit, now_us, &on_job, ctx, &listed, e);
      },
      moving(&Reports::jobs, r.value.jobs));
  r.value.out_listed = listed;
  return r;
}

Result<std::vector<conveyor_status>> PluginBinding::retry_jobs(std::span<const int64_t> job_ids,
                                                               int64_t now_us) {
  Result<std::vector<conveyor_status>> r;
  if (!has_slot(StorageSlot::kRetryJobs)) {
    r.status = missing_slot(StorageSlot::kRetryJobs, "retrying jobs");
    return r;
  }
  r.value.assign(job_ids.size(), kUnwritten);
  r.status = run("retry_jobs", [&](conveyor_error* e) {
    return table_->retry_jobs(handle_, data_or_null(job_ids), job_ids.size(), now_us,
                              r.value.empty() ? nullptr : r.value.data(), e);
  });
  return r;
}

Result<std::vector<conveyor_status>> PluginBinding::delete_jobs(std::span<const int64_t> job_ids) {
  Result<std::vector<conveyor_status>> r;
  if (!has_slot(StorageSlot::kDeleteJobs)) {
    r.status = missing_slot(StorageSlot::kDeleteJobs, "deleting jobs");
    return r;
  }
  r.value.assign(job_ids.size(), kUnwritten);
  r.status = run("delete_jobs", [&](conveyor_error* e) {
    return table_->delete_jobs(handle_, data_or_null(job_ids), job_ids.size(),
                               r.value.empty() ? nullptr : r.value.data(), e);
  });
  return r;
}

Result<std::vector<StatsCopy>> PluginBinding::job_counts(int64_t now_us) {
  Result<std::vector<StatsCopy>> r;
  if (!has_slot(StorageSlot::kJobCounts)) {
    r.status = missing_slot(StorageSlot::kJobCounts, "counting jobs without a scan");
    return r;
  }
  r.status = run_reporting(
      "job_counts", r.problems,
      [&](conveyor_error* e, void* ctx) {
        return table_->job_counts(handle_, now_us, &on_stats, ctx, e);
      },
      moving(&Reports::stats, r.value));
  return r;
}

Result<PluginBinding::Rescued> PluginBinding::rescue_expired_v2(int64_t now_us, uint32_t max_jobs) {
  Result<Rescued> r;
  if (!has_slot(StorageSlot::kRescueExpiredV2)) {
    r.status = missing_slot(StorageSlot::kRescueExpiredV2, "reporting rescued jobs");
    return r;
  }
  uint32_t rescued = kUnwrittenCount;
  r.status = run_reporting(
      "rescue_expired_v2", r.problems,
      [&](conveyor_error* e, void* ctx) {
        return table_->rescue_expired_v2(handle_, now_us, max_jobs, &on_job, ctx, &rescued, e);
      },
      moving(&Reports::jobs, r.value.jobs));
  r.value.out_rescued = rescued;
  return r;
}

Result<PluginBinding::Shared> PluginBinding::swap_shared_state(std::string_view key,
                                                               int64_t expected_version,
                                                               int64_t new_value) {
  Result<Shared> r;
  if (!has_slot(StorageSlot::kSwapSharedState)) {
    r.status = missing_slot(StorageSlot::kSwapSharedState, "sharing state across processes");
    return r;
  }
  r.value = Shared{kUnwrittenValue, kUnwrittenValue, static_cast<int32_t>(kUnwrittenCount)};
  r.status = run("swap_shared_state", [&](conveyor_error* e) {
    return table_->swap_shared_state(handle_, cstr(key), expected_version, new_value,
                                     &r.value.version, &r.value.value, &r.value.applied, e);
  });
  return r;
}

Result<PluginBinding::SharedAdded> PluginBinding::add_shared_state(std::string_view key,
                                                                   int64_t credit, int64_t low,
                                                                   int64_t high, int64_t unit,
                                                                   uint32_t min_count,
                                                                   uint32_t max_count) {
  Result<SharedAdded> r;
  if (!has_slot(StorageSlot::kAddSharedState)) {
    r.status = missing_slot(StorageSlot::kAddSharedState, "a fleet take in one call");
    return r;
  }
  r.value = SharedAdded{kUnwrittenValue, kUnwrittenValue, kUnwrittenCount};
  r.status = run("add_shared_state", [&](conveyor_error* e) {
    return table_->add_shared_state(handle_, cstr(key), credit, low, high, unit, min_count,
                                    max_count, &r.value.version, &r.value.value, &r.value.count, e);
  });
  return r;
}

Status PluginBinding::set_rate_limit_v2(std::string_view queue, double rate_per_sec, uint32_t burst,
                                        int32_t scope, int64_t now_us) {
  if (!has_slot(StorageSlot::kSetRateLimitV2))
    return missing_slot(StorageSlot::kSetRateLimitV2, "a rate limit with a scope");
  return run("set_rate_limit_v2", [&](conveyor_error* e) {
    return table_->set_rate_limit_v2(handle_, cstr(queue), rate_per_sec, burst, scope, now_us, e);
  });
}

Result<std::vector<int64_t>> PluginBinding::enqueue_v3(std::span<const conveyor_new_job_v2> jobs,
                                                       int64_t now_us) {
  Result<std::vector<int64_t>> r;
  if (!has_slot(StorageSlot::kEnqueueV3)) {
    r.status = missing_slot(StorageSlot::kEnqueueV3, "a job cost other than 1");
    return r;
  }
  r.value.assign(jobs.size(), 0);
  r.status = run("enqueue_v3", [&](conveyor_error* e) {
    return table_->enqueue_v3(handle_, data_or_null(jobs), jobs.size(), now_us,
                              r.value.empty() ? nullptr : r.value.data(), e);
  });
  return r;
}

Result<std::vector<int64_t>> PluginBinding::enqueue_v4(std::span<const conveyor_new_job_v3> jobs,
                                                       int64_t now_us) {
  Result<std::vector<int64_t>> r;
  if (!has_slot(StorageSlot::kEnqueueV4)) {
    r.status = missing_slot(StorageSlot::kEnqueueV4, "a job key");
    return r;
  }
  r.value.assign(jobs.size(), 0);
  r.status = run("enqueue_v4", [&](conveyor_error* e) {
    return table_->enqueue_v4(handle_, data_or_null(jobs), jobs.size(), now_us,
                              r.value.empty() ? nullptr : r.value.data(), e);
  });
  return r;
}

Result<std::vector<int64_t>> PluginBinding::enqueue_v5(std::span<const conveyor_new_job_v4> jobs,
                                                       int64_t now_us) {
  Result<std::vector<int64_t>> r;
  if (!has_slot(StorageSlot::kEnqueueV5)) {
    r.status = missing_slot(StorageSlot::kEnqueueV5, "a job timeout");
    return r;
  }
  r.value.assign(jobs.size(), 0);
  r.status = run("enqueue_v5", [&](conveyor_error* e) {
    return table_->enqueue_v5(handle_, data_or_null(jobs), jobs.size(), now_us,
                              r.value.empty() ? nullptr : r.value.data(), e);
  });
  return r;
}

Result<PluginBinding::Claimed> PluginBinding::claim_keys(std::string_view queue,
                                                         std::span<const std::string> kinds,
                                                         std::span<const KeyClaim> keys,
                                                         int64_t lease_token, int64_t now_us,
                                                         int64_t lease_expires_us) {
  Result<Claimed> r;
  if (!has_slot(StorageSlot::kClaimKeys)) {
    r.status = missing_slot(StorageSlot::kClaimKeys, "claiming by key");
    return r;
  }
  std::vector<conveyor_str> k;
  k.reserve(kinds.size());
  for (const std::string& kind : kinds) k.push_back(cstr(kind));
  std::vector<conveyor_key_claim> c;
  c.reserve(keys.size());
  for (const KeyClaim& key : keys) c.push_back(conveyor_key_claim{cstr(key.key), key.max_jobs, 0});
  uint32_t claimed = kUnwrittenCount;
  r.status = run_reporting(
      "claim_keys", r.problems,
      [&](conveyor_error* e, void* ctx) {
        return table_->claim_keys(handle_, cstr(queue), k.empty() ? nullptr : k.data(), k.size(),
                                  c.empty() ? nullptr : c.data(), c.size(), lease_token, now_us,
                                  lease_expires_us, &on_job, ctx, &claimed, e);
      },
      moving(&Reports::jobs, r.value.jobs));
  r.value.out_claimed = claimed;
  return r;
}

Result<PluginBinding::ReadyKeys> PluginBinding::list_ready_keys(
    std::string_view queue, const std::optional<std::string>& after_key, uint32_t limit,
    uint32_t count_limit, int64_t now_us) {
  Result<ReadyKeys> r;
  if (!has_slot(StorageSlot::kListReadyKeys)) {
    r.status = missing_slot(StorageSlot::kListReadyKeys, "listing a queue's keys");
    return r;
  }
  const conveyor_str after = after_key ? cstr(*after_key) : conveyor_str{};
  uint32_t listed = kUnwrittenCount;
  r.status = run_reporting(
      "list_ready_keys", r.problems,
      [&](conveyor_error* e, void* ctx) {
        return table_->list_ready_keys(handle_, cstr(queue), after_key ? &after : nullptr, limit,
                                       count_limit, now_us, &on_ready_key, ctx, &listed, e);
      },
      moving(&Reports::ready_keys, r.value.keys));
  r.value.out_listed = listed;
  return r;
}

Status PluginBinding::set_key_setting(const conveyor_key_setting& setting, int64_t now_us) {
  if (!has_slot(StorageSlot::kSetKeySetting))
    return missing_slot(StorageSlot::kSetKeySetting, "a key's own limit or weight");
  return run("set_key_setting", [&](conveyor_error* e) {
    return table_->set_key_setting(handle_, &setting, now_us, e);
  });
}

Result<int32_t> PluginBinding::delete_key_setting(std::string_view queue, int32_t target,
                                                  std::string_view key, uint32_t fields) {
  if (!has_slot(StorageSlot::kDeleteKeySetting)) {
    Result<int32_t> r;
    r.status = missing_slot(StorageSlot::kDeleteKeySetting, "removing a key's own limit or weight");
    return r;
  }
  return run_out("delete_key_setting", int32_t{kUnwritten}, [&](int32_t* out, conveyor_error* e) {
    return table_->delete_key_setting(handle_, cstr(queue), target, cstr(key), fields, out, e);
  });
}

Result<std::vector<KeySettingCopy>> PluginBinding::list_key_settings() {
  Result<std::vector<KeySettingCopy>> r;
  if (!has_slot(StorageSlot::kListKeySettings)) {
    r.status = missing_slot(StorageSlot::kListKeySettings, "listing keys' own limits and weights");
    return r;
  }
  r.status = run_reporting(
      "list_key_settings", r.problems,
      [&](conveyor_error* e, void* ctx) {
        return table_->list_key_settings(handle_, &on_key_setting, ctx, e);
      },
      moving(&Reports::key_settings, r.value));
  return r;
}

Result<uint32_t> PluginBinding::delete_shared_states(std::string_view prefix, int64_t value_below,
                                                     uint32_t limit) {
  if (!has_slot(StorageSlot::kDeleteSharedStates)) {
    Result<uint32_t> r;
    r.status = missing_slot(StorageSlot::kDeleteSharedStates, "forgetting idle shared records");
    return r;
  }
  return run_out("delete_shared_states", kUnwrittenCount, [&](uint32_t* out, conveyor_error* e) {
    return table_->delete_shared_states(handle_, cstr(prefix), value_below, limit, out, e);
  });
}

Result<std::vector<PluginBinding::SharedAdded>> PluginBinding::add_shared_states(
    std::span<const KeyedAdd> adds) {
  Result<std::vector<SharedAdded>> r;
  if (!has_slot(StorageSlot::kAddSharedStates)) {
    r.status = missing_slot(StorageSlot::kAddSharedStates, "many fleet takes in one call");
    return r;
  }
  std::vector<conveyor_shared_add> in;
  in.reserve(adds.size());
  for (const KeyedAdd& a : adds)
    in.push_back(conveyor_shared_add{cstr(a.key), a.credit, a.low, a.high, a.unit, a.min_count,
                                     a.max_count});
  std::vector<conveyor_shared_added> out(
      adds.size(), conveyor_shared_added{kUnwrittenValue, kUnwrittenValue, kUnwrittenCount, 0});
  r.status = run("add_shared_states", [&](conveyor_error* e) {
    return table_->add_shared_states(handle_, in.empty() ? nullptr : in.data(), in.size(),
                                     out.empty() ? nullptr : out.data(), e);
  });
  r.value.reserve(out.size());
  for (const conveyor_shared_added& o : out)
    r.value.push_back(SharedAdded{o.version, o.value, o.count});
  return r;
}

}  // namespace conveyor::host
