// HandlerRegistry: the job kinds this process runs and their handlers.
// Thread-safe: lookups (every job) take a shared lock; registration is rare.
#pragma once

#include <conveyor/handler.hpp>
#include <conveyor/internal/mutex.hpp>

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace conveyor {

// A kind's handler: exactly one of the two is set once registered.
struct RegisteredHandler {
  Handler run;         // synchronous: the outcome is how it returns
  AsyncHandler start;  // asynchronous: the outcome comes through a JobResult
  explicit operator bool() const { return run || start; }
};

class HandlerRegistry {
 public:
  // Registers or replaces the handler of kind (validated: ValidationError);
  // true when the kind is new.
  bool add(std::string kind, RegisteredHandler handler) EXCLUDES(mu_);
  // The kind's handler, or an empty one when none is registered.
  RegisteredHandler find(const std::string& kind) const EXCLUDES(mu_);
  // The registered kinds, sorted (for error messages).
  std::vector<std::string> kinds() const EXCLUDES(mu_);

 private:
  // Guarded by mu_.
  mutable SharedMutex mu_;
  std::unordered_map<std::string, RegisteredHandler> handlers_ GUARDED_BY(mu_);
};

}  // namespace conveyor
