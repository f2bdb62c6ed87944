// A non-conforming C++ plugin whose entry throws: the loader must catch it
// and refuse the plugin instead of letting the exception reach the host.
#include <conveyor/storage_plugin.h>

#include <stdexcept>

extern "C" CONVEYOR_PLUGIN_EXPORT const conveyor_storage_plugin* conveyor_storage_plugin_entry(
    uint32_t /*host_abi_major*/, uint32_t /*host_abi_minor*/) {
  throw std::runtime_error("entry exploded");
}
