#include <conveyor/limit_resolver.hpp>

namespace conveyor {

LimitResolver::LimitResolver(const EngineConfig& engine,
                             const std::map<std::string, QueueConfig>& queues)
    : enabled_(engine.rate_limit_enabled),
      default_(engine.default_limit()),
      overrides_(std::make_shared<const OverrideMap>()) {
  for (const auto& [name, q] : queues)
    if (q.rate_limit) static_.emplace(name, *q.rate_limit);
}

EffectiveLimit LimitResolver::resolve(std::string_view queue) const {
  if (!enabled_) return {std::nullopt, LimitSource::kDisabled};
  std::shared_ptr<const OverrideMap> overrides;
  {
    std::lock_guard lock(mu_);
    overrides = overrides_;
  }
  if (auto it = overrides->find(queue); it != overrides->end())
    return {it->second.limit, LimitSource::kOverride};
  if (auto it = static_.find(queue); it != static_.end())
    return {it->second, LimitSource::kQueueConfig};
  if (default_) return {default_, LimitSource::kDefault};
  return {std::nullopt, LimitSource::kNone};
}

void LimitResolver::set_overrides(std::vector<RateLimitOverride> overrides) {
  auto map = std::make_shared<OverrideMap>();
  for (auto& o : overrides) {
    std::string name = o.queue;
    map->insert_or_assign(std::move(name), std::move(o));
  }
  {
    std::lock_guard lock(mu_);
    overrides_ = std::move(map);
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

std::vector<RateLimitOverride> LimitResolver::overrides() const {
  std::shared_ptr<const OverrideMap> snapshot;
  {
    std::lock_guard lock(mu_);
    snapshot = overrides_;
  }
  std::vector<RateLimitOverride> out;
  out.reserve(snapshot->size());
  for (const auto& [name, o] : *snapshot) out.push_back(o);
  return out;
}

}  // namespace conveyor
