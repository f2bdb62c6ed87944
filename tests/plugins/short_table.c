/* A plugin whose table claims to end before claim (struct_size smaller than
 * CONVEYOR_PLUGIN_V1_0_SIZE), as a pre-1.0 build would: refused. */
#include <conveyor/storage_plugin.h>

#include "stub_slots.h"

static const conveyor_storage_plugin table = {
    .struct_size = offsetof(conveyor_storage_plugin, claim),
    .abi_major = CONVEYOR_ABI_MAJOR,
    .abi_minor = CONVEYOR_ABI_MINOR,
    .name = "short_table",
    .version = "0.0.1",
    .kind = CONVEYOR_KIND_CANONICAL,
    STUB_SLOTS_1_0_REQUIRED,
};

STUB_ENTRY(table)
