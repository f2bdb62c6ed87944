/* A full 1.0 table with the required slot claim left NULL: refused, naming
 * the slot. */
#include <conveyor/storage_plugin.h>

#include "stub_slots.h"

static const conveyor_storage_plugin table = {
    .struct_size = sizeof(conveyor_storage_plugin),
    .abi_major = CONVEYOR_ABI_MAJOR,
    .abi_minor = CONVEYOR_ABI_MINOR,
    .name = "null_slot",
    .version = "0.0.1",
    .kind = CONVEYOR_KIND_CANONICAL,
    STUB_SLOTS_BEFORE_CLAIM,
    .claim = NULL,
    STUB_SLOTS_AFTER_CLAIM,
};

STUB_ENTRY(table)
