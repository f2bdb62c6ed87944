// LimitResolver: a queue's effective rate limit, by the precedence of
// docs/reference.md (first match wins, layers replace, never stack):
//   1. the kill switch is off          -> unlimited, source "disabled"
//      (storage's switch, conveyor ratelimit disable/enable, if it has
//      one; else [engine] rate_limit_enabled)
//   2. the queue's durable override    -> source "override"
//   3. [queues.NAME] rate_limit        -> source "queue-config"
//   4. the global default              -> source "default"
//   5. nothing                         -> unlimited, source "none"
//
// Thread-safe: resolve() may run on any thread while set_overrides() swaps in
// a new snapshot. generation() changes whenever an answer may have changed,
// so a dispatcher re-resolves only then (an atomic load per poll otherwise).
#pragma once

#include <conveyor/config.hpp>
#include <conveyor/internal/mutex.hpp>
#include <conveyor/rate_limit.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor {

class LimitResolver {
 public:
  LimitResolver(const EngineConfig& engine, const std::map<std::string, QueueConfig>& queues);

  // ignore_switch: the limit that applies when the kill switch is on.
  EffectiveLimit resolve(std::string_view queue, bool ignore_switch = false) const EXCLUDES(mu_);

  // Replaces the overrides snapshot (as read from storage).
  void set_overrides(std::vector<RateLimitOverride> overrides) EXCLUDES(mu_);
  std::vector<RateLimitOverride> overrides() const EXCLUDES(mu_);

  // The kill switch as storage holds it: nullopt when storage says nothing
  // (the config's rate_limit_enabled applies).
  void set_stored_switch(std::optional<bool> enabled);
  RateLimitingState switch_state() const;

  // The run-time settings of one queue's keys (KeyOverride), by key.
  struct KeyOverrides {
    std::optional<RateLimit> every_key;  // --per-key
    std::map<std::string, RateLimit, std::less<>> limits;
    std::map<std::string, uint32_t, std::less<>> weights;
    bool empty() const { return !every_key && limits.empty() && weights.empty(); }
  };
  // Replaces the key settings snapshot (as read from storage).
  void set_key_overrides(std::vector<KeyOverride> overrides) EXCLUDES(mu_);
  // queue's key settings (never null; empty when it has none). Kill switch
  // not applied: the caller asks enabled().
  std::shared_ptr<const KeyOverrides> key_overrides(std::string_view queue) const EXCLUDES(mu_);
  // Every key setting, in (queue, every key last, key) order.
  std::vector<KeyOverride> key_overrides() const EXCLUDES(mu_);

  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  bool enabled() const { return switch_state().enabled; }
  // The global default, if any (shown even when disabled).
  const std::optional<RateLimit>& default_limit() const { return default_; }

 private:
  using OverrideMap = std::map<std::string, RateLimitOverride, std::less<>>;

  // Constant after construction.
  const bool config_enabled_;
  std::optional<RateLimit> default_;
  std::map<std::string, RateLimit, std::less<>> static_;

  // Guarded by mu_: the snapshot pointer (the map it points at is never
  // changed).
  mutable Mutex mu_;
  std::shared_ptr<const OverrideMap> overrides_ GUARDED_BY(mu_);
  // Each queue's key settings, and the list as stored.
  std::map<std::string, std::shared_ptr<const KeyOverrides>, std::less<>> key_overrides_
      GUARDED_BY(mu_);
  std::vector<KeyOverride> key_override_list_ GUARDED_BY(mu_);

  // Atomic: any thread.
  // -1: storage says nothing; 0: disabled there; 1: enabled there.
  std::atomic<int> stored_switch_{-1};
  std::atomic<uint64_t> generation_{1};
};

}  // namespace conveyor
