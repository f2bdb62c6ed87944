// Storage: the core's C++ view of one open plugin handle. Every call goes
// through the C function table; errors come back as StorageError. The handle
// keeps its Plugin (and so the library) alive.
#pragma once

#include <conveyor/plugin_loader.hpp>
#include <conveyor/rate_limit.hpp>
#include <conveyor/storage_plugin.h>

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

enum class JobState { kAvailable, kScheduled, kRunning, kCompleted, kFailed, kCancelled };
// "available", "scheduled", "running", "completed", "failed", "cancelled".
const char* to_string(JobState state) noexcept;

struct NewJob {
  std::string queue;
  std::string kind;
  std::string payload;
  int32_t priority = 0;
  int32_t max_attempts = 25;
  int64_t run_at_us = 0;  // 0: now
};

struct Job {
  int64_t id = 0;
  JobState state = JobState::kAvailable;
  std::string queue;
  std::string kind;
  std::string payload;
  int32_t priority = 0;
  int32_t attempt = 0;
  int32_t max_attempts = 0;
  int64_t run_at_us = 0;
  int64_t created_at_us = 0;
  int64_t finalized_at_us = 0;
  int64_t lease_token = 0;
  int64_t lease_expires_us = 0;
  std::string last_error;

  conveyor_lease lease() const { return conveyor_lease{id, lease_token}; }
};

struct QueueStats {
  std::string queue;
  bool paused = false;
  int64_t pending = 0;
  int64_t scheduled = 0;
  int64_t running = 0;
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t cancelled = 0;
};

// Thread-safe: every method may be called concurrently (the plugin promises
// it), except that the destructor runs after all calls returned.
class Storage {
 public:
  // Opens the plugin with options and migrates the schema. Throws StorageError.
  static std::shared_ptr<Storage> open(std::shared_ptr<const Plugin> plugin,
                                       const std::vector<std::pair<std::string, std::string>>& options);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  const PluginInfo& plugin_info() const { return plugin_->info(); }
  bool has_capability(uint64_t cap) const { return (plugin_->info().capabilities & cap) != 0; }

  // Each throws StorageError on failure, unless said otherwise.
  std::vector<int64_t> enqueue(std::span<const NewJob> jobs, int64_t now_us);
  // Claimed jobs, in the plugin's order (priority, run_at, id).
  std::vector<Job> claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token,
                         int64_t now_us, int64_t lease_expires_us);
  // Per lease: CONVEYOR_OK or CONVEYOR_E_LEASE_LOST.
  std::vector<conveyor_status> complete(std::span<const conveyor_lease> leases, int64_t now_us);
  // CONVEYOR_OK or CONVEYOR_E_LEASE_LOST; other failures throw.
  conveyor_status fail(conveyor_lease lease, std::string_view error_text, int64_t retry_at_us,
                       int64_t now_us);
  std::vector<conveyor_status> extend_leases(std::span<const conveyor_lease> leases,
                                             int64_t lease_expires_us);
  std::vector<conveyor_status> release(std::span<const conveyor_lease> leases, int64_t now_us);
  uint32_t rescue_expired(int64_t now_us, uint32_t max_jobs);
  // false when the job does not exist or is already final.
  bool cancel(int64_t job_id, int64_t now_us);
  void set_queue_paused(std::string_view queue, bool paused, int64_t now_us);
  std::vector<QueueStats> queue_stats(int64_t now_us);
  // Known queues and whether each is paused (cheap; for discovery).
  std::vector<std::pair<std::string, bool>> list_queues();
  std::optional<Job> get_job(int64_t job_id, int64_t now_us);
  uint64_t purge_finished(int64_t finalized_before_us, uint32_t max_jobs);
  void set_rate_limit(std::string_view queue, const RateLimit& limit, int64_t now_us);
  // false when the queue had no override.
  bool delete_rate_limit(std::string_view queue);
  std::vector<RateLimitOverride> list_rate_limits();
  int64_t change_marker();
  // Only with CONVEYOR_CAP_NOTIFY. Blocks up to timeout_us.
  void wait_for_notification(int64_t timeout_us,
                             const std::function<void(int32_t kind, std::string_view queue)>& fn);

 private:
  Storage(std::shared_ptr<const Plugin> plugin, conveyor_storage* handle);

  std::shared_ptr<const Plugin> plugin_;
  const conveyor_storage_plugin* t_;  // plugin_->table(), cached
  conveyor_storage* handle_;          // owned: closed by the destructor
};

// Loads the configured plugin and opens it: resolve, load, open, migrate.
struct StorageConfig;
std::shared_ptr<Storage> open_storage(const StorageConfig& config);

}  // namespace conveyor
