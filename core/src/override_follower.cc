#include "override_follower.hpp"

#include <conveyor/validation.hpp>

namespace conveyor {

OverrideFollower::OverrideFollower(Storage& storage, LimitResolver& limits)
    : storage_(storage),
      limits_(limits),
      has_switch_(storage.has_slot(StorageSlot::kSwapSharedState)),
      has_key_rows_(storage.has_slot(StorageSlot::kListKeySettings)) {}

bool OverrideFollower::refresh() {
  MutexLock lock(mu_);
  const uint64_t start = limits_.generation();
  if (has_switch_) {
    const Storage::SharedRecord r = storage_.swap_shared_state(kSwitchKey, -1, 0);
    limits_.set_stored_switch(r.version == 0 ? std::nullopt : std::optional<bool>(r.value != 0));
  }
  // The marker is read before the list: a change committed between the two
  // reads moves the marker again, so the next refresh reads it.
  const int64_t marker = storage_.change_marker();
  if (marker_known_ && marker == marker_) return limits_.generation() != start;
  limits_.set_overrides(storage_.list_rate_limits());
  if (has_key_rows_) limits_.set_key_overrides(storage_.list_key_settings());
  marker_ = marker;
  marker_known_ = true;
  return limits_.generation() != start;
}

void OverrideFollower::set_switch(bool enabled) {
  // Compare-and-set from the record read: a concurrent flip by another
  // process makes ours retry on top of it (the last writer wins, nothing is
  // lost half-way).
  Storage::SharedRecord r = storage_.swap_shared_state(kSwitchKey, -1, 0);
  for (int i = 0; i < 16 && !r.applied; ++i)
    r = storage_.swap_shared_state(kSwitchKey, r.version, enabled ? 1 : 0);
  if (!r.applied)
    throw StorageError(CONVEYOR_E_UNAVAILABLE,
                       "setting the rate-limit kill switch lost 16 races to other processes; "
                       "try again");
  refresh();
}

void OverrideFollower::set(std::string_view queue, const RateLimit& limit, int64_t now_us) {
  validate_queue_name(queue);
  validate_rate(limit.rate_per_sec);
  validate_burst(limit.burst, false);
  storage_.set_rate_limit(queue, limit, now_us);
  refresh();
}

bool OverrideFollower::remove(std::string_view queue) {
  validate_queue_name(queue);
  const bool existed = storage_.delete_rate_limit(queue);
  refresh();
  return existed;
}

void OverrideFollower::set_key(const KeyOverride& setting, int64_t now_us) {
  validate_queue_name(setting.queue);
  if (setting.key) validate_job_key(*setting.key);
  if (!setting.limit && !setting.weight)
    throw ValidationError("setting", "a key setting needs a rate limit or a weight");
  if (setting.limit) {
    validate_rate(setting.limit->rate_per_sec);
    validate_burst(setting.limit->burst, false);
  }
  if (setting.weight) {
    if (!setting.key)
      throw ValidationError("weight", "a weight is set for one key, not for every key");
    if (*setting.weight < 1 || *setting.weight > kKeyWeightMax)
      throw ValidationError("weight", "weight must be 1.." + std::to_string(kKeyWeightMax) +
                                          ", got " + std::to_string(*setting.weight));
  }
  storage_.set_key_setting(setting, now_us);
  refresh();
}

bool OverrideFollower::remove_key(std::string_view queue, const std::optional<std::string>& key,
                                  bool limit, bool weight) {
  validate_queue_name(queue);
  if (key) validate_job_key(*key);
  const bool existed = storage_.delete_key_setting(queue, key, limit, weight);
  refresh();
  return existed;
}

}  // namespace conveyor
