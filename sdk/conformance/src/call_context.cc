#include "call_context.hpp"

#include <deque>
#include <memory>

namespace conveyor::conformance {
namespace {

struct Registry {
  std::mutex mu;
  std::deque<std::unique_ptr<CallContext>> contexts;
  std::vector<std::string> late;
};

Registry& registry() {
  static Registry* r = new Registry;  // outlives every plugin thread
  return *r;
}

}  // namespace

CallContext& new_call_context(std::string op) {
  Registry& r = registry();
  auto context = std::make_unique<CallContext>(std::move(op));
  CallContext& ref = *context;
  std::lock_guard lock(r.mu);
  // Contexts of earlier tests hold no data any more (their results were moved
  // out), so keeping them costs a few hundred bytes each.
  r.contexts.push_back(std::move(context));
  return ref;
}

std::vector<std::string> take_late_callbacks() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> out;
  out.swap(r.late);
  return out;
}

void CallContext::late_callback() noexcept {
  try {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    r.late.push_back(op);
  } catch (...) {
    // Out of memory: the late callback goes unrecorded; nothing may reach the plugin.
  }
}

}  // namespace conveyor::conformance
