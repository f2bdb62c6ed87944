// RemoteWorkers: the engine's side of the worker API. Workers in other
// processes (any language, over WorkerService) claim jobs through the
// engine's dispatcher, so the queue's rate limit and max_workers hold for
// the engine's own handlers and every remote worker together, and report
// results that storage checks against the job's current lease.
//
// - claim() long-polls: the dispatcher grants jobs of the named kinds
//   (storage ABI 1.1 claim_kinds) when the queue has jobs, permits and
//   tokens; the answer comes as soon as at least one job is granted, or empty
//   when the wait ends or the engine stops. A waiting claim holds no thread.
// - A granted job holds one of its queue's max_workers permits until it is
//   completed, failed or released here, or its lease expires (sweep()).
//   Heartbeats extend the lease.
// - A job with a time limit (its timeout_ms, else its queue's
//   job_timeout_s) counted from its grant is failed here at the deadline
//   (time_out_due(): a failed attempt, retried with backoff while attempts
//   remain), its permit freed; the worker's next heartbeat of it answers
//   timed_out, and its completion or failure is refused as for a lost lease.
// - Results name the lease (job id, token). Storage refuses a lease that is
//   no longer current (expired and rescued, cancelled): the result is
//   discarded and reported as lost.
// - The kinds of workers that claimed within kWorkerTimeout (or hold jobs)
//   count as served in the engine's report of kinds with no consumer.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/config.hpp>
#include <conveyor/internal/mutex.hpp>
#include <conveyor/internal/storage.hpp>
#include <conveyor/job.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace conveyor {

class Dispatcher;
class ServedKinds;
struct QueueRunner;
struct RemoteClaim;

class RemoteWorkers {
 public:
  // A worker that neither claimed nor held a job for this long is gone: its
  // kinds stop counting as served.
  static constexpr std::chrono::seconds kWorkerTimeout{60};
  static constexpr uint32_t kMaxJobsPerClaim = 1000;
  static constexpr std::chrono::seconds kMaxWait{30};
  static constexpr std::chrono::seconds kMaxLease{3600};
  static constexpr size_t kMaxErrorBytes = 4096;

  struct ClaimRequest {
    struct Queue {
      std::string name;
      uint32_t weight = 1;  // 0 is taken as 1
    };
    std::vector<Queue> queues;           // 1.., distinct, valid names
    std::vector<std::string> kinds;      // 1.., valid kinds
    uint32_t max_jobs = 1;               // 1..kMaxJobsPerClaim
    std::chrono::milliseconds wait{0};   // 0..kMaxWait
    std::chrono::milliseconds lease{0};  // 0: [engine] lease_ms; else up to kMaxLease
    std::string worker_id;               // "" for an anonymous worker
  };
  struct Claimed {
    std::vector<Job> jobs;  // leased (state running); empty when the wait ended
    std::chrono::milliseconds lease{0};
  };
  // Cancels a waiting claim (the client went away): true when it was still
  // waiting, and then done never runs.
  using Cancel = std::function<bool()>;

  // One lease's answer in a batch.
  struct Result {
    int64_t job_id = 0;
    conveyor_status status = CONVEYOR_OK;  // OK or CONVEYOR_E_LEASE_LOST
    std::string message;                   // why, when not OK
    // Not OK because the attempt ran past its time limit and was failed here.
    bool timed_out = false;
  };
  struct FailOutcome {
    bool will_retry = false;
    int64_t retry_at_us = -1;
  };

  // A worker's backpressure fail: hold queue (or only key, the job's key,
  // as the queue's hold setting says) for delay (0: the engine's doubling),
  // at most max_hold when set; why is the worker's error text; granted is
  // when the job was handed out (now for a job granted by an earlier server
  // process). Returns when the hold in force ends (wall clock, us): when the
  // job can run again.
  using Backpressure =
      std::function<int64_t(const std::string& queue, const std::string& key,
                            std::chrono::milliseconds delay, const std::string& why, int64_t job_id,
                            SteadyTime granted, std::optional<std::chrono::milliseconds> max_hold)>;
  // A job granted at granted was completed (a success for the queue's
  // backpressure episode, backoffs.hpp).
  using Succeeded = std::function<void(const std::string& queue, SteadyTime granted)>;
  RemoteWorkers(Storage& storage, Dispatcher& dispatcher, ServedKinds& served, const Clock& clock,
                const Config& config, Backpressure backpressure = nullptr,
                Succeeded succeeded = nullptr);
  ~RemoteWorkers();
  RemoteWorkers(const RemoteWorkers&) = delete;
  RemoteWorkers& operator=(const RemoteWorkers&) = delete;

  // Starts a claim; done runs exactly once (on the dispatcher's thread, or
  // this one) unless the returned Cancel succeeds. Throws ValidationError
  // for a request outside the limits above (nothing started), and
  // StorageError(CONVEYOR_E_UNSUPPORTED) on a plugin without claim_kinds.
  Cancel claim(ClaimRequest request, std::function<void(Claimed&&)> done) EXCLUDES(mu_);

