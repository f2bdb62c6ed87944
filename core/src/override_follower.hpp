// OverrideFollower: keeps the LimitResolver's rate-limit overrides and the
// live kill switch equal to what storage holds, which any process may
// change. A refresh reads the change marker and reads the list only when the
// marker moved; on a plugin with swap_shared_state (ABI 1.2) it also reads
// the switch's record (kSwitchKey), one small read per refresh. Refreshes are
// serialised under one lock with the marker they install, so two refreshes
// (maintenance, an API call, a notification) can never interleave and
// install an older list over a newer one.
//
// Thread-safe. refresh() calls storage; request_refresh() never does, so it
// is safe inside a plugin's callback.
#pragma once

#include <conveyor/internal/limit_resolver.hpp>
#include <conveyor/internal/mutex.hpp>
#include <conveyor/internal/storage.hpp>

#include <atomic>
#include <cstdint>
#include <string_view>

namespace conveyor {

class OverrideFollower {
 public:
  OverrideFollower(Storage& storage, LimitResolver& limits);

  // Reads storage now. Returns true when the effective overrides changed.
  // Throws StorageError (the installed overrides stay as they were).
  bool refresh() EXCLUDES(mu_);
  // Stores the kill switch for every process (set_rate_limiting_enabled),
  // then refreshes. Throws StorageError (CONVEYOR_E_UNSUPPORTED before ABI 1.2).
  void set_switch(bool enabled) EXCLUDES(mu_);
  // The switch's record: version 0 (never written) leaves the config's
  // rate_limit_enabled in charge; else value 1 enabled, 0 disabled.
  static constexpr std::string_view kSwitchKey = "ratelimit.enabled";

  // Stores (validated: ValidationError) or deletes the queue's override,
  // then refreshes, so this process follows its own change at once. remove()
  // returns false when the queue had none. Throw StorageError.
  void set(std::string_view queue, const RateLimit& limit, int64_t now_us) EXCLUDES(mu_);
  bool remove(std::string_view queue) EXCLUDES(mu_);
  // Stores (validated: ValidationError) or clears a setting of queue's keys
  // (KeyOverride; a plugin of ABI 1.5: StorageError CONVEYOR_E_UNSUPPORTED
  // naming the plugin otherwise), then refreshes. remove_key() clears the
  // limit and/or the weight of key (nullopt: every key); false when none of
  // them was set.
  void set_key(const KeyOverride& setting, int64_t now_us) EXCLUDES(mu_);
  bool remove_key(std::string_view queue, const std::optional<std::string>& key, bool limit,
                  bool weight) EXCLUDES(mu_);
  // Asks for a refresh soon, from any thread or callback (see take_request).
  void request_refresh() { requested_.store(true, std::memory_order_release); }
  // Consumes a pending request: true when one was made since the last call.
  bool take_request() { return requested_.exchange(false, std::memory_order_acq_rel); }

 private:
  // Constant after construction.
  Storage& storage_;
  LimitResolver& limits_;
  const bool has_switch_;    // the plugin has swap_shared_state
  const bool has_key_rows_;  // the plugin has list_key_settings (ABI 1.5)

  // Guarded by mu_ (which also serialises refreshes).
  Mutex mu_;
  int64_t marker_ GUARDED_BY(mu_) = 0;  // the marker of the installed list
  bool marker_known_ GUARDED_BY(mu_) = false;

  // Atomic: any thread.
  std::atomic<bool> requested_{false};
};

}  // namespace conveyor
