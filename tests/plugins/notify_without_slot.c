/* Advertises CONVEYOR_CAP_NOTIFY without implementing wait_for_notification:
 * refused, since the host would wait on a NULL slot. */
#include <conveyor/storage_plugin.h>

#include "stub_slots.h"

static const conveyor_storage_plugin table = {
    .struct_size = sizeof(conveyor_storage_plugin),
    .abi_major = CONVEYOR_ABI_MAJOR,
    .abi_minor = CONVEYOR_ABI_MINOR,
    .name = "notify_without_slot",
    .version = "0.0.1",
    .kind = CONVEYOR_KIND_CANONICAL,
    .capabilities = CONVEYOR_CAP_DURABLE | CONVEYOR_CAP_NOTIFY,
    STUB_SLOTS_1_0_REQUIRED,
    .wait_for_notification = NULL,
};

STUB_ENTRY(table)
