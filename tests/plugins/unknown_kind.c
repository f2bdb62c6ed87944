/* A table as a newer minor might declare it: a kind and a capability bit
 * this host does not know. The host loads it (storage_plugin.h rule 7), warns
 * once and shows both in `conveyor plugin info`; its slots are stubs. */
#include <conveyor/storage_plugin.h>

#include "stub_slots.h"

static const conveyor_storage_plugin table = {
    .struct_size = sizeof(conveyor_storage_plugin),
    .abi_major = CONVEYOR_ABI_MAJOR,
    .abi_minor = CONVEYOR_ABI_MINOR,
    .name = "unknown_kind",
    .version = "0.0.1",
    .kind = 99,
    .capabilities = CONVEYOR_CAP_DURABLE | ((uint64_t)1 << 40),
    STUB_SLOTS_1_0_REQUIRED,
};

STUB_ENTRY(table)
