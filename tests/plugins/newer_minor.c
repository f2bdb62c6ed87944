/* A working in-memory plugin in plain C99 that was "built against a newer
 * minor": it claims abi_minor = CONVEYOR_ABI_MINOR + 1 and its table has one
 * slot more than this host knows. The host must load it and use the slots it
 * knows (storage_plugin.h rule 3).
 *
 * Jobs live in a fixed array under one mutex; nothing is durable. Operations
 * the tests do not need (pause, stats, rate limits) return
 * CONVEYOR_E_UNSUPPORTED, but every required slot is non-NULL. */
#define _POSIX_C_SOURCE 200809L

#include <conveyor/storage_plugin.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEM_MAX_JOBS 128
#define MEM_MAX_TEXT 128
#define MEM_MAX_PAYLOAD 1024

/* Stored states; SCHEDULED is derived (AVAILABLE with run_at in the future). */
#define MEM_FREE 0

typedef struct mem_text {
  char data[MEM_MAX_TEXT];
  size_t len;
} mem_text;

typedef struct mem_job {
  int32_t state; /* MEM_FREE or CONVEYOR_JOB_* (never SCHEDULED) */
  int64_t id;
  mem_text queue;
  mem_text kind;
  char payload[MEM_MAX_PAYLOAD];
  size_t payload_len;
  int32_t priority;
  int32_t attempt;
  int32_t max_attempts;
  int64_t run_at_us;
  int64_t created_at_us;
  int64_t finalized_at_us;
  int64_t lease_token;
  int64_t lease_expires_us;
  mem_text last_error;
} mem_job;

struct conveyor_storage {
  pthread_mutex_t mu;
  int64_t next_id;
  mem_job jobs[MEM_MAX_JOBS];
};

