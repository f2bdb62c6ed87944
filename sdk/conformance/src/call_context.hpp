// What the suite hands a plugin as a callback's ctx: the host binding's
// Reports, named after its operation. Each call gets its own context, kept
// alive until the process ends: storage_plugin.h allows callbacks only during
// the call, and a plugin that calls back later must be caught (counted as a
// late callback) rather than scribble over a dead stack frame.
#pragma once

#include <conveyor/host/plugin_binding.hpp>

#include <string>
#include <vector>

namespace conveyor::conformance {

struct CallContext : host::Reports {
  explicit CallContext(std::string op_name) : op(std::move(op_name)) {}
  const std::string op;

  void late_callback() noexcept override;
};

// A new context that is never freed (see above).
CallContext& new_call_context(std::string op);

// The operations whose callbacks arrived after their call had returned, since
// the last time this was called; clears the list.
std::vector<std::string> take_late_callbacks();

}  // namespace conveyor::conformance
