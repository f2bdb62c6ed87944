/*
 * memory.c: a complete Conveyor storage plugin in plain C99 that keeps
 * everything in memory. It implements every slot of ABI 1.0, including the
 * optional wait_for_notification, and passes conveyor-conformance.
 *
 * Read it next to writing-a-storage-plugin.md (share/doc/conveyor) and
 * <conveyor/storage_plugin.h> (the contract every function below follows).
 *
 * What it is and is not:
 *   - Not durable: data lives as long as the process and at least one open
 *     handle. It advertises CONVEYOR_CAP_NOTIFY and nothing else.
 *   - Handles opened with the same "name" option in one process share one
 *     store. storage_plugin.h requires that only with CONVEYOR_CAP_MULTI_PROCESS
 *     ("Sharing"), but a tool with a second handle (conveyor-bench's separate
 *     producer) then works too, at no cost here. The store is freed when
 *     its last handle closes, so every conformance test starts empty.
 *   - One mutex per store serialises every call: simple and obviously
 *     correct. Claims scan the store's AVAILABLE jobs; a real backend keeps
 *     an index on (queue, priority, run_at, id) instead.
 *
 * Options ([storage.options] in the Conveyor config):
 *   name = "..."   which in-process store to open (default "default").
 */
#define _POSIX_C_SOURCE 200809L /* pthread_condattr_setclock, clock_gettime */

#include <conveyor/storage_plugin.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MEMORY_PLUGIN_NAME "memory_c"
#define MEMORY_PLUGIN_VERSION "1.0.0"

/* ------------------------------------------------------------------------
 * Small helpers: errors, owned byte strings, growable arrays
 * ------------------------------------------------------------------------ */

#if defined(__GNUC__)
#define MEM_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define MEM_PRINTF(fmt_index, first_arg)
#endif

/* Writes code and a message into the caller's error (when there is one) and
 * returns code, so a failing path reads `return set_error(err, ...);`.
 * vsnprintf truncates to the caller's buffer and always NUL-terminates. */
static conveyor_status set_error(conveyor_error* err, conveyor_status code, const char* fmt, ...)
    MEM_PRINTF(3, 4);
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

static conveyor_status out_of_memory(conveyor_error* err) {
  return set_error(err, CONVEYOR_E_INTERNAL, "memory plugin: out of memory");
}

/* Bytes the plugin owns: a copy of a caller's conveyor_str (queue names,
 * kinds, payloads, error texts). data is NULL when len is 0. */
typedef struct mem_bytes {
  char* data;
  size_t len;
} mem_bytes;

/* A conveyor_str that breaks its own rule ("data may be NULL only when len
 * is 0") must be refused before it is read. */
static int str_is_valid(conveyor_str s) { return s.data != NULL || s.len == 0; }

/* Copies s into a fresh mem_bytes. Returns 0 when out of memory. */
static int bytes_copy(mem_bytes* out, conveyor_str s) {
  out->data = NULL;
  out->len = 0;
  if (s.len == 0) return 1;
  out->data = (char*)malloc(s.len);
  if (out->data == NULL) return 0;
  memcpy(out->data, s.data, s.len);
  out->len = s.len;
  return 1;
}

static void bytes_free(mem_bytes* b) {
  free(b->data);
  b->data = NULL;
  b->len = 0;
}

/* Replaces *b with fresh (which the caller allocated; *b now owns it). */
static void bytes_replace(mem_bytes* b, mem_bytes fresh) {
  bytes_free(b);
  *b = fresh;
}

/* Borrowed view for a callback: valid while b is unchanged. */
static conveyor_str bytes_str(const mem_bytes* b) {
  conveyor_str s;
  s.data = b->data;
  s.len = b->len;
  return s;
}

/* Byte-wise order, shorter first on a common prefix: "name order" of the
 * header, the same as SQLite's BINARY collation and std::string's <. */
static int str_compare(conveyor_str a, conveyor_str b) {
  size_t n = a.len < b.len ? a.len : b.len;
  int c = n == 0 ? 0 : memcmp(a.data, b.data, n);
  if (c != 0) return c;
  return a.len < b.len ? -1 : a.len > b.len ? 1 : 0;
}

/* Makes room for `need` items in an array of `size`-byte items. Returns the
 * (possibly moved) array, or NULL when out of memory (the old array is then
 * untouched). *cap is updated only on success. */
static void* grow(void* items, size_t* cap, size_t need, size_t size) {
  size_t new_cap;
  void* bigger;
  if (need <= *cap) return items;
  new_cap = *cap < 16 ? 16 : *cap;
  while (new_cap < need) new_cap *= 2;
  if (new_cap > (size_t)-1 / size) return NULL;
  bigger = realloc(items, new_cap * size);
  if (bigger != NULL) *cap = new_cap;
  return bigger;
}

/* The only clock this plugin reads: for created_at_us of the 1.0 enqueue,
 * which has no now_us (enqueue_v2 has). Every comparison of times uses the host's now_us (header:
 * Time). */
static int64_t wall_clock_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ------------------------------------------------------------------------
 * The data model
 * ------------------------------------------------------------------------ */

/* A queue the store knows: created by its first enqueue or pause, never
 * deleted (list_queues may list queues whose jobs are gone). */
typedef struct mem_queue {
  mem_bytes name;
  int32_t paused;
  size_t ordinal;   /* creation order: 0, 1, 2, ... (indexes scratch arrays) */
  int64_t count[7]; /* retained jobs per stored state (index CONVEYOR_JOB_*) */
} mem_queue;

/* A job. Its stored state is AVAILABLE, RUNNING, COMPLETED, FAILED or
 * CANCELLED; SCHEDULED is AVAILABLE with run_at in the future, decided when
 * reported from the host's now_us. */
typedef struct mem_job {
  int64_t id;
  int32_t state;
  mem_queue* queue;
  mem_bytes kind;
  mem_bytes payload;
  mem_bytes last_error;
  int32_t priority;
  int32_t attempt;
  int32_t max_attempts;
  int64_t run_at_us;
  int64_t created_at_us;
  int64_t finalized_at_us;
  int64_t lease_token;
  int64_t lease_expires_us;
  int64_t started_at_us; /* ABI 1.6: the latest claim's now_us; 0 before the first */
  size_t available_slot; /* index in store->available while AVAILABLE */
} mem_job;

typedef struct mem_limit {
  mem_bytes queue;
  double rate_per_sec;
  uint32_t burst;
  int64_t updated_at_us;
} mem_limit;

/* A pending notification of one handle. */
typedef struct mem_note {
  int32_t kind;
  mem_bytes queue;
} mem_note;

typedef struct mem_store mem_store;

/* The handle the host holds: a store plus this handle's notifications. */
struct conveyor_storage {
  mem_store* store;
  conveyor_storage* next_subscriber; /* the store's list of open handles */
  mem_note* notes;                   /* pending, one per (kind, queue) */
  size_t n_notes, cap_notes;
};

