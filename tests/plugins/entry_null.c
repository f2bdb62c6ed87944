/* A plugin whose entry returns NULL: it does not serve the host's major. */
#include <conveyor/storage_plugin.h>

CONVEYOR_PLUGIN_EXPORT const conveyor_storage_plugin* conveyor_storage_plugin_entry(
    uint32_t host_abi_major, uint32_t host_abi_minor) {
  (void)host_abi_major;
  (void)host_abi_minor;
  return NULL;
}
