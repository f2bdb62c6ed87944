#include "handler_registry.hpp"

#include <conveyor/validation.hpp>

#include <algorithm>

namespace conveyor {

bool HandlerRegistry::add(std::string kind, RegisteredHandler handler) {
  validate_job_kind(kind);
  WriterMutexLock lock(mu_);
  auto [it, added] = handlers_.insert_or_assign(std::move(kind), std::move(handler));
  return added;
}

RegisteredHandler HandlerRegistry::find(const std::string& kind) const {
  ReaderMutexLock lock(mu_);
  auto it = handlers_.find(kind);
  return it == handlers_.end() ? RegisteredHandler{} : it->second;
}

std::vector<std::string> HandlerRegistry::kinds() const {
  ReaderMutexLock lock(mu_);
  std::vector<std::string> out;
  out.reserve(handlers_.size());
  for (const auto& [kind, h] : handlers_) out.push_back(kind);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace conveyor
