#include <conveyor/config.hpp>
#include <conveyor/storage.hpp>

#include "plugin_storage.hpp"

#include <fmt/format.h>

namespace conveyor {
namespace {

conveyor_str cstr(std::string_view s) { return conveyor_str{s.data(), s.size()}; }
std::string to_std(conveyor_str s) { return s.len == 0 ? std::string() : std::string(s.data, s.len); }

JobState state_from_c(int32_t s) {
  switch (s) {
    case CONVEYOR_JOB_AVAILABLE: return JobState::kAvailable;
    case CONVEYOR_JOB_SCHEDULED: return JobState::kScheduled;
    case CONVEYOR_JOB_RUNNING: return JobState::kRunning;
    case CONVEYOR_JOB_COMPLETED: return JobState::kCompleted;
    case CONVEYOR_JOB_FAILED: return JobState::kFailed;
    case CONVEYOR_JOB_CANCELLED: return JobState::kCancelled;
    default: throw StorageError(CONVEYOR_E_INTERNAL, fmt::format("plugin reported unknown job state {}", s));
  }
}

// Output structs may grow at their end in later minors (storage_plugin.h,
// rule 5); every 1.0 field must be there. Fields added later will be read only
// when struct_size covers them.
template <typename T>
void require_v1_size(uint32_t struct_size, const char* what) {
  if (struct_size < sizeof(T))
    throw StorageError(CONVEYOR_E_INTERNAL,
                       fmt::format("plugin reported a {} of {} bytes; ABI 1.0 needs {} (set "
                                   "struct_size = sizeof({}))",
                                   what, struct_size, sizeof(T), what));
}

// Copies a plugin-owned job into a Job.
Job job_from_c(const conveyor_job& c) {
  require_v1_size<conveyor_job>(c.struct_size, "conveyor_job");
  Job j;
  j.id = c.id;
  j.state = state_from_c(c.state);
  j.queue = to_std(c.queue);
  j.kind = to_std(c.kind);
  j.payload = to_std(c.payload);
  j.priority = c.priority;
  j.attempt = c.attempt;
  j.max_attempts = c.max_attempts;
  j.run_at_us = c.run_at_us;
  j.created_at_us = c.created_at_us;
  j.finalized_at_us = c.finalized_at_us;
  j.lease_token = c.lease_token;
  j.lease_expires_us = c.lease_expires_us;
  j.last_error = to_std(c.last_error);
  return j;
}

// What a callback gathers. Callbacks run inside plugin code, possibly C, so
// nothing may be thrown through them: a failure is kept here and thrown by
// the caller once the plugin call has returned.
template <typename T>
struct Collected {
  std::vector<T> items;
  std::string error;

