// PluginStorage: Storage over one open plugin handle. Every call goes through
// the plugin's C function table; errors come back as StorageError. The handle
// keeps its Plugin (and so the library) alive.
#pragma once

#include <conveyor/internal/storage.hpp>

namespace conveyor {

// Thread-safe as Storage promises (the plugin promises it for its handle).
class PluginStorage final : public Storage {
 public:
  // Opens the plugin with options and migrates the schema. Throws StorageError.
  static std::shared_ptr<PluginStorage> open(
      std::shared_ptr<const Plugin> plugin,
      const std::vector<std::pair<std::string, std::string>>& options);
  ~PluginStorage() override;

  const PluginInfo& plugin_info() const override { return plugin_->info(); }
  bool has_capability(uint64_t cap) const override {
    return (plugin_->info().capabilities & cap) != 0;
  }

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
  PluginStorage(std::shared_ptr<const Plugin> plugin, conveyor_storage* handle);

  std::shared_ptr<const Plugin> plugin_;
  const conveyor_storage_plugin* t_;  // plugin_->table(), cached
  conveyor_storage* handle_;          // owned: closed by the destructor
};

}  // namespace conveyor
