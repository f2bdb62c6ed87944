/*
 * conveyor/storage_plugin.h: the stable C ABI between the Conveyor core (the
 * host) and a storage backend (the plugin).
 *
 * This header is the specification. It is plain C99 and compiles as C and as
 * C++. Nothing but C crosses it: no exceptions, no C++ types, no bool.
 *
 * ---------------------------------------------------------------------------
 * Loading and the version handshake
 * ---------------------------------------------------------------------------
 * A plugin is a shared library that exports one function,
 * CONVEYOR_PLUGIN_ENTRY_SYMBOL, of type conveyor_plugin_entry_fn. The host
 * calls it with the ABI version the host speaks. The plugin returns a pointer
 * to a constant, statically allocated function table (conveyor_storage_plugin)
 * or NULL when it cannot serve that major version. The table stays valid for
 * as long as the library is loaded; the host never frees or writes it.
 *
 * The host refuses a plugin (with an error naming the file and the reason)
 * when: the entry symbol is missing; the entry returns NULL; abi_major differs
 * from the host's; struct_size is smaller than CONVEYOR_PLUGIN_V1_0_SIZE; a
 * required slot is NULL; name or version is NULL or empty; it advertises
 * CONVEYOR_CAP_NOTIFY without wait_for_notification. A kind or capability bit
 * the host does not know is not a refusal (rule 7): it loads, with a warning.
 *
 * Rules that keep old plugins working on new hosts, and new plugins on old
 * hosts. Conveyor's own tests keep a frozen copy of the 1.0 header and
 * check every 1.0 offset, size, signature and constant against this file.
 *   1. Append only. New slots go at the end of conveyor_storage_plugin, after
 *      the last one; nothing is ever inserted, reordered, removed, resized or
 *      retyped. A function's signature never changes (not a parameter's
 *      type, width or constness, not the return type): a changed operation
 *      gets a new slot (e.g. enqueue_v2) and the old slot keeps its meaning.
 *   2. Each append bumps CONVEYOR_ABI_MINOR, and the new slot's comment names
 *      the minor that introduced it. Every slot added after 1.0 is optional.
 *   3. struct_size checks. A plugin sets struct_size =
 *      sizeof(conveyor_storage_plugin) as it was compiled. The host copies
 *      min(struct_size, its own sizeof) bytes of the table and zero-fills the
 *      rest, and calls a slot only when struct_size covers the whole slot
 *      (offsetof + sizeof <= struct_size) and the slot is non-NULL. So an
 *      older plugin on a newer host simply lacks the newer slots, and a
 *      plugin built for a newer minor loads on an older host with the
 *      functions that host knows (the host never reads past its own table).
 *      The entry receives the host's minor: a plugin returns the same table
 *      to every host of its major and need not look at the minor.
 *   4. Breaking changes bump CONVEYOR_ABI_MAJOR. A host refuses a plugin of
 *      another major (its entry may return NULL, or a table whose abi_major
 *      differs), with an error naming the versions both sides speak.
 *   5. Output structs the plugin fills (conveyor_job, conveyor_queue_stats,
 *      conveyor_rate_limit) begin with struct_size (sizeof as the plugin was
 *      built), grow only at their end under rules 1 and 2, and the host reads
 *      a field only when struct_size covers it.
 *   6. Structs without struct_size (conveyor_str, conveyor_option,
 *      conveyor_new_job, conveyor_lease, conveyor_error) never change: a new
 *      input comes as a new slot taking a new struct.
 *   7. Constants are never renumbered or reused: new status codes, kinds,
 *      capabilities, job states and notification kinds take new values.
 *      Reserved fields are zero in 1.0 and may gain a meaning only in a new
 *      minor, where zero keeps the 1.0 behaviour.
 *
 * ---------------------------------------------------------------------------
 * Conventions for every function
 * ---------------------------------------------------------------------------
 * Status:    every function returns a conveyor_status: CONVEYOR_OK or an
 *            error code below. On error the plugin writes a NUL-terminated
 *            message into the caller's conveyor_error (when err is non-NULL)
 *            and leaves every out-parameter unspecified.
 * Errors:    conveyor_error is owned by the caller; the plugin writes at most
 *            CONVEYOR_ERROR_MESSAGE_MAX bytes including the NUL, truncating.
 * Strings:   conveyor_str is a (pointer, length) pair, not NUL-terminated,
 *            UTF-8. Inputs are owned by the caller and valid only during the
 *            call: a plugin that keeps one copies it. Strings a plugin hands to
 *            a callback are owned by the plugin and valid only during that
 *            callback: the host copies what it keeps.
 * Memory:    whatever the plugin allocates, the plugin frees; whatever the
 *            host allocates, the host frees. No pointer changes owner.
 * Time:      int64_t microseconds since the Unix epoch (UTC). Every function
 *            that compares times takes the host's now_us and uses it instead
 *            of a clock of its own, so hosts can test with a fake clock.
 *            Two places have no now_us and use the plugin's wall clock
 *            (CLOCK_REALTIME): enqueue's created_at_us (never compared), and
 *            the due notification of CONVEYOR_CAP_NOTIFY_DUE, sent once the
 *            waiter's wall clock has reached the job's run_at_us, never
 *            before (a wake before run_at finds nothing to claim). The host
 *            sets run_at_us from its own wall clock, so hosts and storage
 *            must agree on the time.
 * Leases:    a lease is (job id, lease token). Token 0 means "no lease": a
 *            claim (claim, claim_kinds) with lease_token 0 is
 *            CONVEYOR_E_INVALID with nothing claimed, and a job reported in
 *            any state but RUNNING has lease_token 0 and lease_expires_us 0.
 *            So no lease with token 0 ever matches a job: complete, fail,
 *            extend_leases and release of one are CONVEYOR_E_LEASE_LOST.
 * Threading: after open returns, every function on one handle may be called
 *            concurrently from any number of host threads. The plugin
 *            serialises or pools internally. close is the exception: the host
 *            calls it once, after every other call on the handle returned.
 * Failure:   a plugin must never let a C++ exception, longjmp or signal escape
 *            a call; it catches everything and returns CONVEYOR_E_INTERNAL.
 *            Transient trouble (busy database, lost connection) is
 *            CONVEYOR_E_UNAVAILABLE: the host retries later with backoff.
 * NULL:      the storage handle is always one open returned (close alone
 *            accepts NULL). Any other pointer the function must read, write
 *            or call (out-parameters, callbacks, jobs, leases, results and
 *            out_ids with n > 0) may arrive NULL from a faulty caller: that is
 *            CONVEYOR_E_INVALID with nothing changed, never a crash. With
 *            n == 0 the arrays may be NULL. err may be NULL: the status is
 *            returned all the same.
 * Callbacks: the host never calls into a handle from inside a callback of
 *            that handle (on_job, on_stats, on_queue, on_limit, on_notify),
 *            neither on the callback's thread nor by waiting there for
 *            another thread that does. So a plugin may hold its own locks
 *            while it calls a callback. Other threads may call the handle
 *            meanwhile (Threading).
 * Batches:   the ABI sets no upper bound on n or max_jobs: a plugin takes any
 *            value, splitting work internally if it must (enqueue stays all
 *            or none). What this host sends: claim's max_jobs <= [engine]
 *            claim_batch_max (default 100, at most 10000); complete,
 *            extend_leases and release at most the jobs it has running (at
 *            most its workers in total); rescue_expired's max_jobs 1000;
 *            purge_finished's 10000; enqueue one API request's jobs (bounded
 *            by the request size), 5000 from the CLI, any number from a
 *            program embedding the engine.
 *            From 1.1: list_jobs' limit <= CONVEYOR_LIST_JOBS_MAX (a plugin
 *            refuses more); retry_jobs and delete_jobs at most 1000 ids per
 *            call (bulk operations go page by page through list_jobs).
 * Counts:    batch lengths are size_t; max_jobs, *out_claimed and
 *            *out_rescued are uint32_t; *out_deleted is uint64_t; ids and
 *            the counts of conveyor_queue_stats are int64_t (ids > 0, counts
 *            >= 0).
 * Order:     "name order" (queue_stats, list_queues, list_rate_limits) is
 *            bytewise: memcmp of the UTF-8 bytes, a name before every longer
 *            name it is a prefix of; never a locale's collation.
 * Sharing:   handles opened with the same options in one process reach the
 *            same storage only when the plugin advertises
 *            CONVEYOR_CAP_MULTI_PROCESS; without it each handle may hold a
 *            storage of its own. The server opens one handle; a tool that
 *            needs a second one on the same storage (conveyor-bench's
 *            separate producer) needs the capability or says so.
 * Wake-ups:  what the host does after a notification, which a plugin may
 *            count on. After CONVEYOR_NOTIFY_JOBS for a queue (or new jobs
 *            enqueued in its own process, or a worker permit freed), the
 *            host claims that queue at once; if that claim leaves the queue
 *            drained, it claims it twice more, about
 *            [engine] poll_interval_ms apart (1 s by default), before it
 *            waits for notifications again. So an entry that a claim right
 *            after the notification cannot see yet (a plugin's own claim
 *            hint, a replica or an index that catches up a moment later) is
 *            claimed by one of those two if it is visible by then. (Without
 *            CONVEYOR_CAP_NOTIFY_DUE a drained queue is claimed every poll
 *            interval anyway.) The number of these claims may grow in a
 *            later host, never shrink within this major.
 *
 * ---------------------------------------------------------------------------
 * The life of a job as the host drives it
 * ---------------------------------------------------------------------------
 *   enqueue ─> AVAILABLE (run_at in the future: reported as SCHEDULED)
 *   claim   ─> RUNNING, attempt += 1, lease (token, expiry) set,
 *              started_at = the claim's now_us (1.6)
 *   complete(lease)              ─> COMPLETED
 *   fail(lease, retry_at >= 0)   ─> AVAILABLE at retry_at (SCHEDULED until due)
 *   fail(lease, retry_at <  0)   ─> FAILED
 *   release(lease)               ─> AVAILABLE now, attempt -= 1 (not spent)
 *   rescue_expired (lease expired) ─> AVAILABLE now (attempts left)
 *                                     or FAILED (attempts exhausted)
 *   cancel                       ─> CANCELLED (any non-final state)
 *   purge_finished               ─> COMPLETED/FAILED/CANCELLED rows deleted
 *   retry_jobs (1.1)             ─> FAILED/CANCELLED become AVAILABLE now,
 *                                   attempt 0
 *   delete_jobs (1.1)            ─> COMPLETED/FAILED/CANCELLED rows deleted
 * Every mutation of a RUNNING job names its lease (job id + lease token). A
 * plugin applies it only when the job is RUNNING under that very token, so a
 * worker whose lease expired and whose job was claimed again cannot complete,
 * fail, extend or release the new claimant's lease.
 */
