#include "served_kinds.hpp"

namespace conveyor {

void ServedKinds::add(const std::string& kind) {
  MutexLock lock(mu_);
  if (consumers_[kind]++ == 0) publish();
}

void ServedKinds::remove(const std::string& kind) {
  MutexLock lock(mu_);
  auto it = consumers_.find(kind);
  if (it == consumers_.end()) return;
  if (--it->second == 0) {
    consumers_.erase(it);
    publish();
  }
}

bool ServedKinds::contains(std::string_view kind) const {
  MutexLock lock(mu_);
  return consumers_.find(kind) != consumers_.end();
}

ServedKinds::Snapshot ServedKinds::snapshot() const {
  MutexLock lock(mu_);
  return snapshot_;
}

void ServedKinds::publish() {
  auto kinds = std::make_shared<std::vector<std::string>>();
  kinds->reserve(consumers_.size());
  for (const auto& [kind, n] : consumers_) kinds->push_back(kind);
  snapshot_ = std::move(kinds);
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace conveyor