  template <typename Fn>
  void add(Fn&& make) noexcept {
    if (!error.empty()) return;
    try {
      items.push_back(make());
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "unknown error while copying a plugin's result";
    }
  }
  std::vector<T> take() {
    if (!error.empty()) throw StorageError(CONVEYOR_E_INTERNAL, error);
    return std::move(items);
  }
};

void collect_job(void* ctx, const conveyor_job* job) {
  static_cast<Collected<Job>*>(ctx)->add([&] { return job_from_c(*job); });
}

}  // namespace

const char* to_string(JobState state) noexcept {
  switch (state) {
    case JobState::kAvailable: return "available";
    case JobState::kScheduled: return "scheduled";
    case JobState::kRunning: return "running";
    case JobState::kCompleted: return "completed";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
  }
  return "unknown";
}

PluginStorage::PluginStorage(std::shared_ptr<const Plugin> plugin, conveyor_storage* handle)
    : plugin_(std::move(plugin)), t_(&plugin_->table()), handle_(handle) {}

PluginStorage::~PluginStorage() { t_->close(handle_); }

std::shared_ptr<PluginStorage> PluginStorage::open(
    std::shared_ptr<const Plugin> plugin,
    const std::vector<std::pair<std::string, std::string>>& options) {
  std::vector<conveyor_option> c_options;
  c_options.reserve(options.size());
  for (const auto& [k, v] : options) c_options.push_back({cstr(k), cstr(v)});
  conveyor_error err{};
  conveyor_storage* handle = nullptr;
  const auto& t = plugin->table();
  conveyor_status st = t.open(c_options.data(), c_options.size(), &handle, &err);
  if (st != CONVEYOR_OK || handle == nullptr) {
    throw StorageError(st == CONVEYOR_OK ? CONVEYOR_E_INTERNAL : st,
                       fmt::format("storage plugin '{}' could not open: {}", plugin->info().name,
                                   st == CONVEYOR_OK ? "it returned no handle" : err.message));
  }
  std::shared_ptr<PluginStorage> storage(new PluginStorage(std::move(plugin), handle));
  err = {};
  st = t.migrate(handle, &err);
  if (st != CONVEYOR_OK) storage->throw_error("migrate", st, err);
  return storage;
}

void PluginStorage::throw_error(const char* op, conveyor_status status,
                                const conveyor_error& err) const {
  throw StorageError(status, fmt::format("storage plugin '{}': {} failed: {}", plugin_->info().name,
                                         op, err.message[0] ? err.message : "no message"));
}

std::vector<int64_t> PluginStorage::enqueue(std::span<const NewJob> jobs, int64_t now_us) {
  std::vector<conveyor_new_job> c(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const NewJob& j = jobs[i];
    c[i] = conveyor_new_job{cstr(j.queue), cstr(j.kind),   cstr(j.payload),
                            j.priority,    j.max_attempts, j.run_at_us == 0 ? now_us : j.run_at_us};
  }
  std::vector<int64_t> ids(jobs.size());
  conveyor_error err{};
  if (auto st = t_->enqueue(handle_, c.data(), c.size(), ids.data(), &err); st != CONVEYOR_OK)
    throw_error("enqueue", st, err);
  return ids;
}

std::vector<Job> PluginStorage::claim(std::string_view queue, uint32_t max_jobs,
                                      int64_t lease_token, int64_t now_us,
                                      int64_t lease_expires_us) {
  Collected<Job> collected;
  collected.items.reserve(max_jobs);
  uint32_t claimed = 0;
  conveyor_error err{};
  if (auto st = t_->claim(handle_, cstr(queue), max_jobs, lease_token, now_us, lease_expires_us,
                          &collect_job, &collected, &claimed, &err);
      st != CONVEYOR_OK)
    throw_error("claim", st, err);
  std::vector<Job> jobs = collected.take();
  if (claimed != jobs.size() || claimed > max_jobs)
    throw StorageError(CONVEYOR_E_INTERNAL,
                       fmt::format("storage plugin '{}': claim reported {} jobs but delivered {}",
                                   plugin_->info().name, claimed, jobs.size()));
  return jobs;
}

namespace {
template <typename Call>
std::vector<conveyor_status> per_lease(const Storage& s, std::span<const conveyor_lease> leases,
                                       Call&& call) {
  std::vector<conveyor_status> results(leases.size(), CONVEYOR_OK);
  if (leases.empty()) return results;
  conveyor_error err{};
  if (auto st = call(results.data(), &err); st != CONVEYOR_OK) {
    (void)s;
    throw StorageError(st, err.message);
  }
  return results;
}
}  // namespace

std::vector<conveyor_status> PluginStorage::complete(std::span<const conveyor_lease> leases,
                                               int64_t now_us) {
  try {
    return per_lease(*this, leases, [&](conveyor_status* r, conveyor_error* e) {
      return t_->complete(handle_, leases.data(), leases.size(), now_us, r, e);
    });
  } catch (const StorageError& e) {
    throw StorageError(e.code(), fmt::format("storage plugin '{}': complete failed: {}",
                                             plugin_->info().name, e.what()));
  }
}

conveyor_status PluginStorage::fail(conveyor_lease lease, std::string_view error_text,
                              int64_t retry_at_us, int64_t now_us) {
  conveyor_error err{};
  auto st = t_->fail(handle_, lease, cstr(error_text), retry_at_us, now_us, &err);
  if (st == CONVEYOR_OK || st == CONVEYOR_E_LEASE_LOST) return st;
  throw_error("fail", st, err);
}

std::vector<conveyor_status> PluginStorage::extend_leases(std::span<const conveyor_lease> leases,
                                                    int64_t lease_expires_us) {
  try {
    return per_lease(*this, leases, [&](conveyor_status* r, conveyor_error* e) {
      return t_->extend_leases(handle_, leases.data(), leases.size(), lease_expires_us, r, e);
    });
  } catch (const StorageError& e) {
    throw StorageError(e.code(), fmt::format("storage plugin '{}': extend_leases failed: {}",
                                             plugin_->info().name, e.what()));
  }
}

std::vector<conveyor_status> PluginStorage::release(std::span<const conveyor_lease> leases,
                                              int64_t now_us) {
  try {
    return per_lease(*this, leases, [&](conveyor_status* r, conveyor_error* e) {
      return t_->release(handle_, leases.data(), leases.size(), now_us, r, e);
    });
  } catch (const StorageError& e) {
    throw StorageError(e.code(), fmt::format("storage plugin '{}': release failed: {}",
                                             plugin_->info().name, e.what()));
  }
}

uint32_t PluginStorage::rescue_expired(int64_t now_us, uint32_t max_jobs) {
  uint32_t n = 0;
  conveyor_error err{};
  if (auto st = t_->rescue_expired(handle_, now_us, max_jobs, &n, &err); st != CONVEYOR_OK)
    throw_error("rescue_expired", st, err);
  return n;
}

bool PluginStorage::cancel(int64_t job_id, int64_t now_us) {
  conveyor_error err{};
  auto st = t_->cancel(handle_, job_id, now_us, &err);
  if (st == CONVEYOR_E_NOT_FOUND) return false;
  if (st != CONVEYOR_OK) throw_error("cancel", st, err);
  return true;
}

void PluginStorage::set_queue_paused(std::string_view queue, bool paused, int64_t now_us) {
  conveyor_error err{};
  if (auto st = t_->set_queue_paused(handle_, cstr(queue), paused ? 1 : 0, now_us, &err);
      st != CONVEYOR_OK)
    throw_error(paused ? "pause" : "resume", st, err);
}

std::vector<QueueStats> PluginStorage::queue_stats(int64_t now_us) {
  Collected<QueueStats> out;
  conveyor_error err{};
  auto on_stats = [](void* ctx, const conveyor_queue_stats* s) {
    static_cast<Collected<QueueStats>*>(ctx)->add([&] {
      require_v1_size<conveyor_queue_stats>(s->struct_size, "conveyor_queue_stats");
      QueueStats q;
      q.queue = to_std(s->queue);
      q.paused = s->paused != 0;
      q.pending = s->pending;
      q.scheduled = s->scheduled;
      q.running = s->running;
      q.completed = s->completed;
      q.failed = s->failed;
      q.cancelled = s->cancelled;
      return q;
    });
  };
  if (auto st = t_->queue_stats(handle_, now_us, on_stats, &out, &err); st != CONVEYOR_OK)
    throw_error("queue_stats", st, err);
  return out.take();
}

std::vector<std::pair<std::string, bool>> PluginStorage::list_queues() {
  Collected<std::pair<std::string, bool>> out;
  conveyor_error err{};
  auto on_queue = [](void* ctx, conveyor_str queue, int32_t paused) {
    static_cast<Collected<std::pair<std::string, bool>>*>(ctx)->add(
        [&] { return std::make_pair(to_std(queue), paused != 0); });
  };
  if (auto st = t_->list_queues(handle_, on_queue, &out, &err); st != CONVEYOR_OK)
    throw_error("list_queues", st, err);
  return out.take();
}

std::optional<Job> PluginStorage::get_job(int64_t job_id, int64_t now_us) {
  Collected<Job> collected;
  conveyor_error err{};
  auto st = t_->get_job(handle_, job_id, now_us, &collect_job, &collected, &err);
  if (st == CONVEYOR_E_NOT_FOUND) return std::nullopt;
  if (st != CONVEYOR_OK) throw_error("get_job", st, err);
  std::vector<Job> jobs = collected.take();
  if (jobs.size() != 1)
    throw StorageError(CONVEYOR_E_INTERNAL, "get_job delivered " + std::to_string(jobs.size()) + " jobs");
  return std::move(jobs.front());
}

uint64_t PluginStorage::purge_finished(int64_t finalized_before_us, uint32_t max_jobs) {
  uint64_t n = 0;
  conveyor_error err{};
  if (auto st = t_->purge_finished(handle_, finalized_before_us, max_jobs, &n, &err);
      st != CONVEYOR_OK)
    throw_error("purge_finished", st, err);
  return n;
}

void PluginStorage::set_rate_limit(std::string_view queue, const RateLimit& limit, int64_t now_us) {
  conveyor_error err{};
  if (auto st = t_->set_rate_limit(handle_, cstr(queue), limit.rate_per_sec, limit.burst, now_us, &err);
      st != CONVEYOR_OK)
    throw_error("set_rate_limit", st, err);
}

bool PluginStorage::delete_rate_limit(std::string_view queue) {
  conveyor_error err{};
  auto st = t_->delete_rate_limit(handle_, cstr(queue), &err);
  if (st == CONVEYOR_E_NOT_FOUND) return false;
  if (st != CONVEYOR_OK) throw_error("delete_rate_limit", st, err);
  return true;
}

std::vector<RateLimitOverride> PluginStorage::list_rate_limits() {
  Collected<RateLimitOverride> out;
  conveyor_error err{};
  auto on_limit = [](void* ctx, const conveyor_rate_limit* l) {
    static_cast<Collected<RateLimitOverride>*>(ctx)->add([&] {
      require_v1_size<conveyor_rate_limit>(l->struct_size, "conveyor_rate_limit");
      return RateLimitOverride{to_std(l->queue), RateLimit{l->rate_per_sec, l->burst},
                               l->updated_at_us};
    });
  };
  if (auto st = t_->list_rate_limits(handle_, on_limit, &out, &err); st != CONVEYOR_OK)
    throw_error("list_rate_limits", st, err);
  return out.take();
}

int64_t PluginStorage::change_marker() {
  int64_t marker = 0;
  conveyor_error err{};
  if (auto st = t_->change_marker(handle_, &marker, &err); st != CONVEYOR_OK)
    throw_error("change_marker", st, err);
  return marker;
}

void PluginStorage::wait_for_notification(
    int64_t timeout_us, const std::function<void(int32_t kind, std::string_view queue)>& fn) {
  if (t_->wait_for_notification == nullptr)
    throw StorageError(CONVEYOR_E_UNSUPPORTED, "storage plugin '" + plugin_->info().name +
                                                   "' does not support notifications");
  conveyor_error err{};
  struct Ctx {
    const std::function<void(int32_t, std::string_view)>& fn;
    Collected<int> failure;  // only its error is used
  } ctx{fn, {}};
  auto on_notify = [](void* c, int32_t kind, conveyor_str queue) {
    auto& x = *static_cast<Ctx*>(c);
    x.failure.add([&] {
      x.fn(kind, queue.len == 0 ? std::string_view{} : std::string_view(queue.data, queue.len));
      return 0;
    });
  };
  if (auto st = t_->wait_for_notification(handle_, timeout_us, on_notify, &ctx, &err);
      st != CONVEYOR_OK)
    throw_error("wait_for_notification", st, err);
  ctx.failure.take();
}

std::shared_ptr<Storage> Storage::open(
    std::shared_ptr<const Plugin> plugin,
    const std::vector<std::pair<std::string, std::string>>& options) {
  return PluginStorage::open(std::move(plugin), options);
}

std::shared_ptr<Storage> open_storage(const StorageConfig& config) {
  auto path = resolve_plugin_path(config.plugin, config.plugin_dir);
  return PluginStorage::open(load_plugin(path), config.options);
}

}  // namespace conveyor