#ifndef CONVEYOR_STORAGE_PLUGIN_H
#define CONVEYOR_STORAGE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes. */
#define CONVEYOR_ABI_MAJOR 1
#define CONVEYOR_ABI_MINOR 6

/* The one symbol a plugin exports. */
#define CONVEYOR_PLUGIN_ENTRY_SYMBOL "conveyor_storage_plugin_entry"

#if defined(_WIN32)
#define CONVEYOR_PLUGIN_EXPORT __declspec(dllexport)
#else
#define CONVEYOR_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* ---- status codes (int32_t, never an enum: its size is not portable) ---- */
typedef int32_t conveyor_status;
#define CONVEYOR_OK 0
/* An argument is invalid (bad name, n too large, unknown option). Not retried. */
#define CONVEYOR_E_INVALID 1
/* The job, queue or override named does not exist (or is already final). */
#define CONVEYOR_E_NOT_FOUND 2
/* The job is not RUNNING under the lease given: someone else owns it now. */
#define CONVEYOR_E_LEASE_LOST 3
/* Transient: storage busy or unreachable. The host retries with backoff. */
#define CONVEYOR_E_UNAVAILABLE 4
/* A bug or an unexpected failure inside the plugin. */
#define CONVEYOR_E_INTERNAL 5
/* The operation is not supported by this plugin (an optional slot). */
#define CONVEYOR_E_UNSUPPORTED 6
/* ABI 1.1: the job exists but its state does not allow the operation (retry
 * of a job that is not FAILED or CANCELLED, delete of a job not final). Used
 * only in the per-job results of retry_jobs and delete_jobs. */
#define CONVEYOR_E_WRONG_STATE 7

/* ---- plugin kinds (what the storage looks like; the host treats both alike
 * and loads a kind it does not know, from a newer minor, with a warning) ---- */
#define CONVEYOR_KIND_CANONICAL 1     /* one mutable row per job */
#define CONVEYOR_KIND_QUEUE_STORAGE 2 /* append-only ring, TRUNCATE */

/* ---- capabilities: advertised, never guessed from names. A host ignores
 * bits it does not know (from a newer minor), with a warning. ---- */
/* Data survives close and process exit. */
#define CONVEYOR_CAP_DURABLE ((uint64_t)1 << 0)
/* Several processes, and several handles in one process, may open the same
 * storage at once, safely, and see each other's data (see Sharing above). */
#define CONVEYOR_CAP_MULTI_PROCESS ((uint64_t)1 << 1)
/* Several hosts may share the storage over a network. */
#define CONVEYOR_CAP_MULTI_HOST ((uint64_t)1 << 2)
/* wait_for_notification is implemented: new jobs and override changes made
 * by any process wake waiters without polling. */
#define CONVEYOR_CAP_NOTIFY ((uint64_t)1 << 3)
/* With CONVEYOR_CAP_NOTIFY: a job enqueued by any process with a run_at in
 * the future is reported again (CONVEYOR_NOTIFY_JOBS for its queue) to every
 * waiter once that run_at has come by the waiter's wall clock (never
 * before it: see Time), so a waiter that is
 * told nothing may take it that no enqueued job became ready. The host then
 * re-polls a drained queue only rarely (engine.notified_poll_interval_ms)
 * instead of every poll interval. Jobs that retry_jobs makes ready again are
 * new ready jobs (CONVEYOR_NOTIFY_JOBS at once, as for an enqueue). Not
 * covered, because the process that makes the change learns the time itself:
 * retries scheduled by fail, jobs given back by release, jobs rescued by
 * rescue_expired. Known to hosts since ABI 1.3; an older host ignores the bit
 * (it polls as before). */
#define CONVEYOR_CAP_NOTIFY_DUE ((uint64_t)1 << 4)

/* ---- job states as reported by get_job ---- */
#define CONVEYOR_JOB_AVAILABLE 1 /* ready now */
#define CONVEYOR_JOB_SCHEDULED 2 /* waiting for run_at (delayed or backoff) */
#define CONVEYOR_JOB_RUNNING 3
#define CONVEYOR_JOB_COMPLETED 4
#define CONVEYOR_JOB_FAILED 5
#define CONVEYOR_JOB_CANCELLED 6

/* Notification kinds passed to conveyor_notify_fn. */
#define CONVEYOR_NOTIFY_JOBS 1        /* queue has new ready jobs */
#define CONVEYOR_NOTIFY_RATE_LIMITS 2 /* overrides changed; queue may be empty */
#define CONVEYOR_NOTIFY_QUEUE_STATE 3 /* queue paused or resumed */

#define CONVEYOR_ERROR_MESSAGE_MAX 1024

/* ABI 1.1: the largest limit list_jobs accepts; a larger one is
 * CONVEYOR_E_INVALID. */
#define CONVEYOR_LIST_JOBS_MAX 1000

/* ABI 1.2: a rate limit's scope (conveyor_rate_limit.scope,
 * set_rate_limit_v2). Zero keeps the 1.1 meaning. */
