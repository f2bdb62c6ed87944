/* A complete table without a name: refused (the host logs and reports it). */
#include <conveyor/storage_plugin.h>

#include "stub_slots.h"

static const conveyor_storage_plugin table = {
    .struct_size = sizeof(conveyor_storage_plugin),
    .abi_major = CONVEYOR_ABI_MAJOR,
    .abi_minor = CONVEYOR_ABI_MINOR,
    .name = NULL,
    .version = "0.0.1",
    .kind = CONVEYOR_KIND_CANONICAL,
    STUB_SLOTS_1_0_REQUIRED,
};

STUB_ENTRY(table)