struct mem_store {
  mem_bytes name;
  mem_store* next; /* the registry's list */
  int handles;     /* open handles; the store is freed when it drops to 0 */

  pthread_mutex_t mu;   /* guards everything below */
  pthread_cond_t noted; /* signalled when any handle gets a notification */
  int64_t next_id;
  int64_t marker; /* change_marker */
  mem_job** jobs; /* every retained job, in id order (ids only increase) */
  size_t n_jobs, cap_jobs;
  mem_job** available;               /* every AVAILABLE job, in no order */
  size_t n_available, cap_available; /* cap_available >= n_jobs, always */
  mem_queue** queues;                /* in name order */
  size_t n_queues, cap_queues;
  mem_limit* limits; /* in queue-name order */
  size_t n_limits, cap_limits;
  conveyor_storage* subscribers;
};

/* Every store of this process, by name. Lock order: registry, then a store. */
static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static mem_store* registry = NULL;

/* ------------------------------------------------------------------------
 * Lookups (store->mu held)
 * ------------------------------------------------------------------------ */

/* Binary search by id; jobs[] is sorted because ids only increase. */
static mem_job* find_job(const mem_store* s, int64_t id) {
  size_t lo = 0, hi = s->n_jobs;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->jobs[mid]->id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < s->n_jobs && s->jobs[lo]->id == id ? s->jobs[lo] : NULL;
}

/* The job a lease names, or NULL when the lease is not current: the job must
 * be RUNNING under that very token (header: "The life of a job"). */
static mem_job* find_lease(const mem_store* s, conveyor_lease lease) {
  mem_job* j = find_job(s, lease.job_id);
  if (j == NULL || j->state != CONVEYOR_JOB_RUNNING || j->lease_token != lease.lease_token)
    return NULL;
  return j;
}