  // Completes jobs. Per lease, in order. Throws StorageError when storage
  // fails (nothing reported; the leases stay held).
  std::vector<Result> complete(std::span<const conveyor_lease> leases) EXCLUDES(mu_);
  // Records a failed attempt: retried after retry_after (> 0) or the
  // engine's backoff, or final when permanent or no attempts are left.
  // backpressure: the downstream asked to wait, so not a failure: the job
  // is given back (attempt not spent) and its queue held for retry_after (0:
  // the engine's doubling from [engine] backoff_base_ms); permanent is then
  // refused (ValidationError). max_hold bounds the hold it sets (a worker
  // token's max_backpressure_s); retry_at_us is then when the hold in force
  // ends, which is when the job can run again.
  // Throws StorageError(CONVEYOR_E_LEASE_LOST) naming the job when the lease
  // is not current, other StorageErrors when storage fails.
  FailOutcome fail(const conveyor_lease& lease, std::string_view error,
                   std::chrono::milliseconds retry_after, bool permanent, bool backpressure = false,
                   std::optional<std::chrono::milliseconds> max_hold = std::nullopt) EXCLUDES(mu_);
  // The queue of the job a current lease names (held here, else as storage
  // has it), or nullopt when the lease is not current: what a scoped worker
  // token is checked against before anything changes.
  std::optional<std::string> queue_of(const conveyor_lease& lease) const EXCLUDES(mu_);
  // Extends leases to now + lease (0: [engine] lease_ms). Per lease; sets
  // *expires_us to the new end.
  std::vector<Result> heartbeat(std::span<const conveyor_lease> leases,
                                std::chrono::milliseconds lease, int64_t* expires_us) EXCLUDES(mu_);
  // Gives jobs back unrun (available now, attempt not spent). Per lease.
  std::vector<Result> release(std::span<const conveyor_lease> leases) EXCLUDES(mu_);

  // Fails (in storage, as a failed attempt with the engine's backoff) every
  // held job past its deadline, frees its permit, and remembers its lease as
  // timed out for the worker's next calls. Returns how many. Throws
  // StorageError when storage fails (those jobs stay held: the next call
  // tries again). The engine's maintenance runs it often; heartbeat() too.
  size_t time_out_due() EXCLUDES(mu_);

  // Answers every waiting claim empty now, and every later claim at once
  // (the server in front stops). Jobs held stay held.
  void close() EXCLUDES(mu_);

  // Frees the permits of granted jobs whose lease expired and forgets
  // workers silent for kWorkerTimeout. The engine's maintenance runs it.
  void sweep() EXCLUDES(mu_);

  // Workers that claimed within kWorkerTimeout or hold jobs.
  size_t connected_workers() const EXCLUDES(mu_);
  // Jobs granted to remote workers and not yet settled here.
  size_t jobs_held() const EXCLUDES(mu_);

 private:
  struct Held {
    QueueRunner* runner = nullptr;
    std::string queue;
    int64_t token = 0;
    SteadyTime expires{};
    SteadyTime granted{};
    int32_t attempt = 0, max_attempts = 0;
    std::string worker;
    std::string key;                       // the job's key (backpressure holds it)
    std::optional<SteadyTime> deadline{};  // the job's time limit from its grant
    std::string timeout_error{};           // what it fails with then
  };
  // A lease failed at its deadline, remembered for the worker's next calls
  // until forget_at.
  struct TimedOut {
    int64_t token = 0;
    std::string error;
    SteadyTime forget_at{};
  };
  struct Worker {
    std::vector<std::string> kinds;  // sorted, unique
    SteadyTime last_seen{};
    size_t held = 0;
  };

  void granted(const std::string& worker, QueueRunner* runner, std::span<const Job> jobs,
               std::chrono::milliseconds lease) EXCLUDES(mu_);
  // Forgets the lease (its permit freed) when it is held.
  void settle_locked(const conveyor_lease& lease) REQUIRES(mu_);
  void settle(std::span<const conveyor_lease> leases) EXCLUDES(mu_);
  void touch_worker_locked(const std::string& key, const std::vector<std::string>& kinds)
      REQUIRES(mu_);
  std::vector<Result> results(std::span<const conveyor_lease> leases,
                              const std::vector<conveyor_status>& statuses,
                              std::string_view what) const EXCLUDES(mu_);
  // The timed-out text of lease, if it timed out here.
  std::optional<std::string> timed_out_locked(const conveyor_lease& lease) const REQUIRES(mu_);
  // The leases of a heartbeat that an earlier server process granted (not
  // in held_): those past their job's deadline, computed from storage's
  // started_at_us (ABI 1.6) and the job's or queue's timeout, fail as timed
  // out and are answered so. One get_job per such lease.
  void time_out_inherited(std::span<const conveyor_lease> leases,
                          std::chrono::milliseconds lease_length) EXCLUDES(mu_);
  std::chrono::milliseconds lease_or_default(std::chrono::milliseconds lease) const;

  // Constant after construction.
  Storage& storage_;
  Dispatcher& dispatcher_;
  ServedKinds& served_;
  const Clock& clock_;
  const Config& config_;
  const Backpressure backpressure_;
  const Succeeded succeeded_;

  // Guarded by mu_.
  mutable Mutex mu_;
  std::unordered_map<int64_t, Held> held_ GUARDED_BY(mu_);              // by job id
  std::map<std::string, Worker, std::less<>> workers_ GUARDED_BY(mu_);  // by worker key
  std::unordered_map<int64_t, TimedOut> timed_out_ GUARDED_BY(mu_);     // by job id
  std::vector<std::weak_ptr<RemoteClaim>> waiting_ GUARDED_BY(mu_);     // for close()
  bool closed_ GUARDED_BY(mu_) = false;
};

}  // namespace conveyor