#define CONVEYOR_SCOPE_PROCESS 0 /* one bucket per process (docs/design/rate-limits.md) */
#define CONVEYOR_SCOPE_FLEET 1   /* one bucket for every process on the storage */

/* ABI 1.2: the longest key swap_shared_state accepts, in bytes. */
#define CONVEYOR_SHARED_KEY_MAX 200

/* ABI 1.2: the most tokens one job may cost (conveyor_new_job_v2.cost). */
#define CONVEYOR_JOB_COST_MAX 1000000

/* ABI 1.3: the largest magnitude add_shared_state accepts for low, high,
 * high - low, credit and unit (2^62): within it, its arithmetic never
 * overflows an int64_t (see add_shared_state). */
#define CONVEYOR_SHARED_ADD_MAX ((int64_t)1 << 62)

/* ABI 1.4: the longest job key, in bytes (conveyor_new_job_v3.key). A key
 * is 0..CONVEYOR_JOB_KEY_MAX bytes of UTF-8; the empty key is "no key" and
 * is one key like any other. */
#define CONVEYOR_JOB_KEY_MAX 200

/* ABI 1.5: which fields of a conveyor_key_setting are set (a bit mask). */
#define CONVEYOR_KEY_FIELD_RATE 1u   /* rate_per_sec, burst and scope */
#define CONVEYOR_KEY_FIELD_WEIGHT 2u /* weight */
#define CONVEYOR_KEY_FIELDS_ALL 3u

/* ABI 1.5: what a conveyor_key_setting applies to (conveyor_key_setting.target). */
#define CONVEYOR_KEY_TARGET_ONE 0   /* the one key named by key (may be the empty key) */
#define CONVEYOR_KEY_TARGET_EVERY 1 /* every key of the queue (key is empty) */

/* ABI 1.5: the most adds one add_shared_states call takes. */
#define CONVEYOR_SHARED_ADDS_MAX 1000

/* ABI 1.6: the longest timeout of one attempt, in milliseconds
 * (conveyor_new_job_v4.timeout_ms): 7 days. */
#define CONVEYOR_JOB_TIMEOUT_MAX_MS ((int64_t)7 * 24 * 3600 * 1000)

/* ABI 1.5: the largest weight of a key (conveyor_key_setting.weight). */
#define CONVEYOR_KEY_WEIGHT_MAX 1000

/* Caller-owned error object. The plugin sets code and message on failure. */
typedef struct conveyor_error {
  conveyor_status code;
  char message[CONVEYOR_ERROR_MESSAGE_MAX];
} conveyor_error;

/* A borrowed UTF-8 string: data need not be NUL-terminated. data may be NULL
 * only when len is 0. */
typedef struct conveyor_str {
  const char* data;
  size_t len;
} conveyor_str;

/* One [storage.options] entry, both sides as text (TOML integers and booleans
 * are converted to their TOML spelling by the host). */
typedef struct conveyor_option {
  conveyor_str key;
  conveyor_str value;
} conveyor_option;

/* Opaque storage handle: created by open, destroyed by close. */
typedef struct conveyor_storage conveyor_storage;

/* A job to enqueue. Input only: owned by the caller. */
typedef struct conveyor_new_job {
  conveyor_str queue;   /* a valid queue name (the host validates it) */
  conveyor_str kind;    /* the handler name, non-empty */
  conveyor_str payload; /* opaque bytes (JSON by convention), may be empty */
  int32_t priority;     /* lower runs first; equal priority runs by run_at, id */
  int32_t max_attempts; /* >= 1 */
  int64_t run_at_us;    /* not claimable before this time */
} conveyor_new_job;

/* A job as the plugin reports it. Owned by the plugin, valid only during the
 * callback that receives it. */
typedef struct conveyor_job {
  uint32_t struct_size; /* sizeof(conveyor_job) as the plugin was built */
  int32_t state;        /* CONVEYOR_JOB_* */
  int64_t id;           /* unique within the storage, > 0 */
  conveyor_str queue;
  conveyor_str kind;
  conveyor_str payload;
  int32_t priority;
  int32_t attempt; /* attempts started so far (1 during the first run) */
  int32_t max_attempts;
  int32_t reserved0; /* zero */
  int64_t run_at_us;
  int64_t created_at_us;
  int64_t finalized_at_us;  /* 0 unless COMPLETED, FAILED or CANCELLED */
  int64_t lease_token;      /* 0 unless RUNNING */
  int64_t lease_expires_us; /* 0 unless RUNNING */
  conveyor_str last_error;  /* the latest failure's text, may be empty */
  /* ABI 1.2 (read only when struct_size covers it): the tokens the job
   * takes from its queue's rate limit when it starts, as enqueued with
   * enqueue_v3 (>= 1); 1 for a job enqueued without a cost. */
  int32_t cost;
  int32_t reserved1; /* zero */
  /* ABI 1.4 (read only when struct_size covers it): the job's key, as
   * enqueued with enqueue_v4; empty for a job enqueued without one. */
  conveyor_str key;
  /* ABI 1.6 (read only when struct_size covers both): when the job's latest
   * attempt started, the now_us of the claim that moved it to RUNNING (claim,
   * claim_kinds, claim_keys); 0 before its first claim. Kept as it is
   * by every other call (complete, fail, release, rescue_expired, cancel,
   * retry_jobs), so a finished job shows when its last attempt started;
   * only the next claim changes it. */
  int64_t started_at_us;
  /* ABI 1.6: how long one attempt may run, in milliseconds, as enqueued with
   * enqueue_v5; 0 (the queue's default) for a job enqueued without one. The
   * host enforces it; the plugin only stores it. */
  int64_t timeout_ms;
} conveyor_job;

/* Names a lease: the host passes these to mutate RUNNING jobs. */
typedef struct conveyor_lease {
  int64_t job_id;
  int64_t lease_token;
} conveyor_lease;

/* Per-queue counts. Owned by the plugin, valid only during the callback. */
typedef struct conveyor_queue_stats {
  uint32_t struct_size; /* sizeof(conveyor_queue_stats) as built */
  int32_t paused;       /* 1 paused, 0 not */
  conveyor_str queue;
  int64_t pending;   /* AVAILABLE and run_at <= now */
  int64_t scheduled; /* AVAILABLE and run_at > now */
  int64_t running;
  int64_t completed; /* retained, not yet purged */
  int64_t failed;    /* retained, not yet purged */
  int64_t cancelled; /* retained, not yet purged */
  /* ABI 1.1 (read only when struct_size covers it): the smallest run_at_us
   * among the queue's pending jobs (AVAILABLE, run_at <= now), i.e. when the
   * longest-waiting ready job became ready; 0 when nothing is pending.
   * Filled by queue_stats and job_counts alike; reading it may cost the
   * queue's ready backlog, never retained jobs. */
  int64_t oldest_pending_run_at_us;
} conveyor_queue_stats;

/* A durable per-queue rate-limit override. Owned by the plugin. */
typedef struct conveyor_rate_limit {
  uint32_t struct_size; /* sizeof(conveyor_rate_limit) as built */
  uint32_t burst;       /* >= 1 */
  conveyor_str queue;
  double rate_per_sec; /* > 0 and finite */
  int64_t updated_at_us;
  /* ABI 1.2 (read only when struct_size covers it): CONVEYOR_SCOPE_*, as
   * stored by set_rate_limit_v2; CONVEYOR_SCOPE_PROCESS when set by
   * set_rate_limit. */
  int32_t scope;
  int32_t reserved0; /* zero */
} conveyor_rate_limit;

/* ABI 1.2: a job to enqueue with a cost (enqueue_v3). Input only: owned by
 * the caller. */
typedef struct conveyor_new_job_v2 {
  conveyor_new_job job; /* as for enqueue */
  int32_t cost;         /* 1..CONVEYOR_JOB_COST_MAX: tokens it takes when it starts */
  int32_t reserved0;    /* zero */
} conveyor_new_job_v2;

/* ABI 1.4: a job to enqueue with a key (enqueue_v4). Input only: owned by
 * the caller. */
