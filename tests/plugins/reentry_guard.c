/* reentry_guard: a working in-memory plugin that fails loudly when the host
 * calls into a handle from inside one of that handle's callbacks, which
 * storage_plugin.h says a host never does ("Callbacks").
 *
 * The store is the SDK's memory_c example, compiled in unchanged (its entry
 * renamed and hidden), so the jobs behave exactly as the example's. Every
 * slot is wrapped: a callback runs with a thread-local mark naming its handle,
 * and a slot called on that handle while the mark is set prints
 *   reentry_guard: SLOT re-entered from a callback (CALLBACK) of the same handle
 * on stderr and aborts. Its wait_for_notification holds the store's lock
 * while it calls on_notify, as the header permits: a host that re-entered
 * would deadlock there; the guard makes it fail at once instead.
 *
 * Capabilities: CONVEYOR_CAP_NOTIFY only (not durable, not multi-process).
 * Options: as memory_c (name = "..."). With REENTRY_GUARD_TRACE set, every
 * on_notify that returned is traced on stderr.
 *
 * Built a second time with GUARD_PER_HANDLE_STORE as per_handle_store: the
 * same, but each handle opened without options has a store of its own. */
#define _POSIX_C_SOURCE 200809L /* as memory.c: before any system header */

#include <conveyor/storage_plugin.h>

/* memory.c exports its entry: here it becomes a static helper instead. */
#undef CONVEYOR_PLUGIN_EXPORT
#define CONVEYOR_PLUGIN_EXPORT static
#define conveyor_storage_plugin_entry memory_c_entry
#include "memory.c"
#undef conveyor_storage_plugin_entry
#undef CONVEYOR_PLUGIN_EXPORT
#define CONVEYOR_PLUGIN_EXPORT __attribute__((visibility("default")))

/* The handle whose callback this thread is running, and which callback
 * (NULL: none). Saved and restored around each callback, so a callback of
 * one handle may call another handle. */
static __thread const conveyor_storage* guard_handle = NULL;
static __thread const char* guard_callback = NULL;

static void guard_enter(const conveyor_storage* h, const char* slot) {
  if (h == NULL || h != guard_handle) return;
  fprintf(stderr,
          "reentry_guard: %s re-entered from a callback (%s) of the same handle; "
          "storage_plugin.h: the host never calls into a handle from inside a callback of "
          "that handle\n",
          slot, guard_callback);
  fflush(stderr);
  abort();
}

/* One callback the host passed, with the handle it belongs to. */
typedef struct guard_cb {
  const conveyor_storage* handle;
  const char* name;
  void* fn;
  void* ctx;
} guard_cb;

#define GUARD_CALL(cb, call)                        \
  do {                                              \
    const conveyor_storage* saved_h = guard_handle; \
    const char* saved_n = guard_callback;           \
    guard_handle = (cb)->handle;                    \
    guard_callback = (cb)->name;                    \
    call;                                           \
    guard_handle = saved_h;                         \
    guard_callback = saved_n;                       \
  } while (0)

static void guard_on_job(void* ctx, const conveyor_job* job) {
  guard_cb* cb = (guard_cb*)ctx;
  GUARD_CALL(cb, ((conveyor_job_fn)cb->fn)(cb->ctx, job));
}
static void guard_on_stats(void* ctx, const conveyor_queue_stats* stats) {
  guard_cb* cb = (guard_cb*)ctx;
  GUARD_CALL(cb, ((conveyor_queue_stats_fn)cb->fn)(cb->ctx, stats));
}
static void guard_on_limit(void* ctx, const conveyor_rate_limit* limit) {
  guard_cb* cb = (guard_cb*)ctx;
  GUARD_CALL(cb, ((conveyor_rate_limit_fn)cb->fn)(cb->ctx, limit));
}
static void guard_on_queue(void* ctx, conveyor_str queue, int32_t paused) {
  guard_cb* cb = (guard_cb*)ctx;
  GUARD_CALL(cb, ((conveyor_queue_fn)cb->fn)(cb->ctx, queue, paused));
}
static void guard_on_notify(void* ctx, int32_t kind, conveyor_str queue) {
  guard_cb* cb = (guard_cb*)ctx;
  GUARD_CALL(cb, ((conveyor_notify_fn)cb->fn)(cb->ctx, kind, queue));
  /* Evidence for a test that the host's callback ran to its end. */
  if (getenv("REENTRY_GUARD_TRACE") != NULL) {
    fprintf(stderr, "reentry_guard: on_notify(kind %d, queue %.*s) returned\n", (int)kind,
            (int)queue.len, queue.len > 0 ? queue.data : "");
    fflush(stderr);
  }
}

/* A NULL callback stays NULL, so memory.c's NULL checks still answer. */
#define GUARD_CB(h, name, f, c) \
  { (h), (name), (void*)(f), (c) }
#define GUARD_FN(cb, trampoline) ((cb).fn == NULL ? NULL : (trampoline))

