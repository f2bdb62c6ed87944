/* A plugin that ignores the host's major and returns a table for ABI 2.0:
 * the loader must refuse it and name both versions. */
#include <conveyor/storage_plugin.h>

#include "stub_slots.h"

static const conveyor_storage_plugin table = {
    .struct_size = sizeof(conveyor_storage_plugin),
    .abi_major = CONVEYOR_ABI_MAJOR + 1,
    .abi_minor = 0,
    .name = "wrong_major",
    .version = "0.0.1",
    .kind = CONVEYOR_KIND_CANONICAL,
    STUB_SLOTS_1_0_REQUIRED,
};

CONVEYOR_PLUGIN_EXPORT const conveyor_storage_plugin* conveyor_storage_plugin_entry(
    uint32_t host_abi_major, uint32_t host_abi_minor) {
  (void)host_abi_major;
  (void)host_abi_minor;
  return &table;
}