typedef struct conveyor_new_job_v3 {
  conveyor_new_job_v2 job; /* as for enqueue_v3 */
  conveyor_str key;        /* 0..CONVEYOR_JOB_KEY_MAX bytes; empty: the empty key */
} conveyor_new_job_v3;

/* ABI 1.6: a job to enqueue with its own timeout (enqueue_v5). Input only:
 * owned by the caller. */
typedef struct conveyor_new_job_v4 {
  conveyor_new_job_v3 job; /* as for enqueue_v4 */
  int64_t timeout_ms;      /* 0 (the queue's) or 1..CONVEYOR_JOB_TIMEOUT_MAX_MS */
} conveyor_new_job_v4;

/* ABI 1.4: one key's share of a claim_keys call. Input only: owned by the
 * caller. */
typedef struct conveyor_key_claim {
  conveyor_str key;   /* the key (may be empty: the empty key) */
  uint32_t max_jobs;  /* the most jobs of this key to claim (0: none) */
  uint32_t reserved0; /* zero */
} conveyor_key_claim;

/* ABI 1.4: a key of a queue that has ready jobs (list_ready_keys). Owned by
 * the plugin, valid only during the callback. */
typedef struct conveyor_ready_key {
  uint32_t struct_size; /* sizeof(conveyor_ready_key) as built */
  uint32_t reserved0;   /* zero */
  conveyor_str key;
  /* The key's ready jobs (AVAILABLE, run_at <= now_us), counted up to the
   * call's count_limit: min(ready jobs, count_limit), >= 1. */
  int64_t ready;
} conveyor_ready_key;

/* ABI 1.5: a durable setting of a queue's keys, made at run time (conveyor
 * ratelimit set Q --key K / --per-key, conveyor keys weight Q K W) and shared
 * by every process on the storage. In set_key_setting: input, owned by the
 * caller. In list_key_settings: owned by the plugin, valid only during the
 * callback. */
typedef struct conveyor_key_setting {
  uint32_t struct_size;  /* sizeof(conveyor_key_setting) as built */
  uint32_t fields;       /* CONVEYOR_KEY_FIELD_* that are set (listed: those stored) */
  conveyor_str queue;    /* a valid queue name (the host validates it) */
  conveyor_str key;      /* TARGET_ONE: the key, 0..CONVEYOR_JOB_KEY_MAX bytes; EVERY: empty */
  int32_t target;        /* CONVEYOR_KEY_TARGET_* */
  int32_t scope;         /* with FIELD_RATE: CONVEYOR_SCOPE_*; else 0 */
  double rate_per_sec;   /* with FIELD_RATE: > 0 and finite; else 0 */
  uint32_t burst;        /* with FIELD_RATE: >= 1; else 0 */
  uint32_t weight;       /* with FIELD_WEIGHT: 1..CONVEYOR_KEY_WEIGHT_MAX; else 0 */
  int64_t updated_at_us; /* listed: now_us of the last set_key_setting; input: ignored */
} conveyor_key_setting;

/* ABI 1.5: one add of add_shared_states: add_shared_state's arguments.
 * Input only: owned by the caller. */
typedef struct conveyor_shared_add {
  conveyor_str key;
  int64_t credit;
  int64_t low;
  int64_t high;
  int64_t unit;
  uint32_t min_count;
  uint32_t max_count;
} conveyor_shared_add;

/* ABI 1.5: what one add of add_shared_states did: add_shared_state's
 * out-parameters. Output only: owned by the caller, written by the plugin. */
typedef struct conveyor_shared_added {
  int64_t version;
  int64_t value;
  uint32_t count;
  uint32_t reserved0; /* zero */
} conveyor_shared_added;

/* Callbacks. ctx is the host's, passed back untouched. A callback never
 * fails and never calls back into the same handle (see Callbacks above). */
typedef void (*conveyor_job_fn)(void* ctx, const conveyor_job* job);
typedef void (*conveyor_queue_stats_fn)(void* ctx, const conveyor_queue_stats* stats);
typedef void (*conveyor_rate_limit_fn)(void* ctx, const conveyor_rate_limit* limit);
typedef void (*conveyor_notify_fn)(void* ctx, int32_t kind, conveyor_str queue);
typedef void (*conveyor_queue_fn)(void* ctx, conveyor_str queue, int32_t paused);
typedef void (*conveyor_ready_key_fn)(void* ctx, const conveyor_ready_key* key);
typedef void (*conveyor_key_setting_fn)(void* ctx, const conveyor_key_setting* setting);

/* The function table. Members up to and including wait_for_notification form
 * version 1.0; every slot of 1.0 is required except wait_for_notification.
 * The slots after it form 1.1 to 1.6 (all optional); each minor's
 * slots are marked below. */
