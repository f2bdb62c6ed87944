// HandlerRegistry: the job kinds this process runs and their handlers.
// Thread-safe: lookups (every job) take a shared lock; registration is rare.
#pragma once

#include <conveyor/engine.hpp>

#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace conveyor {

class HandlerRegistry {
 public:
  // Registers or replaces the handler of kind (validated: ValidationError);
  // true when the kind is new.
  bool add(std::string kind, Handler handler);
  // The kind's handler, or an empty Handler when none is registered.
  Handler find(const std::string& kind) const;
  // The registered kinds, sorted (for error messages).
  std::vector<std::string> kinds() const;

 private:
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, Handler> handlers_;  // mu_
};

}  // namespace conveyor