#ifdef GUARD_PER_HANDLE_STORE
/* The per_handle_store variant: without options every handle gets a store of
 * its own, which storage_plugin.h allows without CONVEYOR_CAP_MULTI_PROCESS
 * ("Sharing"); conveyor-bench's separate producer must say what is wrong. */
static conveyor_status g_open(const conveyor_option* options, size_t n_options,
                              conveyor_storage** out, conveyor_error* err) {
  static int handles = 0;
  char name[32];
  conveyor_option own;
  if (n_options > 0) return mem_open(options, n_options, out, err);
  snprintf(name, sizeof name, "handle-%d", __atomic_add_fetch(&handles, 1, __ATOMIC_RELAXED));
  own.key.data = "name";
  own.key.len = 4;
  own.value.data = name;
  own.value.len = strlen(name);
  return mem_open(&own, 1, out, err);
}
#define GUARD_OPEN g_open
#define GUARD_NAME "per_handle_store"
#else
#define GUARD_OPEN mem_open
#define GUARD_NAME "reentry_guard"
#endif

static conveyor_status g_migrate(conveyor_storage* h, conveyor_error* err) {
  guard_enter(h, "migrate");
  return mem_migrate(h, err);
}
static void g_close(conveyor_storage* h) {
  guard_enter(h, "close");
  mem_close(h);
}
static conveyor_status g_enqueue(conveyor_storage* h, const conveyor_new_job* jobs, size_t n,
                                 int64_t* out_ids, conveyor_error* err) {
  guard_enter(h, "enqueue");
  return mem_enqueue(h, jobs, n, out_ids, err);
}
static conveyor_status g_claim(conveyor_storage* h, conveyor_str queue, uint32_t max_jobs,
                               int64_t lease_token, int64_t now_us, int64_t lease_expires_us,
                               conveyor_job_fn on_job, void* ctx, uint32_t* out_claimed,
                               conveyor_error* err) {
  guard_cb cb = GUARD_CB(h, "claim's on_job", on_job, ctx);
  guard_enter(h, "claim");
  return mem_claim(h, queue, max_jobs, lease_token, now_us, lease_expires_us,
                   GUARD_FN(cb, guard_on_job), &cb, out_claimed, err);
}
static conveyor_status g_complete(conveyor_storage* h, const conveyor_lease* leases, size_t n,
                                  int64_t now_us, conveyor_status* results, conveyor_error* err) {
  guard_enter(h, "complete");
  return mem_complete(h, leases, n, now_us, results, err);
}
static conveyor_status g_fail(conveyor_storage* h, conveyor_lease lease, conveyor_str text,
                              int64_t retry_at_us, int64_t now_us, conveyor_error* err) {
  guard_enter(h, "fail");
  return mem_fail(h, lease, text, retry_at_us, now_us, err);
}
static conveyor_status g_extend_leases(conveyor_storage* h, const conveyor_lease* leases, size_t n,
                                       int64_t expires_us, conveyor_status* results,
                                       conveyor_error* err) {
  guard_enter(h, "extend_leases");
  return mem_extend_leases(h, leases, n, expires_us, results, err);
}
static conveyor_status g_release(conveyor_storage* h, const conveyor_lease* leases, size_t n,
                                 int64_t now_us, conveyor_status* results, conveyor_error* err) {
  guard_enter(h, "release");
  return mem_release(h, leases, n, now_us, results, err);
}
static conveyor_status g_rescue_expired(conveyor_storage* h, int64_t now_us, uint32_t max_jobs,
                                        uint32_t* out_rescued, conveyor_error* err) {
  guard_enter(h, "rescue_expired");
  return mem_rescue_expired(h, now_us, max_jobs, out_rescued, err);
}
static conveyor_status g_cancel(conveyor_storage* h, int64_t job_id, int64_t now_us,
                                conveyor_error* err) {
  guard_enter(h, "cancel");
  return mem_cancel(h, job_id, now_us, err);
}
static conveyor_status g_set_queue_paused(conveyor_storage* h, conveyor_str queue, int32_t paused,
                                          int64_t now_us, conveyor_error* err) {
  guard_enter(h, "set_queue_paused");
  return mem_set_queue_paused(h, queue, paused, now_us, err);
}
static conveyor_status g_queue_stats(conveyor_storage* h, int64_t now_us,
                                     conveyor_queue_stats_fn on_stats, void* ctx,
                                     conveyor_error* err) {
  guard_cb cb = GUARD_CB(h, "queue_stats's on_stats", on_stats, ctx);
  guard_enter(h, "queue_stats");
  return mem_queue_stats(h, now_us, GUARD_FN(cb, guard_on_stats), &cb, err);
}
static conveyor_status g_list_queues(conveyor_storage* h, conveyor_queue_fn on_queue, void* ctx,
                                     conveyor_error* err) {
  guard_cb cb = GUARD_CB(h, "list_queues's on_queue", on_queue, ctx);
  guard_enter(h, "list_queues");
  return mem_list_queues(h, GUARD_FN(cb, guard_on_queue), &cb, err);
}
static conveyor_status g_get_job(conveyor_storage* h, int64_t job_id, int64_t now_us,
                                 conveyor_job_fn on_job, void* ctx, conveyor_error* err) {
  guard_cb cb = GUARD_CB(h, "get_job's on_job", on_job, ctx);
  guard_enter(h, "get_job");
  return mem_get_job(h, job_id, now_us, GUARD_FN(cb, guard_on_job), &cb, err);
}
static conveyor_status g_purge_finished(conveyor_storage* h, int64_t before_us, uint32_t max_jobs,
                                        uint64_t* out_deleted, conveyor_error* err) {
  guard_enter(h, "purge_finished");
  return mem_purge_finished(h, before_us, max_jobs, out_deleted, err);
}
static conveyor_status g_set_rate_limit(conveyor_storage* h, conveyor_str queue, double rate,
                                        uint32_t burst, int64_t now_us, conveyor_error* err) {
  guard_enter(h, "set_rate_limit");
  return mem_set_rate_limit(h, queue, rate, burst, now_us, err);
}
static conveyor_status g_delete_rate_limit(conveyor_storage* h, conveyor_str queue,
                                           conveyor_error* err) {
  guard_enter(h, "delete_rate_limit");
  return mem_delete_rate_limit(h, queue, err);
}
static conveyor_status g_list_rate_limits(conveyor_storage* h, conveyor_rate_limit_fn on_limit,
                                          void* ctx, conveyor_error* err) {
  guard_cb cb = GUARD_CB(h, "list_rate_limits's on_limit", on_limit, ctx);
  guard_enter(h, "list_rate_limits");
  return mem_list_rate_limits(h, GUARD_FN(cb, guard_on_limit), &cb, err);
}
static conveyor_status g_change_marker(conveyor_storage* h, int64_t* out_marker,
                                       conveyor_error* err) {
  guard_enter(h, "change_marker");
  return mem_change_marker(h, out_marker, err);
}

