// Checks of arguments the SDK's adapter leaves to the plugin.
#ifndef CONVEYOR_PLUGINS_SQLITE_ARGUMENTS_HPP
#define CONVEYOR_PLUGINS_SQLITE_ARGUMENTS_HPP

#include <conveyor/storage_plugin.hpp>

#include <string>
#include <string_view>

namespace conveyor::sqlite {

inline void require_queue(std::string_view queue, const char* op) {
  if (queue.empty())
    throw sdk::Error(CONVEYOR_E_INVALID, std::string(op) + ": queue name is empty");
}

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_ARGUMENTS_HPP
