// Engine: Conveyor in a process. It opens the configured storage plugin,
// works every queue that has jobs (one dispatcher thread for all of them),
// runs handlers on a bounded pool, retries failures with exponential backoff
// and jitter, heartbeats leases, rescues jobs of dead workers, purges old
// finished jobs, and follows rate-limit overrides made by any process.
//
//   conveyor::Engine engine(conveyor::load_config_file("conveyor.toml"));
//   engine.register_handler("email", [](const conveyor::Job& job) { send(job.payload); });
//   engine.start();
//   engine.enqueue("email", "email", R"({"to":"a@b.c"})");
//   ...
//   engine.stop();
//
// Handlers signal failure by throwing: a std::exception is a failed attempt
// (retried while attempts remain), conveyor::PermanentError fails the job at
// once. Handlers run on pool threads, possibly many at a time.
//
// Thread-safety: every public method may be called from any thread, except
// that start() and stop() must not race each other.
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/config.hpp>
#include <conveyor/enqueue_options.hpp>
#include <conveyor/handler.hpp>
#include <conveyor/job.hpp>
#include <conveyor/queue_report.hpp>
#include <conveyor/rate_limit.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor {

class Storage;  // internal: the C ABI behind an interface

class Engine {
 public:
  // Loads the plugin, opens and migrates storage. Throws PluginLoadError,
  // StorageError. The clock is borrowed and must outlive the engine.
  explicit Engine(Config config, const Clock& clock = SystemClock::instance());
  // Stops (as stop()). Handlers still running after the shutdown timeout
  // are abandoned (their leases released): destroying the engine does not
  // wait for them, and they record nothing when they return.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Registers (or replaces) the handler for a job kind. The engine runs only
  // the kinds it has handlers for: a job of another kind that a claim takes is
  // given back at once, unspent and in place, and its queue is then claimed
  // with storage ABI 1.1 claim_kinds (served kinds only). So it stays pending,
  // and after [engine] unknown_kind_grace_s shows in queues() as unserved. On
  // an ABI 1.0 plugin (no claim_kinds) such a job is run and fails at once
  // ([engine] unknown_kind = "fail") or is retried with backoff ("retry").
  void register_handler(std::string kind, Handler handler);
  // The same for a handler that reports its outcome later (JobResult), so
  // that thousands of jobs can wait on the network with no thread each (the
  // server's "http" kind). It is called on a worker thread and should return
  // quickly. stop() waits shutdown_timeout_ms for outstanding reports.
  void register_async_handler(std::string kind, AsyncHandler handler);

  // Enqueues one job; returns its id. Validates queue, kind and payload size
  // (ValidationError). Throws StorageError.
  int64_t enqueue(std::string_view queue, std::string_view kind, std::string_view payload = "{}",
                  const EnqueueOptions& options = {});
  // Enqueues many atomically. run_at_us 0 means now; max_attempts 0 means the default.
  std::vector<int64_t> enqueue_batch(std::vector<NewJob> jobs);

  // Starts dispatching. Queues are discovered from storage within
  // poll_interval_ms; queues in [queues.*] and local enqueues start at once.
  void start();
  // Graceful stop: claims stop at once; claimed jobs that have not started
  // are not started; running handlers get shutdown_timeout_ms to finish;
  // the leases of jobs not started and of handlers still running then are
  // released so another process runs them (at-least-once), and each such
  // handler is logged. Every thread the engine started is joined. Returns
  // the number of leases released. Idempotent.
  uint32_t stop();
  // True from start() until stop() begins (false while stop() waits).
  bool running() const;

