/* A working in-memory plugin in plain C99 that was "built against a newer
 * minor": it claims abi_minor = CONVEYOR_ABI_MINOR + 1 and its table has one
 * slot more than this host knows. The host must load it and use the slots it
 * knows (storage_plugin.h rule 3).
 *
 * The storage is the C example plugin's (sdk/examples/memory_c/memory.c,
 * compiled into this file), so there is one in-memory C plugin to maintain.
 * This file adds only its own table: no notifications (capabilities 0, the
 * optional slot NULL), and pause, stats and setting or deleting rate limits
 * return CONVEYOR_E_UNSUPPORTED, so the tests have a partial plugin whose
 * required slots are all non-NULL. */
#define _POSIX_C_SOURCE 200809L /* as memory.c: before any system header */

#include <conveyor/storage_plugin.h>

/* memory.c exports its own entry; renamed and hidden, it stays an unused
 * internal function, and the entry below is the library's only export. Its
 * table, memory_plugin, is the start of this one. */
#undef CONVEYOR_PLUGIN_EXPORT
#define CONVEYOR_PLUGIN_EXPORT
#define conveyor_storage_plugin_entry memory_c_entry
#include "memory.c"
#undef conveyor_storage_plugin_entry
#undef CONVEYOR_PLUGIN_EXPORT
#define CONVEYOR_PLUGIN_EXPORT __attribute__((visibility("default")))

static conveyor_status no_pause(conveyor_storage* s, conveyor_str queue, int32_t paused,
                                int64_t now_us, conveyor_error* err) {
  (void)s;
  (void)queue;
  (void)paused;
  (void)now_us;
  return set_error(err, CONVEYOR_E_UNSUPPORTED, "newer_minor test plugin: pausing unsupported");
}

static conveyor_status no_stats(conveyor_storage* s, int64_t now_us,
                                conveyor_queue_stats_fn on_stats, void* ctx, conveyor_error* err) {
  (void)s;
  (void)now_us;
  (void)on_stats;
  (void)ctx;
  return set_error(err, CONVEYOR_E_UNSUPPORTED, "newer_minor test plugin: stats unsupported");
}

static conveyor_status no_set_rate_limit(conveyor_storage* s, conveyor_str queue,
                                         double rate_per_sec, uint32_t burst, int64_t now_us,
                                         conveyor_error* err) {
  (void)s;
  (void)queue;
  (void)rate_per_sec;
  (void)burst;
  (void)now_us;
  return set_error(err, CONVEYOR_E_UNSUPPORTED, "newer_minor test plugin: rate limits unsupported");
}

static conveyor_status no_delete_rate_limit(conveyor_storage* s, conveyor_str queue,
                                            conveyor_error* err) {
  (void)s;
  (void)queue;
  return set_error(err, CONVEYOR_E_UNSUPPORTED, "newer_minor test plugin: rate limits unsupported");
}

/* The slot a hypothetical minor 1 appended. An older host never sees it. */
static conveyor_status future_slot(conveyor_storage* s, conveyor_error* err) {
  (void)s;
  (void)err;
  return CONVEYOR_OK;
}

/* The table as a newer header would declare it: the 1.0 table (its end has
 * no padding: it ends in a pointer) followed by one appended slot. */
typedef struct newer_storage_plugin {
  conveyor_storage_plugin v1_0;
  conveyor_status (*future_slot)(conveyor_storage* storage, conveyor_error* err);
} newer_storage_plugin;

/* memory.c's table with what differs here; filled once, on the first entry call. */
static newer_storage_plugin table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void fill_table(void) {
  table.v1_0 = memory_plugin;
  table.v1_0.struct_size = sizeof(newer_storage_plugin);
  table.v1_0.abi_minor = CONVEYOR_ABI_MINOR + 1;
  table.v1_0.name = "newer_minor";
  table.v1_0.version = "0.0.1";
  table.v1_0.capabilities = 0;
  table.v1_0.set_queue_paused = no_pause;
  table.v1_0.queue_stats = no_stats;
  table.v1_0.job_counts = no_stats; /* the 1.1 count: refused the same way */
  table.v1_0.set_rate_limit = no_set_rate_limit;
  table.v1_0.delete_rate_limit = no_delete_rate_limit;
  table.v1_0.wait_for_notification = NULL;
  table.future_slot = future_slot;
}

CONVEYOR_PLUGIN_EXPORT const conveyor_storage_plugin* conveyor_storage_plugin_entry(
    uint32_t host_abi_major, uint32_t host_abi_minor) {
  (void)host_abi_minor; /* serves any 1.x host: older ones read a prefix */
  if (host_abi_major != CONVEYOR_ABI_MAJOR) return NULL;
  pthread_once(&table_once, fill_table);
  return &table.v1_0;
}