typedef struct conveyor_storage_plugin {
  uint32_t struct_size;  /* sizeof(conveyor_storage_plugin) as built */
  uint32_t abi_major;    /* CONVEYOR_ABI_MAJOR as built */
  uint32_t abi_minor;    /* CONVEYOR_ABI_MINOR as built */
  uint32_t reserved0;    /* zero */
  const char* name;      /* e.g. "sqlite"; static, plugin-owned */
  const char* version;   /* the plugin's own version, e.g. "0.1.0"; static */
  uint32_t kind;         /* CONVEYOR_KIND_* */
  uint32_t reserved1;    /* zero */
  uint64_t capabilities; /* CONVEYOR_CAP_* */

  /* Opens storage with the [storage.options] key/values (options[0..n)).
   * Unknown keys are CONVEYOR_E_INVALID naming the key. Does not create or
   * change the schema: the host calls migrate next.
   * Success: *out is a new handle owned by the host until close.
   * Failure: *out untouched; unreachable storage is CONVEYOR_E_UNAVAILABLE. */
  conveyor_status (*open)(const conveyor_option* options, size_t n_options, conveyor_storage** out,
                          conveyor_error* err);

  /* Releases the handle and everything it owns. Never fails. Called once,
   * after every other call on the handle has returned. NULL is a no-op. */
  void (*close)(conveyor_storage* storage);

  /* Creates or upgrades the schema to the version this plugin needs.
   * Idempotent, and safe when several processes call it at once (exactly one
   * applies each step). A schema newer than the plugin knows is
   * CONVEYOR_E_INVALID with both versions in the message. */
  conveyor_status (*migrate)(conveyor_storage* storage, conveyor_error* err);

  /* Enqueues jobs[0..n) atomically: all or none. out_ids (caller-owned,
   * n elements) receives the new ids in order. n == 0 is a no-op. */
  conveyor_status (*enqueue)(conveyor_storage* storage, const conveyor_new_job* jobs, size_t n,
                             int64_t* out_ids, conveyor_error* err);

  /* Claims up to max_jobs ready jobs of one queue: AVAILABLE, run_at <= now_us,
   * queue not paused, in order of priority, run_at, id. Each becomes RUNNING
   * with attempt + 1 and the lease (lease_token, lease_expires_us); the host
   * picks a fresh non-zero lease_token per call (0 is CONVEYOR_E_INVALID,
   * nothing claimed: see Leases). Two concurrent claims (any
   * thread, any process) never return the same job. on_job is called once per
   * claimed job, after the claim is durable. *out_claimed = number claimed
   * (0 is success: nothing ready). */
  conveyor_status (*claim)(conveyor_storage* storage, conveyor_str queue, uint32_t max_jobs,
                           int64_t lease_token, int64_t now_us, int64_t lease_expires_us,
                           conveyor_job_fn on_job, void* ctx, uint32_t* out_claimed,
                           conveyor_error* err);

  /* Completes leases[0..n) in one go. results (caller-owned, n elements)
   * receives per lease CONVEYOR_OK or CONVEYOR_E_LEASE_LOST (the job is not
   * RUNNING under that token; nothing changed for it). The function's own
   * status is an error only when the batch as a whole failed: then results
   * mean nothing (the host does not read them). After CONVEYOR_E_UNAVAILABLE
   * the host sends the same leases again; after another error the jobs run
   * again once their leases expire. So apply all or none; a lease applied
   * before a lost reply comes back CONVEYOR_E_LEASE_LOST on the retry, which
   * the host accepts. */
  conveyor_status (*complete)(conveyor_storage* storage, const conveyor_lease* leases, size_t n,
                              int64_t now_us, conveyor_status* results, conveyor_error* err);

  /* Records a failed attempt of a RUNNING job. retry_at_us >= 0: the job
   * becomes AVAILABLE at retry_at_us. retry_at_us < 0: the job becomes FAILED.
   * error_text is stored as last_error. CONVEYOR_E_LEASE_LOST when the lease
   * is not current (nothing changed). */
  conveyor_status (*fail)(conveyor_storage* storage, conveyor_lease lease, conveyor_str error_text,
                          int64_t retry_at_us, int64_t now_us, conveyor_error* err);

  /* Heartbeat: sets lease_expires_us on each current lease. results, and
   * their meaning when the call fails, as for complete. */
  conveyor_status (*extend_leases)(conveyor_storage* storage, const conveyor_lease* leases,
                                   size_t n, int64_t lease_expires_us, conveyor_status* results,
                                   conveyor_error* err);

  /* Gives leases back unrun (shutdown): each current lease's job becomes
   * AVAILABLE at now_us with attempt - 1, so the attempt is not spent.
   * results, and their meaning when the call fails, as for complete. */
  conveyor_status (*release)(conveyor_storage* storage, const conveyor_lease* leases, size_t n,
                             int64_t now_us, conveyor_status* results, conveyor_error* err);

  /* Rescues up to max_jobs RUNNING jobs whose lease_expires_us < now_us (their
   * worker is presumed dead): with attempts left (attempt < max_attempts)
   * they become AVAILABLE at once, otherwise FAILED; last_error says the
   * lease expired. A rescued job should keep its run_at (its place in the
   * queue; the shipped plugins do); setting run_at to now_us is allowed. *out_rescued = number
   * changed. */
  conveyor_status (*rescue_expired)(conveyor_storage* storage, int64_t now_us, uint32_t max_jobs,
                                    uint32_t* out_rescued, conveyor_error* err);

  /* Cancels a job that is not final (a RUNNING job's lease is voided, so its
   * worker's completion returns LEASE_LOST). CONVEYOR_E_NOT_FOUND when no such
   * job exists or it is already COMPLETED, FAILED or CANCELLED. */
  conveyor_status (*cancel)(conveyor_storage* storage, int64_t job_id, int64_t now_us,
                            conveyor_error* err);

  /* Pauses (paused = 1) or resumes (0) a queue durably: a paused queue's
   * claims return nothing. Pausing a queue with no jobs is allowed. */
  conveyor_status (*set_queue_paused)(conveyor_storage* storage, conveyor_str queue, int32_t paused,
                                      int64_t now_us, conveyor_error* err);

  /* Reports every queue that has retained jobs or is paused: one on_stats
   * call per queue, in name order, counts as of now_us. */
  conveyor_status (*queue_stats)(conveyor_storage* storage, int64_t now_us,
                                 conveyor_queue_stats_fn on_stats, void* ctx, conveyor_error* err);

  /* Reports every queue the storage knows (enqueued into at least once, or
   * paused), with its paused flag, in name order. Must be cheap (the host
   * calls it about once a second to discover new queues): no scan of jobs. A
   * queue with no jobs left may still be listed. */
  conveyor_status (*list_queues)(conveyor_storage* storage, conveyor_queue_fn on_queue, void* ctx,
                                 conveyor_error* err);

  /* Reports one job through on_job. CONVEYOR_E_NOT_FOUND if it does not
   * exist (or was purged). */
  conveyor_status (*get_job)(conveyor_storage* storage, int64_t job_id, int64_t now_us,
                             conveyor_job_fn on_job, void* ctx, conveyor_error* err);

  /* Deletes up to max_jobs COMPLETED, FAILED or CANCELLED jobs finalized
   * before finalized_before_us. *out_deleted = number deleted. */
  conveyor_status (*purge_finished)(conveyor_storage* storage, int64_t finalized_before_us,
                                    uint32_t max_jobs, uint64_t* out_deleted, conveyor_error* err);

  /* Sets (creates or replaces) a queue's durable rate-limit override and
   * advances the change marker. rate_per_sec > 0 and finite, burst >= 1,
   * else CONVEYOR_E_INVALID. */
  conveyor_status (*set_rate_limit)(conveyor_storage* storage, conveyor_str queue,
                                    double rate_per_sec, uint32_t burst, int64_t now_us,
                                    conveyor_error* err);

  /* Deletes a queue's override and advances the change marker.
   * CONVEYOR_E_NOT_FOUND when the queue has none. */
  conveyor_status (*delete_rate_limit)(conveyor_storage* storage, conveyor_str queue,
                                       conveyor_error* err);

  /* Reports every override through on_limit, in queue-name order. */
  conveyor_status (*list_rate_limits)(conveyor_storage* storage, conveyor_rate_limit_fn on_limit,
                                      void* ctx, conveyor_error* err);

  /* The change marker: a number that changes (it need not increase by one)
   * whenever any process sets or deletes an override or pauses or resumes a
   * queue. Cheap enough to call several times a second. */
  conveyor_status (*change_marker)(conveyor_storage* storage, int64_t* out_marker,
                                   conveyor_error* err);

  /* Optional (may be NULL; required with CONVEYOR_CAP_NOTIFY). Blocks until
   * at least one notification arrives or timeout_us passes, calling on_notify
   * for each on the calling thread. Returns CONVEYOR_OK on timeout too. The
   * host calls it from one dedicated thread, with timeouts short enough to
   * shut down promptly. */
  conveyor_status (*wait_for_notification)(conveyor_storage* storage, int64_t timeout_us,
                                           conveyor_notify_fn on_notify, void* ctx,
                                           conveyor_error* err);
  /* ---- end of version 1.0. Append new slots below this line only. ---- */

  /* ---- version 1.1 (job operations). Every slot is optional: a host calls
   * one only when struct_size covers it and it is non-NULL, and tells the
   * user which plugin lacks it otherwise. Threading, ownership and callbacks
   * as every 1.0 function ("Conventions"). ---- */

  /* ABI 1.1. enqueue with the host's clock: as enqueue in every respect
   * (atomic, ids in order, n == 0 a no-op, same refusals), and each job's
   * created_at_us is now_us instead of a clock of the plugin's (Time).
   * Cost: as enqueue. */
  conveyor_status (*enqueue_v2)(conveyor_storage* storage, const conveyor_new_job* jobs, size_t n,
                                int64_t now_us, int64_t* out_ids, conveyor_error* err);

  /* ABI 1.1. claim, restricted to jobs whose kind is one of kinds[0..n_kinds)
   * (exact bytewise match): a consumer takes only what it can run. Jobs of
   * other kinds are left AVAILABLE, untouched, and do not block the queue:
   * the claim returns the first matching jobs in claim order (priority,
   * run_at, id). n_kinds == 0 means no filter: exactly claim. kinds == NULL
   * with n_kinds > 0, or an empty kind, is CONVEYOR_E_INVALID. Everything
   * else (leases, pause, out_claimed, on_job) as claim.
   * Cost: never reads retained (final) jobs; at most n_kinds * max_jobs
   * matching rows, plus, where the plugin has no (queue, kind) index, the
   * ready jobs of other kinds ahead of them in claim order (bounded by the
   * queue's ready backlog); without a filter no slower than claim. */
  conveyor_status (*claim_kinds)(conveyor_storage* storage, conveyor_str queue,
                                 const conveyor_str* kinds, size_t n_kinds, uint32_t max_jobs,
                                 int64_t lease_token, int64_t now_us, int64_t lease_expires_us,
                                 conveyor_job_fn on_job, void* ctx, uint32_t* out_claimed,
                                 conveyor_error* err);

  /* ABI 1.1. Lists the jobs of one queue with id > after_id, in increasing
   * id order, at most limit of them: one on_job call per job, each reported
   * as get_job reports it at now_us (SCHEDULED for AVAILABLE jobs whose
   * run_at > now_us). Filters: states[0..n_states) (CONVEYOR_JOB_* values;
   * n_states == 0: every state) and kind (len 0: every kind). Keyset
   * pagination: the next page starts after the last id reported; fewer than
   * limit jobs means there are no more. *out_listed = number reported.
   * Failure (CONVEYOR_E_INVALID, nothing reported): empty queue name,
   * after_id < 0, limit 0 or above CONVEYOR_LIST_JOBS_MAX, an unknown state,
   * states NULL with n_states > 0. An unknown queue lists nothing (OK).
   * Cost: never a scan of the queue's history: retained (final) jobs are
   * read as index ranges of at most limit rows per requested state (and per
   * kind); live jobs may cost up to the queue's ready backlog and the running
   * jobs (bounded by the work outstanding, not by retention). */
  conveyor_status (*list_jobs)(conveyor_storage* storage, conveyor_str queue, const int32_t* states,
                               size_t n_states, conveyor_str kind, int64_t after_id, uint32_t limit,
                               int64_t now_us, conveyor_job_fn on_job, void* ctx,
                               uint32_t* out_listed, conveyor_error* err);

  /* ABI 1.1. Retries job_ids[0..n): each FAILED or CANCELLED job becomes
   * AVAILABLE with run_at = now_us, attempt = 0 (a full max_attempts again)
   * and finalized_at_us 0. Kept: id, queue, kind, payload, priority,
   * max_attempts, created_at_us and last_error (the failure that ended it,
   * until a new attempt fails); no history of attempts is stored. results
   * (caller-owned, n elements) receives per id CONVEYOR_OK, or
   * CONVEYOR_E_NOT_FOUND (no such job, or purged) or CONVEYOR_E_WRONG_STATE
   * (any other state), and then nothing changed for that id. A repeated id:
   * its first occurrence is applied, the later ones see the new state
   * (WRONG_STATE). The call's own status and the meaning of results on
   * failure as for complete (all or none). n == 0 is a no-op.
   * Cost: one primary-key lookup per id. */
  conveyor_status (*retry_jobs)(conveyor_storage* storage, const int64_t* job_ids, size_t n,
                                int64_t now_us, conveyor_status* results, conveyor_error* err);

  /* ABI 1.1. Deletes job_ids[0..n) that are final (COMPLETED, FAILED,
   * CANCELLED), as purge_finished would. Per id in results: CONVEYOR_OK,
   * CONVEYOR_E_NOT_FOUND (no such job) or CONVEYOR_E_WRONG_STATE (not final:
   * kept). Ids are never reused. Status and results as retry_jobs; a
   * repeated id's later occurrences are CONVEYOR_E_NOT_FOUND (it is gone).
   * Cost: one primary-key lookup per id. */
  conveyor_status (*delete_jobs)(conveyor_storage* storage, const int64_t* job_ids, size_t n,
                                 conveyor_status* results, conveyor_error* err);

  /* ABI 1.1. The same report as queue_stats (every queue with retained jobs
   * or paused, one on_stats per queue, name order, the same counts at
   * now_us) without scanning retained jobs: final-state counts are
   * maintained (or derived from an index of counts), never counted row by
   * row. Only splitting AVAILABLE into pending and scheduled may read the
   * queue's AVAILABLE jobs. A queue whose counts all reached zero and that is
   * not paused may be reported with zeros or left out.
   * Cost: independent of the number of retained (final) jobs. */
  conveyor_status (*job_counts)(conveyor_storage* storage, int64_t now_us,
                                conveyor_queue_stats_fn on_stats, void* ctx, conveyor_error* err);

  /* ABI 1.1. rescue_expired that also reports what it rescued: the same
   * change in every respect (which jobs, their new state, last_error,
   * max_jobs, *out_rescued), plus one on_job call per rescued job, after the
   * change (state AVAILABLE or FAILED; lease_token 0), so the host can count
   * rescues per queue and log them. on_job may be called before the change
   * commits; when the call fails, the jobs reported are not rescued.
   * Cost: as rescue_expired. */
  conveyor_status (*rescue_expired_v2)(conveyor_storage* storage, int64_t now_us, uint32_t max_jobs,
                                       conveyor_job_fn on_job, void* ctx, uint32_t* out_rescued,
                                       conveyor_error* err);

  /* ---- version 1.2 (fleet-wide rate limits, job cost). Every slot is
   * optional, as in 1.1. A host refuses scope = "fleet" on a plugin without
   * swap_shared_state, and a cost other than 1 on one without enqueue_v3,
   * naming the plugin and its ABI. ---- */

  /* ABI 1.2. Compare-and-set on a small record every process sharing the
   * storage sees: key -> (version, value). A key never written reads as
   * version 0, value 0.
   *   expected_version >= 0: when the record's version is expected_version,
   *     it becomes (expected_version + 1, new_value) and *out_applied = 1;
   *     otherwise nothing changes and *out_applied = 0.
   *   expected_version < 0: a read; nothing changes, *out_applied = 0.
   * Either way *out_version and *out_value receive the record as it is after
   * the call, so a caller whose swap lost has the winner's record without
   * another call. Linearizable against every concurrent caller, in any
   * thread, process or host sharing the storage: of several swaps from one
   * version, exactly one applies. An applied swap is durable when the call
   * returns. Failure (CONVEYOR_E_INVALID, nothing changed): key empty or
   * longer than CONVEYOR_SHARED_KEY_MAX bytes; a NULL out-parameter.
   * Keys the host uses: "ratelimit.bucket:" + queue (the queue's fleet
   * bucket) and "ratelimit.enabled" (the live kill switch).
   * Why this and no more: the rate-limit arithmetic stays in the host, in
   * one place for every backend; a token bucket's whole state is one number
   * (when the bucket is full again), so a plugin needs only an atomic swap
   * of one integer. The host caches the record: uncontended, a take is one
   * call; a lost race returns the current record, and the retry is the
   * second and usually last.
   * Cost: one round trip touching one small row; the host calls it at most
   * once or twice per claimed batch of a fleet-limited queue (never per
   * job; on a plugin with add_shared_state, only for a backpressure hold)
   * and about four times a second for the kill switch. */
  conveyor_status (*swap_shared_state)(conveyor_storage* storage, conveyor_str key,
                                       int64_t expected_version, int64_t new_value,
                                       int64_t* out_version, int64_t* out_value,
                                       int32_t* out_applied, conveyor_error* err);

  /* ABI 1.2. set_rate_limit with a scope (CONVEYOR_SCOPE_*), reported back
   * by list_rate_limits in conveyor_rate_limit.scope. An unknown scope is
   * CONVEYOR_E_INVALID; everything else as set_rate_limit. */
  conveyor_status (*set_rate_limit_v2)(conveyor_storage* storage, conveyor_str queue,
                                       double rate_per_sec, uint32_t burst, int32_t scope,
                                       int64_t now_us, conveyor_error* err);

  /* ABI 1.2. enqueue_v2 with a cost per job (conveyor_new_job_v2.cost),
   * stored with the job and reported in conveyor_job.cost by every call
   * that reports jobs. A cost outside 1..CONVEYOR_JOB_COST_MAX is
   * CONVEYOR_E_INVALID (nothing enqueued). Everything else as enqueue_v2. */
  conveyor_status (*enqueue_v3)(conveyor_storage* storage, const conveyor_new_job_v2* jobs,
                                size_t n, int64_t now_us, int64_t* out_ids, conveyor_error* err);

  /* ---- version 1.3 (a fleet take that cannot lose a race). Optional: a
   * host uses swap_shared_state where it is missing. ---- */

  /* ABI 1.3. A bounded add on swap_shared_state's records, in one atomic
   * step. With (version, v) the key's record ((0, 0) if never written):
   *   base  = max(v - credit, low)
   *   count = the largest k <= max_count with base + unit * k <= high
   *           (0 when base > high)
   *   count >= min_count: the record becomes (version + 1, base + unit * count)
   *   otherwise:          nothing changes and count is 0.
   * *out_count receives count; *out_version and *out_value the record as it
   * is after the call. Linearizable against every concurrent add and swap
   * on the key, in any thread, process or host sharing the storage (an add
   * moves the version, so a swap from the version before it loses). An
   * applied add is durable when the call returns.
   * Failure (CONVEYOR_E_INVALID, nothing changed): key as swap_shared_state;
   * a NULL out-parameter; credit < 0; unit < 1; min_count < 1; max_count <
   * min_count; low > high; low, high, high - low, credit or
   * unit larger in magnitude than CONVEYOR_SHARED_ADD_MAX. Within those,
   * computed in this order nothing overflows: base = low when v <= low,
   * else max(v - credit, low); then k = (high - base) / unit.
   * Why: a token-bucket take is exactly this, with v the time the bucket is
   * full again (credit: unused tokens given back, low: now, high: now
   * plus the burst's credit, unit: one token's credit, count: the tokens
   * taken). swap_shared_state makes the host read, compute and swap, and
   * under contention a swap loses and is retried; this call cannot lose, so
   * a take is always one round trip. The arithmetic stays the host's: the
   * plugin applies a clamp and a division it is given, and knows nothing of
   * rates.
   * Cost: one round trip touching one small record, as swap_shared_state. */
  conveyor_status (*add_shared_state)(conveyor_storage* storage, conveyor_str key, int64_t credit,
                                      int64_t low, int64_t high, int64_t unit, uint32_t min_count,
                                      uint32_t max_count, int64_t* out_version, int64_t* out_value,
                                      uint32_t* out_count, conveyor_error* err);

  /* ---- version 1.4 (job keys: limits per key, fair turns between keys).
   * Every slot is optional. A host refuses a job with a non-empty key, and a
   * queue configured with per-key settings, on a plugin without all three,
   * naming the plugin and its ABI. On such a plugin every job has the empty
   * key, so the host's fair turns between keys are plain claim order.
   * Why these three: the fair scheduler, the per-key buckets and the per-key
   * concurrency stay in the host, the same for every backend, as the queue's
   * bucket does. What the host needs from storage is (a) which keys have
   * ready work, without reading keys that have none, and (b) to claim a
   * chosen number of jobs from each of many keys in one round trip. A key
   * has no row of its own anywhere: it exists while it has jobs, so storage
   * for keys stays proportional to jobs, never to keys ever seen. ---- */

  /* ABI 1.4. enqueue_v3 with a key per job (conveyor_new_job_v3.key), stored
   * with the job and reported in conveyor_job.key by every call that reports
   * jobs (get_job, claim, claim_kinds, claim_keys, list_jobs,
   * rescue_expired_v2). A key longer than CONVEYOR_JOB_KEY_MAX bytes is
   * CONVEYOR_E_INVALID (nothing enqueued). Everything else as enqueue_v3.
   * Jobs enqueued by any other enqueue slot have the empty key. */
  conveyor_status (*enqueue_v4)(conveyor_storage* storage, const conveyor_new_job_v3* jobs,
                                size_t n, int64_t now_us, int64_t* out_ids, conveyor_error* err);

  /* ABI 1.4. Claims, from one queue, up to keys[i].max_jobs ready jobs of
   * each key keys[i].key, in one atomic step for the whole call: per key the
   * first ready jobs in claim order (priority, run_at, id) among that key's
   * jobs, restricted to kinds[0..n_kinds) as claim_kinds (n_kinds == 0: no
   * filter). A key with fewer ready jobs gives what it has; jobs of keys not
   * listed are left untouched and never block the listed ones. Leases,
   * pause, on_job (once per claimed job, any order across keys) and
   * *out_claimed (the total) as claim. n_keys == 0 claims nothing (OK).
   * Failure (CONVEYOR_E_INVALID, nothing claimed): as claim_kinds; keys NULL
   * with n_keys > 0; a key longer than CONVEYOR_JOB_KEY_MAX; the same key
   * twice in keys.
   * Cost: one round trip; per listed key, at most its max_jobs matching rows
   * plus (with a kind filter and no (queue, key, kind) index) the ready jobs
   * of other kinds ahead of them. Never reads keys that are not listed. */
  conveyor_status (*claim_keys)(conveyor_storage* storage, conveyor_str queue,
                                const conveyor_str* kinds, size_t n_kinds,
                                const conveyor_key_claim* keys, size_t n_keys, int64_t lease_token,
                                int64_t now_us, int64_t lease_expires_us, conveyor_job_fn on_job,
                                void* ctx, uint32_t* out_claimed, conveyor_error* err);

  /* ABI 1.4. Lists the keys of one queue that have at least one ready job
   * (AVAILABLE, run_at <= now_us; a paused queue's keys are listed too), in
   * key order (bytewise, as "name order"; the empty key first), those after
   * *after_key only (after_key NULL: from the first key), at most limit of
   * them: one on_key call per key, with the key's ready jobs counted up to
   * count_limit (conveyor_ready_key.ready). Keyset pagination: the next
   * page starts after the last key reported; fewer than limit keys means
   * there are no more. *out_listed = number reported.
   * Failure (CONVEYOR_E_INVALID, nothing reported): empty queue name, limit
   * 0 or above CONVEYOR_LIST_JOBS_MAX, count_limit 0, *after_key longer than
   * CONVEYOR_JOB_KEY_MAX. An unknown queue lists nothing (OK).
   * Cost: per key reported, at most count_limit index entries; keys with no
   * AVAILABLE job are never read (a key whose AVAILABLE jobs are all
   * scheduled for later may cost its scheduled jobs, the backlog of work
   * outstanding); never reads retained (final) jobs. */
  conveyor_status (*list_ready_keys)(conveyor_storage* storage, conveyor_str queue,
                                     const conveyor_str* after_key, uint32_t limit,
                                     uint32_t count_limit, int64_t now_us,
                                     conveyor_ready_key_fn on_key, void* ctx, uint32_t* out_listed,
                                     conveyor_error* err);
  /* ---- version 1.5 (settings of keys made at run time, forgetting idle
   * shared records, and many adds in one call). Every slot is optional. A host refuses a per-key
   * override or a weight on a plugin without the first three, and does not
   * forget idle fleet buckets of keys on one without delete_shared_states,
   * naming the plugin and its ABI.
   * Why: a queue's override is a row of its own (set_rate_limit); a key's
   * override or weight is the same kind of thing, one level down, and must
   * be durable and shared as it is. The host keeps the meaning (which
   * setting wins, how a weight shares turns); the plugin stores rows. A
   * key's fleet bucket is a shared record (swap_shared_state), one per key
   * that was limited: delete_shared_states lets the host drop those that
   * are full again, so shared storage for keys stays proportional to keys
   * with work, not keys ever seen. ---- */

  /* ABI 1.5. Stores the fields of setting->fields for the setting's (queue,
   * target, key), creating the row if needed; fields not named keep what is
   * stored. Advances the change marker and, with CONVEYOR_CAP_NOTIFY, sends
   * CONVEYOR_NOTIFY_RATE_LIMITS for the queue, as set_rate_limit. Durable
   * when the call returns.
   * Failure (CONVEYOR_E_INVALID, nothing stored): setting NULL, struct_size
   * smaller than this 1.5 struct, fields 0 or with unknown bits, an empty
   * queue name, an unknown target, TARGET_EVERY with a non-empty key, a key
   * longer than CONVEYOR_JOB_KEY_MAX, with FIELD_RATE a rate not > 0 and
   * finite, burst 0 or an unknown scope, with FIELD_WEIGHT a weight outside
   * 1..CONVEYOR_KEY_WEIGHT_MAX.
   * Cost: one round trip writing one small row. */
  conveyor_status (*set_key_setting)(conveyor_storage* storage, const conveyor_key_setting* setting,
                                     int64_t now_us, conveyor_error* err);

  /* ABI 1.5. Clears the fields of fields (CONVEYOR_KEY_FIELD_*) of (queue,
   * target, key); a row with no field left is removed. *out_cleared = 1
   * when any of those fields was set (then the change marker advances and
   * the notification goes out, as set_key_setting), else 0 and nothing
   * changes (not an error: removing what is not there is idempotent).
   * Failure (CONVEYOR_E_INVALID): as set_key_setting for queue, target, key
   * and fields; out_cleared NULL. */
  conveyor_status (*delete_key_setting)(conveyor_storage* storage, conveyor_str queue,
                                        int32_t target, conveyor_str key, uint32_t fields,
                                        int32_t* out_cleared, conveyor_error* err);

  /* ABI 1.5. Reports every stored key setting through on_setting, in order
   * of queue (name order), target (ONE before EVERY), key (bytewise). Each
   * reports the fields stored (fields) and zero for the others.
   * Cost: reads the settings only (they are few: set by hand). */
  conveyor_status (*list_key_settings)(conveyor_storage* storage,
                                       conveyor_key_setting_fn on_setting, void* ctx,
                                       conveyor_error* err);

  /* ABI 1.5. Deletes up to limit shared records (swap_shared_state) whose
   * key starts with prefix and whose value is below value_below; a deleted
   * record reads as never written again ((0, 0)). *out_deleted = the number
   * deleted; fewer than limit means no more such records. Each deletion is
   * atomic against concurrent swaps and adds on the same key: a record a
   * concurrent call moved to a value >= value_below is not deleted.
   * Failure (CONVEYOR_E_INVALID, nothing deleted): prefix empty or longer
   * than CONVEYOR_SHARED_KEY_MAX; limit 0; out_deleted NULL.
   * Why value_below: the host's records for key buckets hold the time the
   * bucket is full again, so "full since long enough" is "value below a
   * time", and such a record means the same as no record.
   * Cost: one round trip; reads the records with the prefix (an index
   * range), deletes at most limit. */
  conveyor_status (*delete_shared_states)(conveyor_storage* storage, conveyor_str prefix,
                                          int64_t value_below, uint32_t limit,
                                          uint32_t* out_deleted, conveyor_error* err);

  /* ABI 1.5. add_shared_state on many keys in one round trip: adds[i] is
   * applied to adds[i].key exactly as add_shared_state would, and
   * out[i] (caller-owned, n elements) receives its out-parameters. Each add
   * is atomic and linearizable on its own key, as add_shared_state; the call
   * as a whole need not be one transaction (a plugin may commit it in
   * parts, in any order; concurrent calls must not deadlock). n == 0 is a
   * no-op (OK).
   * Failure (CONVEYOR_E_INVALID, nothing changed): n above
   * CONVEYOR_SHARED_ADDS_MAX; adds or out NULL with n > 0; the same key
   * twice; any add whose arguments add_shared_state refuses (its index in
   * the message). Any other failure: which adds applied is unknown, as for
   * a lost reply of add_shared_state (the host reads the records again).
   * Why: a claim of a queue whose keys each have a fleet bucket takes
   * tokens from every key it serves; one call for all of them keeps a
   * claim at two storage round trips (this and claim_keys) however many
   * keys it serves, and takes every key's due token at the same moment.
   * Cost: one round trip; per add, what add_shared_state costs. */
  conveyor_status (*add_shared_states)(conveyor_storage* storage, const conveyor_shared_add* adds,
                                       size_t n, conveyor_shared_added* out, conveyor_error* err);

  /* ---- version 1.6 (a job's own timeout, and when its attempt started).
   * Optional. A host refuses a job with a timeout other than 0 on a plugin
   * without enqueue_v5, naming the plugin and its ABI. Whatever slot
   * enqueued a job, a 1.6 plugin reports conveyor_job.started_at_us and
   * conveyor_job.timeout_ms (struct_size covers them) for it.
   * Why: the host fails an attempt that runs longer than its timeout (the
   * job's own, else its queue's job_timeout_s). For that, and for any
   * process that looks at a running job (another server, the CLI, a remote
   * worker's host), the timeout and the start of the attempt must live with
   * the job, not in the memory of the process that claimed it. The start
   * is the claim's now_us, written by the claim's own update: no statement
   * and no clock reading are added to a claim. ---- */

  /* ABI 1.6. enqueue_v4 with a timeout per job (conveyor_new_job_v4.
   * timeout_ms), stored with the job and reported in conveyor_job.timeout_ms
   * by every call that reports jobs (get_job, claim, claim_kinds,
   * claim_keys, list_jobs, rescue_expired_v2). Success: as enqueue_v4
   * (every job enqueued, out_ids[i] its id). Failure (CONVEYOR_E_INVALID,
   * nothing enqueued): a timeout_ms below 0 or above
   * CONVEYOR_JOB_TIMEOUT_MAX_MS, and everything enqueue_v4 refuses.
   * Threading: as enqueue (any thread, concurrently with every other call).
   * Jobs enqueued by any other enqueue slot have timeout_ms 0. */
  conveyor_status (*enqueue_v5)(conveyor_storage* storage, const conveyor_new_job_v4* jobs,
                                size_t n, int64_t now_us, int64_t* out_ids, conveyor_error* err);
} conveyor_storage_plugin;