  // Durable overrides, applied by this engine at once and by other processes
  // within a second. Validated (ValidationError). A limit of scope kFleet
  // needs storage ABI 1.2 (swap_shared_state and set_rate_limit_v2): on a
  // plugin without them, ValidationError("scope", ...) naming the plugin
  // and its ABI, nothing stored.
  void set_rate_limit(std::string_view queue, const RateLimit& limit);
  bool delete_rate_limit(std::string_view queue);
  // The live kill switch (conveyor ratelimit disable / enable): stored in
  // storage, followed by every process within a second, and by this engine
  // at once. While disabled no limit throttles (backpressure holds still
  // apply). Needs storage ABI 1.2 (swap_shared_state): StorageError
  // CONVEYOR_E_UNSUPPORTED naming the plugin otherwise.
  void set_rate_limiting_enabled(bool enabled);
  // The switch as this engine follows it, and where that comes from
  // (storage, or the config file's rate_limit_enabled when storage has
  // nothing). Never calls storage.
  RateLimitingState rate_limiting() const;
  // Whether this engine's storage can hold fleet-wide limits (ABI 1.2's
  // swap_shared_state and set_rate_limit_v2). Never throws.
  bool supports_fleet_limits() const;
  // Run-time settings of a queue's keys (KeyOverride), durable and shared
  // like set_rate_limit: this engine follows them at once, other processes
  // within a second. key nullopt: every key of the queue (conveyor
  // ratelimit set Q --per-key). A key's own limit wins over the one for
  // every key, which wins over [queues.NAME] key_rate_limit. Validated
  // (ValidationError): queue name, key (1..200 bytes of UTF-8, or empty for
  // the empty key), rate, burst, weight 1..kKeyWeightMax; a queue with
  // fairness = "fifo" (no turns between keys to limit); scope kFleet on a
  // plugin without add_shared_state (ABI 1.3). Needs storage ABI 1.5
  // (set_key_setting, delete_key_setting, list_key_settings): StorageError
  // CONVEYOR_E_UNSUPPORTED naming the plugin and its ABI otherwise, nothing
  // stored. The delete calls return false when there was nothing to clear.
  void set_key_rate_limit(std::string_view queue, const std::optional<std::string>& key,
                          const RateLimit& limit);
  bool delete_key_rate_limit(std::string_view queue, const std::optional<std::string>& key);
  // A key's share of turns: weight w gets w jobs a round where weight 1
  // gets one (conveyor keys weight Q K W). Default 1.
  void set_key_weight(std::string_view queue, const std::string& key, uint32_t weight);
  bool delete_key_weight(std::string_view queue, const std::string& key);
  // Every run-time key setting as this engine follows it, in (queue, one
  // key before every key, key) order. Never calls storage.
  std::vector<KeyOverride> key_overrides() const;
  // Pause/resume a queue durably (claims stop in every process). Resuming
  // also ends this process's backpressure hold of the queue at once.
  void set_queue_paused(std::string_view queue, bool paused);

  std::vector<QueueReport> queues();
  // Storage's counts per queue, without limits (cheaper than queues()). On
  // an ABI 1.1 plugin these are job_counts: no scan of retained jobs.
  std::vector<QueueStats> queue_stats();
  // The same as queue_stats(), named for the operation (job_counts).
  std::vector<QueueStats> job_counts();
  std::optional<Job> get_job(int64_t id);
  // Cancels a job that is not final; false when there is no such job or it
  // already ended. A running job's lease is lost (its result is refused).
  bool cancel_job(int64_t id);

  // ---- Job operations (storage ABI 1.1). On a plugin without the slot each
  // throws StorageError(CONVEYOR_E_UNSUPPORTED) whose message names the
  // plugin and its ABI ("storage plugin 'x' implements ABI 1.0; listing jobs
  // needs ABI 1.1 (slot list_jobs): upgrade the plugin"). Other failures:
  // ValidationError for bad input (nothing done), StorageError from storage
  // (transient() when retrying may help). Thread-safe like every method.

  // One page of a queue's jobs with id > query.after_id, in id order, at
  // most query.limit (1..kListJobsMax); the next page starts after the last
  // id; fewer than limit means the end. Validated: queue name, limit,
  // after_id >= 0, kind (when given).
  std::vector<Job> list_jobs(const JobQuery& query);
  // Retries up to kJobBatchMax ids: each FAILED or CANCELLED job becomes
  // available now with its attempts reset (last_error kept until a new
  // attempt fails). Per id, in order: JobOutcome::Status kOk, kNotFound or
  // kWrongState (that job unchanged). Bulk retries go page by page:
  // list_jobs(failed) then retry_jobs of the page.
  std::vector<JobOutcome> retry_jobs(std::span<const int64_t> ids);
  // Deletes up to kJobBatchMax final (completed, failed, cancelled) jobs.
  // Per id as retry_jobs; a job not final is kWrongState and kept.
  std::vector<JobOutcome> delete_jobs(std::span<const int64_t> ids);
  static constexpr size_t kJobBatchMax = 1000;

  // ---- Bulk operations over one queue's jobs (conveyor jobs cancel/rm
  // --queue, the API's CancelJobs and DeleteJobs with a queue), one bounded
  // batch per call: list_jobs of up to filter.limit (1..kJobBatchMax) jobs of
  // filter.queue in filter.states (and filter.kind, when given) with id >
  // filter.after_id, then the operation on those ids. Follow next_after_id
  // (0: that was the last batch) to go through the queue; nothing is atomic
  // across batches (see docs/reference.md). Bad input is ValidationError,
  // nothing done.
  struct JobBatchResult {
    int64_t done = 0;     // jobs cancelled (deleted) by this batch
    int64_t refused = 0;  // listed, then refused: they changed state (or were deleted) meanwhile
    int64_t next_after_id = 0;
  };
  // states: available, scheduled, running (empty: all three); a final state
  // is refused. A running job's lease is lost (its result is refused).
  JobBatchResult cancel_jobs_batch(const JobQuery& filter);
  // states: completed, failed, cancelled; at least one (no "every job").
  JobBatchResult delete_jobs_batch(const JobQuery& filter);