static conveyor_status set_error(conveyor_error* err, conveyor_status code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
static conveyor_status set_error(conveyor_error* err, conveyor_status code, const char* fmt, ...) {
  if (err != NULL) {
    va_list args;
    va_start(args, fmt);
    err->code = code;
    vsnprintf(err->message, sizeof err->message, fmt, args);
    va_end(args);
  }
  return code;
}

static int text_set(mem_text* t, conveyor_str s) {
  if (s.len >= sizeof t->data) return 0;
  if (s.len > 0) memcpy(t->data, s.data, s.len);
  t->len = s.len;
  return 1;
}

static void text_set_c(mem_text* t, const char* s) {
  conveyor_str str;
  str.data = s;
  str.len = strlen(s);
  if (!text_set(t, str)) t->len = 0;
}

static int text_eq(const mem_text* t, conveyor_str s) {
  return t->len == s.len && (s.len == 0 || memcmp(t->data, s.data, s.len) == 0);
}

static conveyor_str text_str(const mem_text* t) {
  conveyor_str s;
  s.data = t->data;
  s.len = t->len;
  return s;
}

static int is_final(int32_t state) {
  return state == CONVEYOR_JOB_COMPLETED || state == CONVEYOR_JOB_FAILED ||
         state == CONVEYOR_JOB_CANCELLED;
}

static mem_job* find_job(conveyor_storage* s, int64_t id) {
  size_t i;
  for (i = 0; i < MEM_MAX_JOBS; ++i)
    if (s->jobs[i].state != MEM_FREE && s->jobs[i].id == id) return &s->jobs[i];
  return NULL;
}

static mem_job* find_lease(conveyor_storage* s, conveyor_lease lease) {
  mem_job* job = find_job(s, lease.job_id);
  if (job == NULL || job->state != CONVEYOR_JOB_RUNNING || job->lease_token != lease.lease_token)
    return NULL;
  return job;
}

static void report(const mem_job* j, int64_t now_us, conveyor_job_fn fn, void* ctx) {
  conveyor_job out;
  memset(&out, 0, sizeof out);
  out.struct_size = sizeof out;
  out.state = j->state;
  if (j->state == CONVEYOR_JOB_AVAILABLE && j->run_at_us > now_us)
    out.state = CONVEYOR_JOB_SCHEDULED;
  out.id = j->id;
  out.queue = text_str(&j->queue);
  out.kind = text_str(&j->kind);
  out.payload.data = j->payload;
  out.payload.len = j->payload_len;
  out.priority = j->priority;
  out.attempt = j->attempt;
  out.max_attempts = j->max_attempts;
  out.run_at_us = j->run_at_us;
  out.created_at_us = j->created_at_us;
  out.finalized_at_us = j->finalized_at_us;
  out.lease_token = j->lease_token;
  out.lease_expires_us = j->lease_expires_us;
  out.last_error = text_str(&j->last_error);
  fn(ctx, &out);
}

static void finalize(mem_job* j, int32_t state, int64_t now_us) {
  j->state = state;
  j->finalized_at_us = now_us;
  j->lease_token = 0;
  j->lease_expires_us = 0;
}

static void make_available(mem_job* j, int64_t run_at_us) {
  j->state = CONVEYOR_JOB_AVAILABLE;
  j->run_at_us = run_at_us;
  j->lease_token = 0;
  j->lease_expires_us = 0;
}

static conveyor_status mem_open(const conveyor_option* options, size_t n_options,
                                conveyor_storage** out, conveyor_error* err) {
  conveyor_storage* s;
  if (out == NULL) return set_error(err, CONVEYOR_E_INVALID, "out is NULL");
  if (n_options > 0)
    return set_error(err, CONVEYOR_E_INVALID, "unknown storage option '%.*s' (known: none)",
                     (int)options[0].key.len, options[0].key.data);
  s = (conveyor_storage*)calloc(1, sizeof *s);
  if (s == NULL) return set_error(err, CONVEYOR_E_INTERNAL, "out of memory");
  if (pthread_mutex_init(&s->mu, NULL) != 0) {
    free(s);
    return set_error(err, CONVEYOR_E_INTERNAL, "pthread_mutex_init failed");
  }
  s->next_id = 1;
  *out = s;
  return CONVEYOR_OK;
}

static void mem_close(conveyor_storage* s) {
  if (s == NULL) return;
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static conveyor_status mem_migrate(conveyor_storage* s, conveyor_error* err) {
  (void)s;
  (void)err;
  return CONVEYOR_OK; /* nothing to migrate in memory */
}

static conveyor_status mem_enqueue(conveyor_storage* s, const conveyor_new_job* jobs, size_t n,
                                   int64_t* out_ids, conveyor_error* err) {
  size_t i, slot, free_slots = 0;
  if (n == 0) return CONVEYOR_OK;
  if (jobs == NULL || out_ids == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "jobs or out_ids is NULL");
  /* Validate everything first: all or none. */
  for (i = 0; i < n; ++i) {
    if (jobs[i].queue.len >= MEM_MAX_TEXT || jobs[i].kind.len >= MEM_MAX_TEXT ||
        jobs[i].payload.len > MEM_MAX_PAYLOAD)
      return set_error(err, CONVEYOR_E_INVALID, "job %zu: queue, kind or payload too long", i);
    if (jobs[i].kind.len == 0) return set_error(err, CONVEYOR_E_INVALID, "job %zu: empty kind", i);
    if (jobs[i].max_attempts < 1)
      return set_error(err, CONVEYOR_E_INVALID, "job %zu: max_attempts must be >= 1", i);
  }
  pthread_mutex_lock(&s->mu);
  for (slot = 0; slot < MEM_MAX_JOBS; ++slot)
    if (s->jobs[slot].state == MEM_FREE) ++free_slots;
  if (free_slots < n) {
    pthread_mutex_unlock(&s->mu);
    return set_error(err, CONVEYOR_E_UNAVAILABLE, "in-memory store full (%d jobs)", MEM_MAX_JOBS);
  }
  slot = 0;
  for (i = 0; i < n; ++i) {
    mem_job* j;
    while (s->jobs[slot].state != MEM_FREE) ++slot;
    j = &s->jobs[slot];
    memset(j, 0, sizeof *j);
    j->state = CONVEYOR_JOB_AVAILABLE;
    j->id = s->next_id++;
    text_set(&j->queue, jobs[i].queue);
    text_set(&j->kind, jobs[i].kind);
    if (jobs[i].payload.len > 0) memcpy(j->payload, jobs[i].payload.data, jobs[i].payload.len);
    j->payload_len = jobs[i].payload.len;
    j->priority = jobs[i].priority;
    j->max_attempts = jobs[i].max_attempts;
    j->run_at_us = jobs[i].run_at_us;
    j->created_at_us = jobs[i].run_at_us; /* no clock of our own (header: Time) */
    out_ids[i] = j->id;
  }
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

/* Orders ready jobs by priority, run_at, id (lower first). */
static int runs_before(const mem_job* a, const mem_job* b) {
  if (a->priority != b->priority) return a->priority < b->priority;
  if (a->run_at_us != b->run_at_us) return a->run_at_us < b->run_at_us;
  return a->id < b->id;
}

static conveyor_status mem_claim(conveyor_storage* s, conveyor_str queue, uint32_t max_jobs,
                                 int64_t lease_token, int64_t now_us, int64_t lease_expires_us,
                                 conveyor_job_fn on_job, void* ctx, uint32_t* out_claimed,
                                 conveyor_error* err) {
  uint32_t claimed = 0;
  if (on_job == NULL || out_claimed == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "on_job or out_claimed is NULL");
  if (lease_token == 0) return set_error(err, CONVEYOR_E_INVALID, "lease_token must be non-zero");
  pthread_mutex_lock(&s->mu);
  while (claimed < max_jobs) {
    mem_job* best = NULL;
    size_t i;
    for (i = 0; i < MEM_MAX_JOBS; ++i) {
      mem_job* j = &s->jobs[i];
      if (j->state != CONVEYOR_JOB_AVAILABLE || j->run_at_us > now_us || !text_eq(&j->queue, queue))
        continue;
      if (best == NULL || runs_before(j, best)) best = j;
    }
    if (best == NULL) break;
    best->state = CONVEYOR_JOB_RUNNING;
    best->attempt += 1;
    best->lease_token = lease_token;
    best->lease_expires_us = lease_expires_us;
    /* Callbacks never call back into the handle, so reporting under the lock
     * is safe and keeps the job's strings stable during the callback. */
    report(best, now_us, on_job, ctx);
    ++claimed;
  }
  pthread_mutex_unlock(&s->mu);
  *out_claimed = claimed;
  return CONVEYOR_OK;
}

static conveyor_status check_leases(const conveyor_lease* leases, size_t n,
                                    conveyor_status* results, conveyor_error* err) {
  if (n > 0 && (leases == NULL || results == NULL))
    return set_error(err, CONVEYOR_E_INVALID, "leases or results is NULL");
  return CONVEYOR_OK;
}

static conveyor_status mem_complete(conveyor_storage* s, const conveyor_lease* leases, size_t n,
                                    int64_t now_us, conveyor_status* results,
                                    conveyor_error* err) {
  size_t i;
  conveyor_status st = check_leases(leases, n, results, err);
  if (st != CONVEYOR_OK) return st;
  pthread_mutex_lock(&s->mu);
  for (i = 0; i < n; ++i) {
    mem_job* j = find_lease(s, leases[i]);
    results[i] = j == NULL ? CONVEYOR_E_LEASE_LOST : CONVEYOR_OK;
    if (j != NULL) finalize(j, CONVEYOR_JOB_COMPLETED, now_us);
  }
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static conveyor_status mem_fail(conveyor_storage* s, conveyor_lease lease,
                                conveyor_str error_text, int64_t retry_at_us, int64_t now_us,
                                conveyor_error* err) {
  mem_job* j;
  conveyor_str text = error_text;
  pthread_mutex_lock(&s->mu);
  j = find_lease(s, lease);
  if (j == NULL) {
    pthread_mutex_unlock(&s->mu);
    return set_error(err, CONVEYOR_E_LEASE_LOST, "job %lld is not running under that lease",
                     (long long)lease.job_id);
  }
  if (text.len >= MEM_MAX_TEXT) text.len = MEM_MAX_TEXT - 1; /* keep a prefix */
  text_set(&j->last_error, text);
  if (retry_at_us >= 0)
    make_available(j, retry_at_us);
  else
    finalize(j, CONVEYOR_JOB_FAILED, now_us);
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static conveyor_status mem_extend_leases(conveyor_storage* s, const conveyor_lease* leases,
                                         size_t n, int64_t lease_expires_us,
                                         conveyor_status* results, conveyor_error* err) {
  size_t i;
  conveyor_status st = check_leases(leases, n, results, err);
  if (st != CONVEYOR_OK) return st;
  pthread_mutex_lock(&s->mu);
  for (i = 0; i < n; ++i) {
    mem_job* j = find_lease(s, leases[i]);
    results[i] = j == NULL ? CONVEYOR_E_LEASE_LOST : CONVEYOR_OK;
    if (j != NULL) j->lease_expires_us = lease_expires_us;
  }
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static conveyor_status mem_release(conveyor_storage* s, const conveyor_lease* leases, size_t n,
                                   int64_t now_us, conveyor_status* results,
                                   conveyor_error* err) {
  size_t i;
  conveyor_status st = check_leases(leases, n, results, err);
  if (st != CONVEYOR_OK) return st;
  pthread_mutex_lock(&s->mu);
  for (i = 0; i < n; ++i) {
    mem_job* j = find_lease(s, leases[i]);
    results[i] = j == NULL ? CONVEYOR_E_LEASE_LOST : CONVEYOR_OK;
    if (j != NULL) {
      make_available(j, now_us);
      j->attempt -= 1; /* not spent */
    }
  }
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static conveyor_status mem_rescue_expired(conveyor_storage* s, int64_t now_us, uint32_t max_jobs,
                                          uint32_t* out_rescued, conveyor_error* err) {
  uint32_t rescued = 0;
  size_t i;
  if (out_rescued == NULL) return set_error(err, CONVEYOR_E_INVALID, "out_rescued is NULL");
  pthread_mutex_lock(&s->mu);
  for (i = 0; i < MEM_MAX_JOBS && rescued < max_jobs; ++i) {
    mem_job* j = &s->jobs[i];
    if (j->state != CONVEYOR_JOB_RUNNING || j->lease_expires_us >= now_us) continue;
    text_set_c(&j->last_error, "lease expired");
    if (j->attempt < j->max_attempts)
      make_available(j, now_us);
    else
      finalize(j, CONVEYOR_JOB_FAILED, now_us);
    ++rescued;
  }
  pthread_mutex_unlock(&s->mu);
  *out_rescued = rescued;
  return CONVEYOR_OK;
}

static conveyor_status mem_cancel(conveyor_storage* s, int64_t job_id, int64_t now_us,
                                  conveyor_error* err) {
  mem_job* j;
  pthread_mutex_lock(&s->mu);
  j = find_job(s, job_id);
  if (j == NULL || is_final(j->state)) {
    pthread_mutex_unlock(&s->mu);
    return set_error(err, CONVEYOR_E_NOT_FOUND, "no cancellable job %lld", (long long)job_id);
  }
  finalize(j, CONVEYOR_JOB_CANCELLED, now_us);
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static conveyor_status mem_set_queue_paused(conveyor_storage* s, conveyor_str queue,
                                            int32_t paused, int64_t now_us, conveyor_error* err) {
  (void)s;
  (void)queue;
  (void)paused;
  (void)now_us;
  return set_error(err, CONVEYOR_E_UNSUPPORTED, "newer_minor test plugin: pausing unsupported");
}

static conveyor_status mem_queue_stats(conveyor_storage* s, int64_t now_us,
                                       conveyor_queue_stats_fn on_stats, void* ctx,
                                       conveyor_error* err) {
  (void)s;
  (void)now_us;
  (void)on_stats;
  (void)ctx;
  return set_error(err, CONVEYOR_E_UNSUPPORTED, "newer_minor test plugin: stats unsupported");
}

static int compare_text(const void* a, const void* b) {
  const mem_text* x = *(const mem_text* const*)a;
  const mem_text* y = *(const mem_text* const*)b;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = memcmp(x->data, y->data, n);
  if (c != 0) return c;
  return x->len < y->len ? -1 : x->len > y->len ? 1 : 0;
}

/* Every queue with a job in the array, in name order; pausing is not
 * supported, so none is paused. A test plugin may scan its tiny array. */
static conveyor_status mem_list_queues(conveyor_storage* s, conveyor_queue_fn on_queue, void* ctx,
                                       conveyor_error* err) {
  const mem_text* names[MEM_MAX_JOBS];
  size_t n = 0, i, k;
  if (on_queue == NULL) return set_error(err, CONVEYOR_E_INVALID, "on_queue is NULL");
  pthread_mutex_lock(&s->mu);
  for (i = 0; i < MEM_MAX_JOBS; ++i) {
    int seen = 0;
    if (s->jobs[i].state == MEM_FREE) continue;
    for (k = 0; k < n && !seen; ++k)
      seen = text_eq(names[k], text_str(&s->jobs[i].queue));
    if (!seen) names[n++] = &s->jobs[i].queue;
  }
  qsort(names, n, sizeof names[0], compare_text);
  for (i = 0; i < n; ++i) on_queue(ctx, text_str(names[i]), 0);
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static conveyor_status mem_get_job(conveyor_storage* s, int64_t job_id, int64_t now_us,
                                   conveyor_job_fn on_job, void* ctx, conveyor_error* err) {
  mem_job* j;
  if (on_job == NULL) return set_error(err, CONVEYOR_E_INVALID, "on_job is NULL");
  pthread_mutex_lock(&s->mu);
  j = find_job(s, job_id);
  if (j == NULL) {
    pthread_mutex_unlock(&s->mu);
    return set_error(err, CONVEYOR_E_NOT_FOUND, "no job %lld", (long long)job_id);
  }
  report(j, now_us, on_job, ctx);
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static conveyor_status mem_purge_finished(conveyor_storage* s, int64_t finalized_before_us,
                                          uint32_t max_jobs, uint64_t* out_deleted,
                                          conveyor_error* err) {
  uint64_t deleted = 0;
  size_t i;
  if (out_deleted == NULL) return set_error(err, CONVEYOR_E_INVALID, "out_deleted is NULL");
  pthread_mutex_lock(&s->mu);
  for (i = 0; i < MEM_MAX_JOBS && deleted < max_jobs; ++i) {
    mem_job* j = &s->jobs[i];
    if (!is_final(j->state) || j->finalized_at_us >= finalized_before_us) continue;
    j->state = MEM_FREE;
    ++deleted;
  }
  pthread_mutex_unlock(&s->mu);
  *out_deleted = deleted;
  return CONVEYOR_OK;
}

static conveyor_status mem_set_rate_limit(conveyor_storage* s, conveyor_str queue,
                                          double rate_per_sec, uint32_t burst, int64_t now_us,
                                          conveyor_error* err) {
  (void)s;
  (void)queue;
  (void)rate_per_sec;
  (void)burst;
  (void)now_us;
  return set_error(err, CONVEYOR_E_UNSUPPORTED, "newer_minor test plugin: rate limits unsupported");
}

static conveyor_status mem_delete_rate_limit(conveyor_storage* s, conveyor_str queue,
                                             conveyor_error* err) {
  (void)s;
  (void)queue;
  return set_error(err, CONVEYOR_E_UNSUPPORTED, "newer_minor test plugin: rate limits unsupported");
}

static conveyor_status mem_list_rate_limits(conveyor_storage* s, conveyor_rate_limit_fn on_limit,
                                            void* ctx, conveyor_error* err) {
  (void)s;
  (void)on_limit;
  (void)ctx;
  (void)err;
  return CONVEYOR_OK; /* there are never any overrides */
}

static conveyor_status mem_change_marker(conveyor_storage* s, int64_t* out_marker,
                                         conveyor_error* err) {
  (void)s;
  if (out_marker == NULL) return set_error(err, CONVEYOR_E_INVALID, "out_marker is NULL");
  *out_marker = 0; /* overrides and pauses never change */
  return CONVEYOR_OK;
}

/* The slot a hypothetical minor 1 appended. An older host never sees it. */
static conveyor_status mem_future_slot(conveyor_storage* s, conveyor_error* err) {
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

static const newer_storage_plugin table = {
    {
        .struct_size = sizeof(newer_storage_plugin),
        .abi_major = CONVEYOR_ABI_MAJOR,
        .abi_minor = CONVEYOR_ABI_MINOR + 1,
        .name = "newer_minor",
        .version = "0.0.1",
        .kind = CONVEYOR_KIND_CANONICAL,
        .capabilities = 0,
        .open = mem_open,
        .close = mem_close,
        .migrate = mem_migrate,
        .enqueue = mem_enqueue,
        .claim = mem_claim,
        .complete = mem_complete,
        .fail = mem_fail,
        .extend_leases = mem_extend_leases,
        .release = mem_release,
        .rescue_expired = mem_rescue_expired,
        .cancel = mem_cancel,
        .set_queue_paused = mem_set_queue_paused,
        .queue_stats = mem_queue_stats,
        .list_queues = mem_list_queues,
        .get_job = mem_get_job,
        .purge_finished = mem_purge_finished,
        .set_rate_limit = mem_set_rate_limit,
        .delete_rate_limit = mem_delete_rate_limit,
        .list_rate_limits = mem_list_rate_limits,
        .change_marker = mem_change_marker,
        .wait_for_notification = NULL,
    },
    mem_future_slot,
};

CONVEYOR_PLUGIN_EXPORT const conveyor_storage_plugin* conveyor_storage_plugin_entry(
    uint32_t host_abi_major, uint32_t host_abi_minor) {
  (void)host_abi_minor; /* serves any 1.x host: older ones read a prefix */
  return host_abi_major == CONVEYOR_ABI_MAJOR ? &table.v1_0 : NULL;
}