/* Index of the first queue whose name is >= name (binary search). */
static size_t queue_position(const mem_store* s, conveyor_str name) {
  size_t lo = 0, hi = s->n_queues;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (str_compare(bytes_str(&s->queues[mid]->name), name) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static mem_queue* find_queue(const mem_store* s, conveyor_str name) {
  size_t at = queue_position(s, name);
  if (at < s->n_queues && str_compare(bytes_str(&s->queues[at]->name), name) == 0)
    return s->queues[at];
  return NULL;
}

/* The queue named, created when new. NULL when out of memory. */
static mem_queue* get_queue(mem_store* s, conveyor_str name) {
  size_t at = queue_position(s, name);
  mem_queue** bigger;
  mem_queue* q;
  if (at < s->n_queues && str_compare(bytes_str(&s->queues[at]->name), name) == 0)
    return s->queues[at];
  bigger = (mem_queue**)grow(s->queues, &s->cap_queues, s->n_queues + 1, sizeof *s->queues);
  if (bigger == NULL) return NULL;
  s->queues = bigger;
  q = (mem_queue*)calloc(1, sizeof *q);
  if (q == NULL) return NULL;
  if (!bytes_copy(&q->name, name)) {
    free(q);
    return NULL;
  }
  q->ordinal = s->n_queues;
  memmove(&s->queues[at + 1], &s->queues[at], (s->n_queues - at) * sizeof *s->queues);
  s->queues[at] = q;
  s->n_queues++;
  return q;
}

/* Index of the first limit whose queue is >= queue (binary search). */
static size_t limit_position(const mem_store* s, conveyor_str queue) {
  size_t lo = 0, hi = s->n_limits;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (str_compare(bytes_str(&s->limits[mid].queue), queue) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* ------------------------------------------------------------------------
 * The state machine: every change of a job's state goes through here, so
 * the AVAILABLE list and the per-queue counts can never disagree with it.
 * ------------------------------------------------------------------------ */

/* Takes j out of its state's bookkeeping. */
static void leave_state(mem_store* s, mem_job* j) {
  if (j->state == CONVEYOR_JOB_AVAILABLE) {
    /* Swap-remove from the AVAILABLE list. */
    mem_job* last = s->available[--s->n_available];
    s->available[j->available_slot] = last;
    last->available_slot = j->available_slot;
  }
  j->queue->count[j->state]--;
}

/* Puts j into state's bookkeeping. Never allocates: available[] always has
 * room for every retained job (enqueue keeps cap_available >= n_jobs). */
static void enter_state(mem_store* s, mem_job* j, int32_t state) {
  j->state = state;
  j->queue->count[state]++;
  if (state == CONVEYOR_JOB_AVAILABLE) {
    j->available_slot = s->n_available;
    s->available[s->n_available++] = j;
  }
}

static void set_state(mem_store* s, mem_job* j, int32_t state) {
  leave_state(s, j);
  enter_state(s, j, state);
}

static void make_available(mem_store* s, mem_job* j, int64_t run_at_us) {
  set_state(s, j, CONVEYOR_JOB_AVAILABLE);
  j->run_at_us = run_at_us;
  j->lease_token = 0;
  j->lease_expires_us = 0;
}

static void make_running(mem_store* s, mem_job* j, int64_t lease_token, int64_t expires_us,
                         int64_t now_us) {
  set_state(s, j, CONVEYOR_JOB_RUNNING);
  j->attempt += 1;
  j->started_at_us = now_us; /* kept by every other change until the next claim */
  j->lease_token = lease_token;
  j->lease_expires_us = expires_us;
}

static void make_final(mem_store* s, mem_job* j, int32_t state, int64_t now_us) {
  set_state(s, j, state);
  j->finalized_at_us = now_us;
  j->lease_token = 0;
  j->lease_expires_us = 0;
}

static int is_final(int32_t state) {
  return state == CONVEYOR_JOB_COMPLETED || state == CONVEYOR_JOB_FAILED ||
         state == CONVEYOR_JOB_CANCELLED;
}

static void job_free(mem_job* j) {
  bytes_free(&j->kind);
  bytes_free(&j->payload);
  bytes_free(&j->last_error);
  free(j);
}

/* Hands a job to the host. The struct and its strings live on this stack
 * frame and in the store, both valid for the whole callback (header:
 * Strings). */
static void report_job(const mem_job* j, int64_t now_us, conveyor_job_fn on_job, void* ctx) {
  conveyor_job out;
  memset(&out, 0, sizeof out); /* reserved0 and any padding are zero */
  out.struct_size = (uint32_t)sizeof out;
  out.state = j->state;
  if (j->state == CONVEYOR_JOB_AVAILABLE && j->run_at_us > now_us)
    out.state = CONVEYOR_JOB_SCHEDULED;
  out.id = j->id;
  out.queue = bytes_str(&j->queue->name);
  out.kind = bytes_str(&j->kind);
  out.payload = bytes_str(&j->payload);
  out.priority = j->priority;
  out.attempt = j->attempt;
  out.max_attempts = j->max_attempts;
  out.run_at_us = j->run_at_us;
  out.created_at_us = j->created_at_us;
  out.finalized_at_us = j->finalized_at_us;
  out.lease_token = j->lease_token;
  out.lease_expires_us = j->lease_expires_us;
  out.last_error = bytes_str(&j->last_error);
  /* ABI 1.6: struct_size covers started_at_us, so it is reported; timeout_ms
   * stays 0 (no enqueue_v5 here: every job has the queue's timeout). */
  out.started_at_us = j->started_at_us;
  on_job(ctx, &out);
}

/* ------------------------------------------------------------------------
 * Notifications: every change is queued on every open handle of the store
 * (deduplicated by kind and queue, so a handle that never waits holds at
 * most three notes per queue) and wakes wait_for_notification.
 * ------------------------------------------------------------------------ */

static void notify(mem_store* s, int32_t kind, const mem_bytes* queue) {
  conveyor_storage* h;
  for (h = s->subscribers; h != NULL; h = h->next_subscriber) {
    size_t i;
    mem_note* bigger;
    int seen = 0;
    for (i = 0; i < h->n_notes && !seen; ++i)
      seen = h->notes[i].kind == kind &&
             str_compare(bytes_str(&h->notes[i].queue), bytes_str(queue)) == 0;
    if (seen) continue;
    /* A note lost to low memory costs latency only: the host also polls. */
    bigger = (mem_note*)grow(h->notes, &h->cap_notes, h->n_notes + 1, sizeof *h->notes);
    if (bigger == NULL) continue;
    h->notes = bigger;
    if (!bytes_copy(&h->notes[h->n_notes].queue, bytes_str(queue))) continue;
    h->notes[h->n_notes].kind = kind;
    h->n_notes++;
  }
  pthread_cond_broadcast(&s->noted);
}

/* ------------------------------------------------------------------------
 * open / close / migrate
 * ------------------------------------------------------------------------ */

static mem_store* store_create(conveyor_str name) {
  pthread_condattr_t attr;
  int cond_ok;
  mem_store* s = (mem_store*)calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  if (!bytes_copy(&s->name, name)) {
    free(s);
    return NULL;
  }
  if (pthread_mutex_init(&s->mu, NULL) != 0) {
    bytes_free(&s->name);
    free(s);
    return NULL;
  }
  /* The wait's deadline is on the monotonic clock: a wall-clock jump must
   * not stretch or cut a host's timeout. */
  cond_ok = pthread_condattr_init(&attr) == 0;
  if (cond_ok) {
    cond_ok = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
              pthread_cond_init(&s->noted, &attr) == 0;
    pthread_condattr_destroy(&attr);
  }
  if (!cond_ok) {
    pthread_mutex_destroy(&s->mu);
    bytes_free(&s->name);
    free(s);
    return NULL;
  }
  s->next_id = 1;
  return s;
}

static void store_destroy(mem_store* s) {
  size_t i;
  for (i = 0; i < s->n_jobs; ++i) job_free(s->jobs[i]);
  for (i = 0; i < s->n_queues; ++i) {
    bytes_free(&s->queues[i]->name);
    free(s->queues[i]);
  }
  for (i = 0; i < s->n_limits; ++i) bytes_free(&s->limits[i].queue);
  free(s->jobs);
  free(s->available);
  free(s->queues);
  free(s->limits);
  bytes_free(&s->name);
  pthread_cond_destroy(&s->noted);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static conveyor_status mem_open(const conveyor_option* options, size_t n_options,
                                conveyor_storage** out, conveyor_error* err) {
  conveyor_str name;
  conveyor_storage* h;
  mem_store* s;
  size_t i;
  name.data = "default";
  name.len = strlen(name.data);
  if (out == NULL) return set_error(err, CONVEYOR_E_INVALID, "memory plugin: out is NULL");
  if (n_options > 0 && options == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: options is NULL");
  for (i = 0; i < n_options; ++i) {
    conveyor_str key = options[i].key;
    if (!str_is_valid(key) || !str_is_valid(options[i].value))
      return set_error(err, CONVEYOR_E_INVALID, "memory plugin: option %zu has NULL data", i);
    if (key.len == 4 && memcmp(key.data, "name", 4) == 0) {
      name = options[i].value;
    } else {
      /* Unknown keys are errors naming the key (header: open), so a typo in
       * [storage.options] is caught at start-up instead of ignored. */
      return set_error(err, CONVEYOR_E_INVALID,
                       "memory plugin: unknown storage option '%.*s' (known: name)", (int)key.len,
                       key.data);
    }
  }

  h = (conveyor_storage*)calloc(1, sizeof *h);
  if (h == NULL) return out_of_memory(err);
  pthread_mutex_lock(&registry_mu);
  for (s = registry; s != NULL; s = s->next)
    if (str_compare(bytes_str(&s->name), name) == 0) break;
  if (s == NULL) {
    s = store_create(name);
    if (s == NULL) {
      pthread_mutex_unlock(&registry_mu);
      free(h);
      return out_of_memory(err);
    }
    s->next = registry;
    registry = s;
  }
  pthread_mutex_lock(&s->mu);
  s->handles++;
  h->store = s;
  h->next_subscriber = s->subscribers;
  s->subscribers = h;
  pthread_mutex_unlock(&s->mu);
  pthread_mutex_unlock(&registry_mu);
  *out = h; /* written only on success (header: "Failure: *out untouched") */
  return CONVEYOR_OK;
}

static void mem_close(conveyor_storage* h) {
  mem_store* s;
  conveyor_storage** link;
  size_t i;
  int last;
  if (h == NULL) return; /* header: "NULL is a no-op" */
  s = h->store;
  pthread_mutex_lock(&registry_mu);
  pthread_mutex_lock(&s->mu);
  for (link = &s->subscribers; *link != NULL; link = &(*link)->next_subscriber)
    if (*link == h) {
      *link = h->next_subscriber;
      break;
    }
  last = --s->handles == 0;
  pthread_mutex_unlock(&s->mu);
  if (last) {
    mem_store** entry;
    for (entry = &registry; *entry != NULL; entry = &(*entry)->next)
      if (*entry == s) {
        *entry = s->next;
        break;
      }
  }
  pthread_mutex_unlock(&registry_mu);
  if (last) store_destroy(s);
  for (i = 0; i < h->n_notes; ++i) bytes_free(&h->notes[i].queue);
  free(h->notes);
  free(h);
}

static conveyor_status mem_migrate(conveyor_storage* h, conveyor_error* err) {
  (void)h;
  (void)err;
  return CONVEYOR_OK; /* memory has no schema to create or upgrade */
}

/* ------------------------------------------------------------------------
 * enqueue and claim
 * ------------------------------------------------------------------------ */

/* enqueue and enqueue_v2 (ABI 1.1): the same but for created_at_us. */
static conveyor_status enqueue_created_at(conveyor_storage* h, const conveyor_new_job* jobs,
                                          size_t n, int64_t created_at_us, int64_t* out_ids,
                                          conveyor_error* err) {
  mem_store* s = h->store;
  mem_job** fresh;
  mem_job** bigger;
  size_t i;
  int ok;
  if (n == 0) return CONVEYOR_OK; /* header: "n == 0 is a no-op" */
  if (jobs == NULL || out_ids == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: jobs or out_ids is NULL");
  /* Check the whole batch before storing any of it: all or none. */
  for (i = 0; i < n; ++i) {
    const conveyor_new_job* in = &jobs[i];
    if (!str_is_valid(in->queue) || !str_is_valid(in->kind) || !str_is_valid(in->payload))
      return set_error(err, CONVEYOR_E_INVALID, "job %zu of the batch: a string has NULL data", i);
    if (in->queue.len == 0)
      return set_error(err, CONVEYOR_E_INVALID, "job %zu of the batch: empty queue name", i);
    if (in->kind.len == 0)
      return set_error(err, CONVEYOR_E_INVALID, "job %zu of the batch: empty kind", i);
    if (in->max_attempts < 1)
      return set_error(err, CONVEYOR_E_INVALID,
                       "job %zu of the batch: max_attempts is %d, must be >= 1", i,
                       (int)in->max_attempts);
  }
  /* Allocate every job before taking the lock, so running out of memory
   * leaves nothing half-stored. */
  fresh = (mem_job**)calloc(n, sizeof *fresh);
  if (fresh == NULL) return out_of_memory(err);
  for (i = 0; i < n; ++i) {
    mem_job* j = (mem_job*)calloc(1, sizeof *j);
    fresh[i] = j;
    if (j == NULL || !bytes_copy(&j->kind, jobs[i].kind) ||
        !bytes_copy(&j->payload, jobs[i].payload)) {
      size_t k;
      for (k = 0; k <= i; ++k)
        if (fresh[k] != NULL) job_free(fresh[k]);
      free(fresh);
      return out_of_memory(err);
    }
    j->priority = jobs[i].priority;
    j->max_attempts = jobs[i].max_attempts;
    j->run_at_us = jobs[i].run_at_us;
    j->created_at_us = created_at_us;
  }

  pthread_mutex_lock(&s->mu);
  /* Room for n more jobs in jobs[] and in available[] (enter_state relies on
   * cap_available >= n_jobs), and every queue of the batch. */
  bigger = (mem_job**)grow(s->jobs, &s->cap_jobs, s->n_jobs + n, sizeof *s->jobs);
  if (bigger != NULL) {
    s->jobs = bigger;
    bigger = (mem_job**)grow(s->available, &s->cap_available, s->n_jobs + n, sizeof *s->available);
  }
  if (bigger != NULL) s->available = bigger;
  ok = bigger != NULL;
  for (i = 0; i < n && ok; ++i) {
    fresh[i]->queue = get_queue(s, jobs[i].queue);
    if (fresh[i]->queue == NULL) ok = 0;
  }
  if (!ok) {
    /* Queues created above stay known (and empty): harmless. */
    pthread_mutex_unlock(&s->mu);
    for (i = 0; i < n; ++i) job_free(fresh[i]);
    free(fresh);
    return out_of_memory(err);
  }
  for (i = 0; i < n; ++i) {
    mem_job* j = fresh[i];
    j->id = s->next_id++;
    s->jobs[s->n_jobs++] = j;
    enter_state(s, j, CONVEYOR_JOB_AVAILABLE);
    out_ids[i] = j->id;
    notify(s, CONVEYOR_NOTIFY_JOBS, &j->queue->name);
  }
  pthread_mutex_unlock(&s->mu);
  free(fresh);
  return CONVEYOR_OK;
}

static conveyor_status mem_enqueue(conveyor_storage* h, const conveyor_new_job* jobs, size_t n,
                                   int64_t* out_ids, conveyor_error* err) {
  return enqueue_created_at(h, jobs, n, wall_clock_us(), out_ids, err);
}

/* ABI 1.1: created_at_us is the host's now_us. */
static conveyor_status mem_enqueue_v2(conveyor_storage* h, const conveyor_new_job* jobs, size_t n,
                                      int64_t now_us, int64_t* out_ids, conveyor_error* err) {
  return enqueue_created_at(h, jobs, n, now_us, out_ids, err);
}

/* Claim order: priority, then run_at, then id, lowest first. */
static int runs_before(const mem_job* a, const mem_job* b) {
  if (a->priority != b->priority) return a->priority < b->priority;
  if (a->run_at_us != b->run_at_us) return a->run_at_us < b->run_at_us;
  return a->id < b->id;
}

/* Whether kind is one of kinds[0..n_kinds); n_kinds == 0 accepts every kind. */
static int kind_wanted(const mem_bytes* kind, const conveyor_str* kinds, size_t n_kinds) {
  size_t i;
  if (n_kinds == 0) return 1;
  for (i = 0; i < n_kinds; ++i)
    if (str_compare(bytes_str(kind), kinds[i]) == 0) return 1;
  return 0;
}

/* claim, and claim_kinds (ABI 1.1) with kinds[0..n_kinds) (checked by the caller). */
static conveyor_status claim_of_kinds(conveyor_storage* h, conveyor_str queue,
                                      const conveyor_str* kinds, size_t n_kinds, uint32_t max_jobs,
                                      int64_t lease_token, int64_t now_us, int64_t lease_expires_us,
                                      conveyor_job_fn on_job, void* ctx, uint32_t* out_claimed,
                                      conveyor_error* err) {
  mem_store* s = h->store;
  mem_queue* q;
  mem_job** best; /* the first `found` jobs in claim order, sorted */
  size_t want, found = 0, i;
  if (on_job == NULL || out_claimed == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: on_job or out_claimed is NULL");
  if (!str_is_valid(queue)) return set_error(err, CONVEYOR_E_INVALID, "queue has NULL data");
  if (lease_token == 0) return set_error(err, CONVEYOR_E_INVALID, "lease_token must be non-zero");

  pthread_mutex_lock(&s->mu);
  q = find_queue(s, queue);
  want = q == NULL || q->paused ? 0 : (size_t)max_jobs;
  if (want > s->n_available) want = s->n_available;
  if (want == 0) {
    pthread_mutex_unlock(&s->mu);
    *out_claimed = 0; /* nothing ready is success */
    return CONVEYOR_OK;
  }
  best = (mem_job**)malloc(want * sizeof *best);
  if (best == NULL) {
    pthread_mutex_unlock(&s->mu);
    return out_of_memory(err);
  }
  /* One pass over the AVAILABLE jobs keeps the `want` best ready ones of
   * this queue in a sorted buffer (insertion: cheap, since most jobs lose
   * against the buffer's last entry). */
  for (i = 0; i < s->n_available; ++i) {
    mem_job* j = s->available[i];
    size_t at;
    if (j->queue != q || j->run_at_us > now_us) continue;
    if (!kind_wanted(&j->kind, kinds, n_kinds)) continue;
    if (found == want && !runs_before(j, best[found - 1])) continue;
    at = found < want ? found++ : found - 1;
    while (at > 0 && runs_before(j, best[at - 1])) {
      best[at] = best[at - 1];
      --at;
    }
    best[at] = j;
  }
  for (i = 0; i < found; ++i) make_running(s, best[i], lease_token, lease_expires_us, now_us);
  /* Report once every claim is made (in memory, "durable" means done).
   * Callbacks never call back into this handle, so holding the lock is safe
   * and keeps the jobs' strings stable during each callback. */
  for (i = 0; i < found; ++i) report_job(best[i], now_us, on_job, ctx);
  pthread_mutex_unlock(&s->mu);
  free(best);
  *out_claimed = (uint32_t)found;
  return CONVEYOR_OK;
}

static conveyor_status mem_claim(conveyor_storage* h, conveyor_str queue, uint32_t max_jobs,
                                 int64_t lease_token, int64_t now_us, int64_t lease_expires_us,
                                 conveyor_job_fn on_job, void* ctx, uint32_t* out_claimed,
                                 conveyor_error* err) {
  return claim_of_kinds(h, queue, NULL, 0, max_jobs, lease_token, now_us, lease_expires_us, on_job,
                        ctx, out_claimed, err);
}

/* ABI 1.1: claim, only jobs whose kind is in kinds. */
static conveyor_status mem_claim_kinds(conveyor_storage* h, conveyor_str queue,
                                       const conveyor_str* kinds, size_t n_kinds, uint32_t max_jobs,
                                       int64_t lease_token, int64_t now_us,
                                       int64_t lease_expires_us, conveyor_job_fn on_job, void* ctx,
                                       uint32_t* out_claimed, conveyor_error* err) {
  size_t i;
  if (n_kinds > 0 && kinds == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: kinds is NULL with n_kinds > 0");
  for (i = 0; i < n_kinds; ++i)
    if (!str_is_valid(kinds[i]) || kinds[i].len == 0)
      return set_error(err, CONVEYOR_E_INVALID, "memory plugin: kinds[%zu] is empty", i);
  return claim_of_kinds(h, queue, kinds, n_kinds, max_jobs, lease_token, now_us, lease_expires_us,
                        on_job, ctx, out_claimed, err);
}

/* ------------------------------------------------------------------------
 * The end of an attempt: complete, fail, extend_leases, release
 * ------------------------------------------------------------------------ */

/* complete, extend_leases and release take a batch of leases and report one
 * status per lease; with n == 0 the arrays may be NULL. */
static conveyor_status check_lease_batch(const conveyor_lease* leases, size_t n,
                                         const conveyor_status* results, conveyor_error* err) {
  if (n > 0 && (leases == NULL || results == NULL))
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: leases or results is NULL");
  return CONVEYOR_OK;
}

static conveyor_status mem_complete(conveyor_storage* h, const conveyor_lease* leases, size_t n,
                                    int64_t now_us, conveyor_status* results, conveyor_error* err) {
  mem_store* s = h->store;
  size_t i;
  conveyor_status st = check_lease_batch(leases, n, results, err);
  if (st != CONVEYOR_OK) return st;
  pthread_mutex_lock(&s->mu);
  for (i = 0; i < n; ++i) {
    mem_job* j = find_lease(s, leases[i]);
    results[i] = j != NULL ? CONVEYOR_OK : CONVEYOR_E_LEASE_LOST;
    if (j != NULL) make_final(s, j, CONVEYOR_JOB_COMPLETED, now_us);
  }
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static conveyor_status mem_fail(conveyor_storage* h, conveyor_lease lease, conveyor_str error_text,
                                int64_t retry_at_us, int64_t now_us, conveyor_error* err) {
  mem_store* s = h->store;
  mem_job* j;
  mem_bytes text;
  if (!str_is_valid(error_text))
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: error_text has NULL data");
  if (!bytes_copy(&text, error_text)) return out_of_memory(err);
  pthread_mutex_lock(&s->mu);
  j = find_lease(s, lease);
  if (j == NULL) {
    pthread_mutex_unlock(&s->mu);
    bytes_free(&text);
    return set_error(err, CONVEYOR_E_LEASE_LOST,
                     "job %lld is not running under lease %lld (expired and claimed again, "
                     "cancelled, or finished)",
                     (long long)lease.job_id, (long long)lease.lease_token);
  }
  bytes_replace(&j->last_error, text);
  if (retry_at_us >= 0) {
    make_available(s, j, retry_at_us); /* the attempt stays spent */
    notify(s, CONVEYOR_NOTIFY_JOBS, &j->queue->name);
  } else {
    make_final(s, j, CONVEYOR_JOB_FAILED, now_us);
  }
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static conveyor_status mem_extend_leases(conveyor_storage* h, const conveyor_lease* leases,
                                         size_t n, int64_t lease_expires_us,
                                         conveyor_status* results, conveyor_error* err) {
  mem_store* s = h->store;
  size_t i;
  conveyor_status st = check_lease_batch(leases, n, results, err);
  if (st != CONVEYOR_OK) return st;
  pthread_mutex_lock(&s->mu);
  for (i = 0; i < n; ++i) {
    mem_job* j = find_lease(s, leases[i]);
    results[i] = j != NULL ? CONVEYOR_OK : CONVEYOR_E_LEASE_LOST;
    if (j != NULL) j->lease_expires_us = lease_expires_us;
  }
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static conveyor_status mem_release(conveyor_storage* h, const conveyor_lease* leases, size_t n,
                                   int64_t now_us, conveyor_status* results, conveyor_error* err) {
  mem_store* s = h->store;
  size_t i;
  conveyor_status st = check_lease_batch(leases, n, results, err);
  if (st != CONVEYOR_OK) return st;
  pthread_mutex_lock(&s->mu);
  for (i = 0; i < n; ++i) {
    mem_job* j = find_lease(s, leases[i]);
    results[i] = j != NULL ? CONVEYOR_OK : CONVEYOR_E_LEASE_LOST;
    if (j == NULL) continue;
    make_available(s, j, now_us);
    j->attempt -= 1; /* given back unrun: the attempt is not spent */
    notify(s, CONVEYOR_NOTIFY_JOBS, &j->queue->name);
  }
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

/* ------------------------------------------------------------------------
 * Maintenance: rescue_expired, cancel, purge_finished
 * ------------------------------------------------------------------------ */

/* rescue_expired and rescue_expired_v2: on_job (may be NULL) hears of each
 * rescued job after the change. */
static conveyor_status rescue(conveyor_storage* h, int64_t now_us, uint32_t max_jobs,
                              conveyor_job_fn on_job, void* ctx, uint32_t* out_rescued,
                              conveyor_error* err) {
  static const char kExpired[] = "lease expired: the worker stopped heartbeating (presumed dead)";
  mem_store* s = h->store;
  uint32_t rescued = 0;
  size_t i;
  conveyor_str expired;
  if (out_rescued == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: out_rescued is NULL");
  expired.data = kExpired;
  expired.len = sizeof kExpired - 1;
  pthread_mutex_lock(&s->mu);
  for (i = 0; i < s->n_jobs && rescued < max_jobs; ++i) {
    mem_job* j = s->jobs[i];
    mem_bytes text;
    if (j->state != CONVEYOR_JOB_RUNNING || j->lease_expires_us >= now_us) continue;
    if (!bytes_copy(&text, expired)) {
      pthread_mutex_unlock(&s->mu);
      return out_of_memory(err);
    }
    bytes_replace(&j->last_error, text);
    if (j->attempt < j->max_attempts) {
      make_available(s, j, now_us);
      notify(s, CONVEYOR_NOTIFY_JOBS, &j->queue->name);
    } else {
      make_final(s, j, CONVEYOR_JOB_FAILED, now_us);
    }
    if (on_job != NULL) report_job(j, now_us, on_job, ctx);
    ++rescued;
  }
  pthread_mutex_unlock(&s->mu);
  *out_rescued = rescued;
  return CONVEYOR_OK;
}

static conveyor_status mem_rescue_expired(conveyor_storage* h, int64_t now_us, uint32_t max_jobs,
                                          uint32_t* out_rescued, conveyor_error* err) {
  return rescue(h, now_us, max_jobs, NULL, NULL, out_rescued, err);
}

static conveyor_status mem_rescue_expired_v2(conveyor_storage* h, int64_t now_us, uint32_t max_jobs,
                                             conveyor_job_fn on_job, void* ctx,
                                             uint32_t* out_rescued, conveyor_error* err) {
  if (on_job == NULL) return set_error(err, CONVEYOR_E_INVALID, "memory plugin: on_job is NULL");
  return rescue(h, now_us, max_jobs, on_job, ctx, out_rescued, err);
}

static conveyor_status mem_cancel(conveyor_storage* h, int64_t job_id, int64_t now_us,
                                  conveyor_error* err) {
  mem_store* s = h->store;
  mem_job* j;
  pthread_mutex_lock(&s->mu);
  j = find_job(s, job_id);
  if (j == NULL || is_final(j->state)) {
    pthread_mutex_unlock(&s->mu);
    return set_error(err, CONVEYOR_E_NOT_FOUND, "no job %lld that can be cancelled (%s)",
                     (long long)job_id, j == NULL ? "no such job" : "already finished");
  }
  /* A RUNNING job's lease is voided with it: its worker gets LEASE_LOST. */
  make_final(s, j, CONVEYOR_JOB_CANCELLED, now_us);
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static conveyor_status mem_purge_finished(conveyor_storage* h, int64_t finalized_before_us,
                                          uint32_t max_jobs, uint64_t* out_deleted,
                                          conveyor_error* err) {
  mem_store* s = h->store;
  uint64_t deleted = 0;
  size_t i, kept = 0;
  if (out_deleted == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: out_deleted is NULL");
  pthread_mutex_lock(&s->mu);
  /* One pass that compacts jobs[] in place, keeping it in id order. Final
   * jobs are never AVAILABLE, so available[] needs no change. */
  for (i = 0; i < s->n_jobs; ++i) {
    mem_job* j = s->jobs[i];
    if (deleted < max_jobs && is_final(j->state) && j->finalized_at_us < finalized_before_us) {
      j->queue->count[j->state]--;
      job_free(j);
      ++deleted;
    } else {
      s->jobs[kept++] = j;
    }
  }
  s->n_jobs = kept;
  pthread_mutex_unlock(&s->mu);
  *out_deleted = deleted;
  return CONVEYOR_OK;
}

/* ------------------------------------------------------------------------
 * Queues: set_queue_paused, queue_stats, list_queues, get_job
 * ------------------------------------------------------------------------ */

static conveyor_status mem_set_queue_paused(conveyor_storage* h, conveyor_str queue, int32_t paused,
                                            int64_t now_us, conveyor_error* err) {
  mem_store* s = h->store;
  mem_queue* q;
  (void)now_us; /* nothing here records when */
  if (!str_is_valid(queue) || queue.len == 0)
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: empty queue name");
  pthread_mutex_lock(&s->mu);
  q = get_queue(s, queue); /* pausing a queue with no jobs is allowed */
  if (q == NULL) {
    pthread_mutex_unlock(&s->mu);
    return out_of_memory(err);
  }
  q->paused = paused != 0;
  s->marker++;
  notify(s, CONVEYOR_NOTIFY_QUEUE_STATE, &q->name);
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static conveyor_status mem_queue_stats(conveyor_storage* h, int64_t now_us,
                                       conveyor_queue_stats_fn on_stats, void* ctx,
                                       conveyor_error* err) {
  mem_store* s = h->store;
  int64_t* scheduled; /* per queue ordinal: AVAILABLE jobs with run_at > now */
  int64_t* oldest;    /* per queue ordinal: least run_at of pending jobs, 0: none */
  size_t i;
  if (on_stats == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: on_stats is NULL");
  pthread_mutex_lock(&s->mu);
  scheduled = (int64_t*)calloc(s->n_queues + 1, sizeof *scheduled);
  oldest = (int64_t*)calloc(s->n_queues + 1, sizeof *oldest);
  if (scheduled == NULL || oldest == NULL) {
    pthread_mutex_unlock(&s->mu);
    free(scheduled);
    free(oldest);
    return out_of_memory(err);
  }
  for (i = 0; i < s->n_available; ++i) {
    const mem_job* j = s->available[i];
    int64_t* o = &oldest[j->queue->ordinal];
    if (j->run_at_us > now_us)
      scheduled[j->queue->ordinal]++;
    else if (*o == 0 || j->run_at_us < *o)
      *o = j->run_at_us;
  }
  for (i = 0; i < s->n_queues; ++i) {
    const mem_queue* q = s->queues[i];
    conveyor_queue_stats out;
    const int64_t* c = q->count;
    const int64_t retained = c[CONVEYOR_JOB_AVAILABLE] + c[CONVEYOR_JOB_RUNNING] +
                             c[CONVEYOR_JOB_COMPLETED] + c[CONVEYOR_JOB_FAILED] +
                             c[CONVEYOR_JOB_CANCELLED];
    if (retained == 0 && !q->paused) continue; /* "retained jobs or is paused" */
    memset(&out, 0, sizeof out);
    out.struct_size = (uint32_t)sizeof out;
    out.paused = q->paused;
    out.queue = bytes_str(&q->name);
    out.scheduled = scheduled[q->ordinal];
    out.pending = c[CONVEYOR_JOB_AVAILABLE] - out.scheduled;
    out.running = c[CONVEYOR_JOB_RUNNING];
    out.completed = c[CONVEYOR_JOB_COMPLETED];
    out.failed = c[CONVEYOR_JOB_FAILED];
    out.cancelled = c[CONVEYOR_JOB_CANCELLED];
    out.oldest_pending_run_at_us = oldest[q->ordinal];
    on_stats(ctx, &out);
  }
  pthread_mutex_unlock(&s->mu);
  free(scheduled);
  free(oldest);
  return CONVEYOR_OK;
}

static conveyor_status mem_list_queues(conveyor_storage* h, conveyor_queue_fn on_queue, void* ctx,
                                       conveyor_error* err) {
  mem_store* s = h->store;
  size_t i;
  if (on_queue == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: on_queue is NULL");
  pthread_mutex_lock(&s->mu);
  /* Cheap: the queue list is kept in name order, no job is looked at. */
  for (i = 0; i < s->n_queues; ++i)
    on_queue(ctx, bytes_str(&s->queues[i]->name), s->queues[i]->paused);
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static conveyor_status mem_get_job(conveyor_storage* h, int64_t job_id, int64_t now_us,
                                   conveyor_job_fn on_job, void* ctx, conveyor_error* err) {
  mem_store* s = h->store;
  mem_job* j;
  if (on_job == NULL) return set_error(err, CONVEYOR_E_INVALID, "memory plugin: on_job is NULL");
  pthread_mutex_lock(&s->mu);
  j = find_job(s, job_id);
  if (j == NULL) {
    pthread_mutex_unlock(&s->mu);
    return set_error(err, CONVEYOR_E_NOT_FOUND, "no job %lld (never enqueued, or purged)",
                     (long long)job_id);
  }
  report_job(j, now_us, on_job, ctx);
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

/* ------------------------------------------------------------------------
 * Rate-limit overrides and the change marker
 * ------------------------------------------------------------------------ */

static conveyor_status mem_set_rate_limit(conveyor_storage* h, conveyor_str queue,
                                          double rate_per_sec, uint32_t burst, int64_t now_us,
                                          conveyor_error* err) {
  mem_store* s = h->store;
  size_t at;
  /* !(rate > 0) is also true for NaN. */
  if (!(rate_per_sec > 0) || !isfinite(rate_per_sec))
    return set_error(err, CONVEYOR_E_INVALID, "rate_per_sec must be > 0 and finite, got %g",
                     rate_per_sec);
  if (burst < 1) return set_error(err, CONVEYOR_E_INVALID, "burst must be >= 1, got 0");
  if (!str_is_valid(queue) || queue.len == 0)
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: empty queue name");
  pthread_mutex_lock(&s->mu);
  at = limit_position(s, queue);
  if (at == s->n_limits || str_compare(bytes_str(&s->limits[at].queue), queue) != 0) {
    mem_limit fresh;
    mem_limit* bigger =
        (mem_limit*)grow(s->limits, &s->cap_limits, s->n_limits + 1, sizeof *s->limits);
    if (bigger == NULL || !bytes_copy(&fresh.queue, queue)) {
      if (bigger != NULL) s->limits = bigger;
      pthread_mutex_unlock(&s->mu);
      return out_of_memory(err);
    }
    s->limits = bigger;
    memmove(&s->limits[at + 1], &s->limits[at], (s->n_limits - at) * sizeof *s->limits);
    s->limits[at] = fresh;
    s->n_limits++;
  }
  s->limits[at].rate_per_sec = rate_per_sec;
  s->limits[at].burst = burst;
  s->limits[at].updated_at_us = now_us;
  s->marker++;
  notify(s, CONVEYOR_NOTIFY_RATE_LIMITS, &s->limits[at].queue);
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static conveyor_status mem_delete_rate_limit(conveyor_storage* h, conveyor_str queue,
                                             conveyor_error* err) {
  mem_store* s = h->store;
  size_t at;
  mem_bytes name;
  if (!str_is_valid(queue)) return set_error(err, CONVEYOR_E_INVALID, "queue has NULL data");
  pthread_mutex_lock(&s->mu);
  at = limit_position(s, queue);
  if (at == s->n_limits || str_compare(bytes_str(&s->limits[at].queue), queue) != 0) {
    pthread_mutex_unlock(&s->mu);
    return set_error(err, CONVEYOR_E_NOT_FOUND, "queue %.*s has no rate-limit override",
                     (int)queue.len, queue.data);
  }
  name = s->limits[at].queue;
  memmove(&s->limits[at], &s->limits[at + 1], (s->n_limits - at - 1) * sizeof *s->limits);
  s->n_limits--;
  s->marker++;
  notify(s, CONVEYOR_NOTIFY_RATE_LIMITS, &name);
  pthread_mutex_unlock(&s->mu);
  bytes_free(&name);
  return CONVEYOR_OK;
}

static conveyor_status mem_list_rate_limits(conveyor_storage* h, conveyor_rate_limit_fn on_limit,
                                            void* ctx, conveyor_error* err) {
  mem_store* s = h->store;
  size_t i;
  if (on_limit == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: on_limit is NULL");
  pthread_mutex_lock(&s->mu);
  for (i = 0; i < s->n_limits; ++i) {
    conveyor_rate_limit out;
    memset(&out, 0, sizeof out);
    out.struct_size = (uint32_t)sizeof out;
    out.burst = s->limits[i].burst;
    out.queue = bytes_str(&s->limits[i].queue);
    out.rate_per_sec = s->limits[i].rate_per_sec;
    out.updated_at_us = s->limits[i].updated_at_us;
    on_limit(ctx, &out);
  }
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static conveyor_status mem_change_marker(conveyor_storage* h, int64_t* out_marker,
                                         conveyor_error* err) {
  mem_store* s = h->store;
  if (out_marker == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: out_marker is NULL");
  pthread_mutex_lock(&s->mu);
  *out_marker = s->marker;
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

/* ------------------------------------------------------------------------
 * wait_for_notification (optional; CONVEYOR_CAP_NOTIFY says it is here)
 * ------------------------------------------------------------------------ */

static conveyor_status mem_wait_for_notification(conveyor_storage* h, int64_t timeout_us,
                                                 conveyor_notify_fn on_notify, void* ctx,
                                                 conveyor_error* err) {
  mem_store* s = h->store;
  struct timespec deadline;
  mem_note* notes;
  size_t n_notes, i;
  if (on_notify == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: on_notify is NULL");
  if (timeout_us < 0) timeout_us = 0;
  if (timeout_us > (int64_t)3600 * 1000000) timeout_us = (int64_t)3600 * 1000000; /* no overflow */
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
  /* Take this handle's notes and deliver them without the lock. */
  notes = h->notes;
  n_notes = h->n_notes;
  h->notes = NULL;
  h->n_notes = 0;
  h->cap_notes = 0;
  pthread_mutex_unlock(&s->mu);
  for (i = 0; i < n_notes; ++i) {
    on_notify(ctx, notes[i].kind, bytes_str(&notes[i].queue));
    bytes_free(&notes[i].queue);
  }
  free(notes);
  return CONVEYOR_OK; /* on a timeout too */
}

/* ------------------------------------------------------------------------
 * The function table and the entry point
 * ------------------------------------------------------------------------ */

/* Static and constant: the host reads it for as long as the library is
 * loaded and never writes or frees it. Designated initialisers keep every
 * slot next to its name; reserved fields are zero. */
/* ------------------------------------------------------------------------
 * ABI 1.1 job operations: list_jobs, retry_jobs, delete_jobs (job_counts is
 * queue_stats: the counts are kept per queue, no retained job is read)
 * ------------------------------------------------------------------------ */

/* Index of the first job whose id is > id (binary search). */
static size_t job_position_after(const mem_store* s, int64_t id) {
  size_t lo = 0, hi = s->n_jobs;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->jobs[mid]->id <= id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static conveyor_status mem_list_jobs(conveyor_storage* h, conveyor_str queue, const int32_t* states,
                                     size_t n_states, conveyor_str kind, int64_t after_id,
                                     uint32_t limit, int64_t now_us, conveyor_job_fn on_job,
                                     void* ctx, uint32_t* out_listed, conveyor_error* err) {
  mem_store* s = h->store;
  const mem_queue* q;
  uint32_t listed = 0;
  size_t i, k;
  if (on_job == NULL || out_listed == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: on_job or out_listed is NULL");
  if (!str_is_valid(queue) || queue.len == 0)
    return set_error(err, CONVEYOR_E_INVALID, "list_jobs: queue name is empty");
  if (!str_is_valid(kind))
    return set_error(err, CONVEYOR_E_INVALID, "list_jobs: kind has NULL data");
  if (after_id < 0)
    return set_error(err, CONVEYOR_E_INVALID, "list_jobs: after_id must be >= 0, got %lld",
                     (long long)after_id);
  if (limit == 0 || limit > CONVEYOR_LIST_JOBS_MAX)
    return set_error(err, CONVEYOR_E_INVALID, "list_jobs: limit must be 1..%d, got %u",
                     CONVEYOR_LIST_JOBS_MAX, (unsigned)limit);
  if (n_states > 0 && states == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "list_jobs: states is NULL with n_states > 0");
  for (k = 0; k < n_states; ++k)
    if (states[k] < CONVEYOR_JOB_AVAILABLE || states[k] > CONVEYOR_JOB_CANCELLED)
      return set_error(err, CONVEYOR_E_INVALID,
                       "list_jobs: states[%zu] is %d, not a CONVEYOR_JOB_* state (1..6)", k,
                       (int)states[k]);
  pthread_mutex_lock(&s->mu);
  q = find_queue(s, queue);
  /* jobs[] is in id order: start after after_id, stop at limit. (An example:
   * other queues' jobs are skipped one by one; a real backend keeps an index
   * per queue and state.) */
  for (i = job_position_after(s, after_id); q != NULL && i < s->n_jobs && listed < limit; ++i) {
    const mem_job* j = s->jobs[i];
    int32_t reported = j->state;
    int wanted = n_states == 0;
    if (j->queue != q) continue;
    if (kind.len > 0 && str_compare(bytes_str(&j->kind), kind) != 0) continue;
    if (reported == CONVEYOR_JOB_AVAILABLE && j->run_at_us > now_us)
      reported = CONVEYOR_JOB_SCHEDULED;
    for (k = 0; k < n_states && !wanted; ++k) wanted = states[k] == reported;
    if (!wanted) continue;
    report_job(j, now_us, on_job, ctx);
    ++listed;
  }
  pthread_mutex_unlock(&s->mu);
  *out_listed = listed;
  return CONVEYOR_OK;
}

static conveyor_status mem_retry_jobs(conveyor_storage* h, const int64_t* job_ids, size_t n,
                                      int64_t now_us, conveyor_status* results,
                                      conveyor_error* err) {
  mem_store* s = h->store;
  size_t i;
  if (n == 0) return CONVEYOR_OK;
  if (job_ids == NULL || results == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: job_ids or results is NULL");
  pthread_mutex_lock(&s->mu);
  for (i = 0; i < n; ++i) {
    mem_job* j = find_job(s, job_ids[i]);
    if (j == NULL) {
      results[i] = CONVEYOR_E_NOT_FOUND;
    } else if (j->state != CONVEYOR_JOB_FAILED && j->state != CONVEYOR_JOB_CANCELLED) {
      results[i] = CONVEYOR_E_WRONG_STATE;
    } else {
      /* available[] has room: it always holds every retained job. */
      make_available(s, j, now_us);
      j->attempt = 0;
      j->finalized_at_us = 0; /* last_error is kept */
      notify(s, CONVEYOR_NOTIFY_JOBS, &j->queue->name);
      results[i] = CONVEYOR_OK;
    }
  }
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static conveyor_status mem_delete_jobs(conveyor_storage* h, const int64_t* job_ids, size_t n,
                                       conveyor_status* results, conveyor_error* err) {
  mem_store* s = h->store;
  size_t i;
  if (n == 0) return CONVEYOR_OK;
  if (job_ids == NULL || results == NULL)
    return set_error(err, CONVEYOR_E_INVALID, "memory plugin: job_ids or results is NULL");
  pthread_mutex_lock(&s->mu);
  for (i = 0; i < n; ++i) {
    /* The job, if there, is just before the first job with a greater id. */
    size_t at = job_position_after(s, job_ids[i]);
    mem_job* j = at > 0 && s->jobs[at - 1]->id == job_ids[i] ? s->jobs[--at] : NULL;
    if (j == NULL) {
      results[i] = CONVEYOR_E_NOT_FOUND;
    } else if (!is_final(j->state)) {
      results[i] = CONVEYOR_E_WRONG_STATE;
    } else {
      /* Final jobs are never AVAILABLE: only jobs[] and the count change. */
      j->queue->count[j->state]--;
      job_free(j);
      memmove(&s->jobs[at], &s->jobs[at + 1], (s->n_jobs - at - 1) * sizeof *s->jobs);
      s->n_jobs--;
      results[i] = CONVEYOR_OK;
    }
  }
  pthread_mutex_unlock(&s->mu);
  return CONVEYOR_OK;
}

static const conveyor_storage_plugin memory_plugin = {
    .struct_size = sizeof(conveyor_storage_plugin),
    .abi_major = CONVEYOR_ABI_MAJOR,
    .abi_minor = CONVEYOR_ABI_MINOR,
    .name = MEMORY_PLUGIN_NAME,
    .version = MEMORY_PLUGIN_VERSION,
    .kind = CONVEYOR_KIND_CANONICAL,
    .capabilities = CONVEYOR_CAP_NOTIFY,
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
    .wait_for_notification = mem_wait_for_notification,
    /* ABI 1.1 */
    .enqueue_v2 = mem_enqueue_v2,
    .claim_kinds = mem_claim_kinds,
    .list_jobs = mem_list_jobs,
    .retry_jobs = mem_retry_jobs,
    .delete_jobs = mem_delete_jobs,
    .job_counts = mem_queue_stats,
    .rescue_expired_v2 = mem_rescue_expired_v2,
};

/* The one exported symbol. A host of any 1.x minor gets the table: an older
 * host reads the prefix it knows, a newer one sees our struct_size and leaves
 * the slots we lack alone. Another major gets NULL. */
CONVEYOR_PLUGIN_EXPORT const conveyor_storage_plugin* conveyor_storage_plugin_entry(
    uint32_t host_abi_major, uint32_t host_abi_minor) {
  (void)host_abi_minor;
  return host_abi_major == CONVEYOR_ABI_MAJOR ? &memory_plugin : NULL;
}