  // Removes a queue (conveyor queues rm, the API's DeleteQueue), one batch
  // of at most limit (1..kJobBatchMax) of its jobs per call, from after_id:
  // the first call (after_id 0) pauses the queue, so nothing new starts
  // while its jobs go; each call cancels and deletes a batch of its jobs;
  // the call that finds no more jobs removes its stored rate-limit override,
  // its key settings (ABI 1.5) and its paused flag. Without force, a queue
  // with running jobs is refused at the first call (running_refused set,
  // nothing changed); with force running jobs are cancelled (their leases
  // lost: a handler still running finishes, its result refused) and deleted.
  // An unknown queue (not in storage, no override, no key setting) is
  // not_found set, nothing done.
  struct QueueRemoval {
    bool not_found = false;
    int64_t running_refused = 0;    // without force: running jobs (nothing done)
    int64_t deleted = 0;            // jobs deleted by this call
    int64_t cancelled = 0;          // of them, jobs cancelled first (not final)
    int64_t running_cancelled = 0;  // of those, running ones (force)
    int64_t kept = 0;               // jobs left: running ones that started meanwhile, or changed
    int64_t next_after_id = 0;      // 0: the queue is removed (the settings too)
    bool override_removed = false;
    int64_t key_settings_removed = 0;
    bool was_paused = false;  // the paused flag cleared (first call: paused before)
    // [queues.NAME] defines it: it stays in queues(), empty, with its config.
    bool configured = false;
  };
  QueueRemoval remove_queue(std::string_view queue, bool force, int64_t after_id = 0,
                            uint32_t limit = kJobBatchMax);

  // The keys of a keyed queue (`conveyor keys`, ListKeys): every key with
  // ready jobs as storage lists them (list_ready_keys, all processes; each
  // key's ready count capped at kKeyReadyCountCap, at most kKeysScanMax keys
  // read), merged, while this engine runs (start() until stop()), with what
  // its dispatch unit knows live: the jobs of each key running here and
  // whether the key's own bucket was empty at its last turn (keys with jobs
  // running and none ready are included). Sorted busiest first (most ready,
  // then most running), at most limit (1..kKeysMax) keys; total_keys says
  // how many there were. Also the queue's per-key limits from its config and
  // their source. Not running: live is false, running and throttled unknown
  // (0, false). An unknown queue has no keys. Failure: ValidationError (queue
  // name, limit), StorageError (CONVEYOR_E_UNSUPPORTED naming the plugin on
  // one before ABI 1.4; others from storage). Thread-safe; one storage call
  // per kPageKeys (1000) keys with ready jobs.
  KeysReport keys(std::string_view queue, uint32_t limit = 20);

  // Set when storage failed with errors retrying cannot fix (a removed or
  // overwritten database file, say) long enough to give up: the engine then
  // stops working and `conveyor serve` exits 1. Empty while storage works or
  // is only unreachable for a while. Thread-safe.
  std::optional<std::string> storage_failure() const;

  const Config& config() const;
  // Worker threads started so far (bounded by [engine] worker_threads).
  uint32_t worker_threads() const;

 private:
  friend struct EngineInternals;  // in-tree access (server, benchmarks, tests)
  Engine(Config config, const Clock& clock, std::shared_ptr<Storage> storage);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Registers the stand-alone server's kinds: "noop" (succeeds at once) and
// "sleep" (payload {"ms": N}, 0 <= N <= 3,600,000).
void register_builtin_handlers(Engine& engine);
// The milliseconds of a "sleep" job's payload: a JSON object whose "ms"
// (absent: 0) is a whole number from 0 to 3,600,000; other members are
// ignored. Throws ValidationError("payload", ...) saying what is wrong.
// Enqueueing through the API or the CLI checks it, so a bad payload is
// refused then, not failed when the job runs.
int64_t parse_sleep_payload(std::string_view payload);

// The retry delay before attempt+1 after attempt failed: base * 2^(attempt-1),
// capped, with +-20% jitter (u in [0,1) picks the jitter; deterministic for tests).
std::chrono::milliseconds retry_backoff(int32_t attempt, std::chrono::milliseconds base,
                                        std::chrono::milliseconds cap, double u);

}  // namespace conveyor