/* The size of a 1.0 table: the least struct_size a host accepts. */
#define CONVEYOR_PLUGIN_V1_0_SIZE                             \
  (offsetof(conveyor_storage_plugin, wait_for_notification) + \
   sizeof(((conveyor_storage_plugin*)0)->wait_for_notification))
/* The size of a 1.1 table (every 1.1 slot covered). */
#define CONVEYOR_PLUGIN_V1_1_SIZE                         \
  (offsetof(conveyor_storage_plugin, rescue_expired_v2) + \
   sizeof(((conveyor_storage_plugin*)0)->rescue_expired_v2))

/* The size of a 1.2 table (every 1.2 slot covered). */
#define CONVEYOR_PLUGIN_V1_2_SIZE                  \
  (offsetof(conveyor_storage_plugin, enqueue_v3) + \
   sizeof(((conveyor_storage_plugin*)0)->enqueue_v3))

/* The size of a 1.3 table (every 1.3 slot covered). */
#define CONVEYOR_PLUGIN_V1_3_SIZE                        \
  (offsetof(conveyor_storage_plugin, add_shared_state) + \
   sizeof(((conveyor_storage_plugin*)0)->add_shared_state))

/* The size of a 1.4 table (every 1.4 slot covered). */
#define CONVEYOR_PLUGIN_V1_4_SIZE                       \
  (offsetof(conveyor_storage_plugin, list_ready_keys) + \
   sizeof(((conveyor_storage_plugin*)0)->list_ready_keys))

/* The size of a 1.5 table (every 1.5 slot covered). */
#define CONVEYOR_PLUGIN_V1_5_SIZE                         \
  (offsetof(conveyor_storage_plugin, add_shared_states) + \
   sizeof(((conveyor_storage_plugin*)0)->add_shared_states))

/* The size of a 1.6 table (every 1.6 slot covered). */
#define CONVEYOR_PLUGIN_V1_6_SIZE                  \
  (offsetof(conveyor_storage_plugin, enqueue_v5) + \
   sizeof(((conveyor_storage_plugin*)0)->enqueue_v5))

/* The entry point every plugin exports under CONVEYOR_PLUGIN_ENTRY_SYMBOL.
 * Returns the plugin's table (static, never freed) or NULL when the plugin
 * cannot serve host_abi_major. Must not allocate per call or fail otherwise. */
typedef const conveyor_storage_plugin* (*conveyor_plugin_entry_fn)(uint32_t host_abi_major,
                                                                   uint32_t host_abi_minor);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CONVEYOR_STORAGE_PLUGIN_H */
