#include <conveyor/internal/limit_resolver.hpp>

namespace conveyor {

LimitResolver::LimitResolver(const EngineConfig& engine,
                             const std::map<std::string, QueueConfig>& queues)
    : config_enabled_(engine.rate_limit_enabled),
      default_(engine.default_limit()),
      overrides_(std::make_shared<const OverrideMap>()) {
  for (const auto& [name, q] : queues)
    if (q.rate_limit) static_.emplace(name, *q.rate_limit);
}

EffectiveLimit LimitResolver::resolve(std::string_view queue, bool ignore_switch) const {
  if (!ignore_switch && !enabled()) return {std::nullopt, LimitSource::kDisabled};
  std::shared_ptr<const OverrideMap> overrides;
  {
    MutexLock lock(mu_);
    overrides = overrides_;
  }
  if (auto it = overrides->find(queue); it != overrides->end())
    return {it->second.limit, LimitSource::kOverride};
  if (auto it = static_.find(queue); it != static_.end())
    return {it->second, LimitSource::kQueueConfig};
  if (default_) return {default_, LimitSource::kDefault};
  return {std::nullopt, LimitSource::kNone};
}

void LimitResolver::set_stored_switch(std::optional<bool> enabled) {
  const int next = enabled ? (*enabled ? 1 : 0) : -1;
  if (stored_switch_.exchange(next, std::memory_order_acq_rel) != next)
    generation_.fetch_add(1, std::memory_order_acq_rel);
}

RateLimitingState LimitResolver::switch_state() const {
  const int stored = stored_switch_.load(std::memory_order_acquire);
  if (stored < 0) return {config_enabled_, SwitchSource::kConfig};
  return {stored == 1, SwitchSource::kStorage};
}

void LimitResolver::set_overrides(std::vector<RateLimitOverride> overrides) {
  auto map = std::make_shared<OverrideMap>();
  for (auto& o : overrides) {
    std::string name = o.queue;
    map->insert_or_assign(std::move(name), std::move(o));
  }
  {
    MutexLock lock(mu_);
    overrides_ = std::move(map);
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

std::vector<RateLimitOverride> LimitResolver::overrides() const {
  std::shared_ptr<const OverrideMap> snapshot;
  {
    MutexLock lock(mu_);
    snapshot = overrides_;
  }
  std::vector<RateLimitOverride> out;
  out.reserve(snapshot->size());
  for (const auto& [name, o] : *snapshot) out.push_back(o);
  return out;
}

void LimitResolver::set_key_overrides(std::vector<KeyOverride> overrides) {
  std::map<std::string, std::shared_ptr<KeyOverrides>, std::less<>> by_queue;
  for (const KeyOverride& o : overrides) {
    auto& q = by_queue[o.queue];
    if (!q) q = std::make_shared<KeyOverrides>();
    if (!o.key) {
      if (o.limit) q->every_key = o.limit;
      continue;
    }
    if (o.limit) q->limits.insert_or_assign(*o.key, *o.limit);
    if (o.weight) q->weights.insert_or_assign(*o.key, *o.weight);
  }
  {
    MutexLock lock(mu_);
    if (overrides == key_override_list_) return;  // nothing changed: no re-resolve
    key_overrides_.clear();
    for (auto& [queue, q] : by_queue) key_overrides_.emplace(queue, std::move(q));
    key_override_list_ = std::move(overrides);
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

std::shared_ptr<const LimitResolver::KeyOverrides> LimitResolver::key_overrides(
    std::string_view queue) const {
  static const auto kNone = std::make_shared<const KeyOverrides>();
  MutexLock lock(mu_);
  const auto it = key_overrides_.find(queue);
  return it == key_overrides_.end() ? kNone : it->second;
}

std::vector<KeyOverride> LimitResolver::key_overrides() const {
  MutexLock lock(mu_);
  return key_override_list_;
}

}  // namespace conveyor