/* memory.c's wait, except that on_notify runs with the store's lock held
 * (memory.c lets go of it first). */
static conveyor_status g_wait_for_notification(conveyor_storage* h, int64_t timeout_us,
                                               conveyor_notify_fn on_notify, void* ctx,
                                               conveyor_error* err) {
  guard_cb cb = GUARD_CB(h, "wait_for_notification's on_notify", on_notify, ctx);
  mem_store* s = h->store;
  struct timespec deadline;
  size_t i;
  guard_enter(h, "wait_for_notification");
  if (on_notify == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "reentry_guard: on_notify is NULL");
  if (timeout_us < 0) timeout_us = 0;
  if (timeout_us > (int64_t)3600 * 1000000) timeout_us = (int64_t)3600 * 1000000;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += (time_t)(timeout_us / 1000000);
  deadline.tv_nsec += (long)(timeout_us % 1000000) * 1000;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec += 1;
    deadline.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&s->mu);
  while (h->n_notes == 0)
    if (pthread_cond_timedwait(&s->noted, &s->mu, &deadline) == ETIMEDOUT) break;
  for (i = 0; i < h->n_notes; ++i) {
    guard_on_notify(&cb, h->notes[i].kind, bytes_str(&h->notes[i].queue));
    bytes_free(&h->notes[i].queue);
  }
  h->n_notes = 0;
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static const conveyor_storage_plugin guard_plugin = {
    .struct_size = sizeof(conveyor_storage_plugin),
    .abi_major = CONVEYOR_ABI_MAJOR,
    .abi_minor = CONVEYOR_ABI_MINOR,
    .name = GUARD_NAME,
    .version = "0.0.1",
    .kind = CONVEYOR_KIND_CANONICAL,
    .capabilities = CONVEYOR_CAP_NOTIFY, /* as memory_c */
    .open = GUARD_OPEN,
    .close = g_close,
    .migrate = g_migrate,
    .enqueue = g_enqueue,
    .claim = g_claim,
    .complete = g_complete,
    .fail = g_fail,
    .extend_leases = g_extend_leases,
    .release = g_release,
    .rescue_expired = g_rescue_expired,
    .cancel = g_cancel,
    .set_queue_paused = g_set_queue_paused,
    .queue_stats = g_queue_stats,
    .list_queues = g_list_queues,
    .get_job = g_get_job,
    .purge_finished = g_purge_finished,
    .set_rate_limit = g_set_rate_limit,
    .delete_rate_limit = g_delete_rate_limit,
    .list_rate_limits = g_list_rate_limits,
    .change_marker = g_change_marker,
    .wait_for_notification = g_wait_for_notification,
};

CONVEYOR_PLUGIN_EXPORT const conveyor_storage_plugin* conveyor_storage_plugin_entry(
    uint32_t host_abi_major, uint32_t host_abi_minor) {
  /* memory_c decides which majors it serves; we serve the same. */
  return memory_c_entry(host_abi_major, host_abi_minor) != NULL ? &guard_plugin : NULL;
}
