/* Stub slots for the deliberately broken test plugins: every function
 * returns CONVEYOR_E_UNSUPPORTED. They only need to be non-NULL so each
 * plugin fails the loader for the one reason it was written for. */
#ifndef CONVEYOR_TEST_STUB_SLOTS_H
#define CONVEYOR_TEST_STUB_SLOTS_H

#include <conveyor/storage_plugin.h>

/* Not every plugin uses every stub. */
#define STUB static __attribute__((unused))

STUB conveyor_status stub_open(const conveyor_option* o, size_t n, conveyor_storage** out,
                               conveyor_error* err) {
  (void)o;
  (void)n;
  (void)out;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB void stub_close(conveyor_storage* s) { (void)s; }
STUB conveyor_status stub_migrate(conveyor_storage* s, conveyor_error* err) {
  (void)s;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB conveyor_status stub_enqueue(conveyor_storage* s, const conveyor_new_job* j, size_t n,
                                  int64_t* ids, conveyor_error* err) {
  (void)s;
  (void)j;
  (void)n;
  (void)ids;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB conveyor_status stub_claim(conveyor_storage* s, conveyor_str q, uint32_t max, int64_t token,
                                int64_t now, int64_t exp, conveyor_job_fn fn, void* ctx,
                                uint32_t* out, conveyor_error* err) {
  (void)s;
  (void)q;
  (void)max;
  (void)token;
  (void)now;
  (void)exp;
  (void)fn;
  (void)ctx;
  (void)out;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB conveyor_status stub_leases(conveyor_storage* s, const conveyor_lease* l, size_t n, int64_t t,
                                 conveyor_status* r, conveyor_error* err) {
  (void)s;
  (void)l;
  (void)n;
  (void)t;
  (void)r;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB conveyor_status stub_fail(conveyor_storage* s, conveyor_lease l, conveyor_str text,
                               int64_t retry, int64_t now, conveyor_error* err) {
  (void)s;
  (void)l;
  (void)text;
  (void)retry;
  (void)now;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB conveyor_status stub_rescue(conveyor_storage* s, int64_t now, uint32_t max, uint32_t* out,
                                 conveyor_error* err) {
  (void)s;
  (void)now;
  (void)max;
  (void)out;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB conveyor_status stub_cancel(conveyor_storage* s, int64_t id, int64_t now,
                                 conveyor_error* err) {
  (void)s;
  (void)id;
  (void)now;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB conveyor_status stub_pause(conveyor_storage* s, conveyor_str q, int32_t p, int64_t now,
                                conveyor_error* err) {
  (void)s;
  (void)q;
  (void)p;
  (void)now;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB conveyor_status stub_stats(conveyor_storage* s, int64_t now, conveyor_queue_stats_fn fn,
                                void* ctx, conveyor_error* err) {
  (void)s;
  (void)now;
  (void)fn;
  (void)ctx;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB conveyor_status stub_list_queues(conveyor_storage* s, conveyor_queue_fn fn, void* ctx,
                                      conveyor_error* err) {
  (void)s;
  (void)fn;
  (void)ctx;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB conveyor_status stub_get_job(conveyor_storage* s, int64_t id, int64_t now, conveyor_job_fn fn,
                                  void* ctx, conveyor_error* err) {
  (void)s;
  (void)id;
  (void)now;
  (void)fn;
  (void)ctx;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB conveyor_status stub_purge(conveyor_storage* s, int64_t before, uint32_t max, uint64_t* out,
                                conveyor_error* err) {
  (void)s;
  (void)before;
  (void)max;
  (void)out;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB conveyor_status stub_set_rate(conveyor_storage* s, conveyor_str q, double rate, uint32_t burst,
                                   int64_t now, conveyor_error* err) {
  (void)s;
  (void)q;
  (void)rate;
  (void)burst;
  (void)now;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB conveyor_status stub_delete_rate(conveyor_storage* s, conveyor_str q, conveyor_error* err) {
  (void)s;
  (void)q;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB conveyor_status stub_list_rates(conveyor_storage* s, conveyor_rate_limit_fn fn, void* ctx,
                                     conveyor_error* err) {
  (void)s;
  (void)fn;
  (void)ctx;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB conveyor_status stub_marker(conveyor_storage* s, int64_t* out, conveyor_error* err) {
  (void)s;
  (void)out;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}
STUB conveyor_status stub_wait(conveyor_storage* s, int64_t timeout, conveyor_notify_fn fn,
                               void* ctx, conveyor_error* err) {
  (void)s;
  (void)timeout;
  (void)fn;
  (void)ctx;
  (void)err;
  return CONVEYOR_E_UNSUPPORTED;
}

/* Designated initialisers for the slots, in table order; a plugin that
 * wants one slot NULL leaves its group out and lists the others. */
#define STUB_SLOTS_BEFORE_CLAIM \
  .open = stub_open, .close = stub_close, .migrate = stub_migrate, .enqueue = stub_enqueue
#define STUB_SLOT_CLAIM .claim = stub_claim
#define STUB_SLOTS_AFTER_CLAIM                                                                \
  .complete = stub_leases, .fail = stub_fail, .extend_leases = stub_leases,                   \
  .release = stub_leases, .rescue_expired = stub_rescue, .cancel = stub_cancel,               \
  .set_queue_paused = stub_pause, .queue_stats = stub_stats, .list_queues = stub_list_queues, \
  .get_job = stub_get_job, .purge_finished = stub_purge, .set_rate_limit = stub_set_rate,     \
  .delete_rate_limit = stub_delete_rate, .list_rate_limits = stub_list_rates,                 \
  .change_marker = stub_marker
#define STUB_SLOTS_1_0_REQUIRED STUB_SLOTS_BEFORE_CLAIM, STUB_SLOT_CLAIM, STUB_SLOTS_AFTER_CLAIM

/* The exported entry point of a stub plugin: table for any minor of this
 * major, NULL for another major. */
#define STUB_ENTRY(table)                                                              \
  CONVEYOR_PLUGIN_EXPORT const conveyor_storage_plugin* conveyor_storage_plugin_entry( \
      uint32_t host_abi_major, uint32_t host_abi_minor) {                              \
    (void)host_abi_minor;                                                              \
    return host_abi_major == CONVEYOR_ABI_MAJOR ? &(table) : NULL;                     \
  }

#endif
