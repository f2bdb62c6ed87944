// Dispatcher: one thread polls every queue, each when it is due, so an idle
// queue costs a timer entry and an occasional claim, not a thread.
//
// A poll of one queue (docs/reference.md, "Rate limits"):
//   permits = min(max_workers - in flight, engine-wide free slots)
//   batch   = min(permits, claim_batch_max)
//   limited queue: tokens = bucket.take(batch * cost_hint, at least
//                  cost_hint); none -> count a throttle and come back
//                  exactly when they are due; batch = tokens / cost_hint
//   jobs    = storage.claim(batch); then settle_costs: jobs costing more
//             take the tokens they lack, those that still do not fit go
//             back (their place kept), and unused tokens are refunded
// A bucket is the process's own (scope "process") or shared by the fleet
// through storage (scope "fleet", fleet_bucket.hpp): same arithmetic, same
// loop; only a fleet bucket's takes and refunds are storage calls.
// With Options::served and a plugin with claim_kinds, jobs of kinds no
// consumer here serves are never run: a plain claim that returns some gives
// them back (run_at kept) and the queue is claimed with claim_kinds (served
// kinds only) for kFilterHold, so a queue whose every kind is served keeps
// the plain claim's speed.
// A pass polls the due limited queues first, the nearest to a full bucket
// first; then limited queues still a whole batch of tokens behind claim again
// (see catch_up); then the unlimited queues.
// A queue with no limit never touches a bucket: its cost is one atomic load
// (the resolver's generation) per poll.
// Slow claims (Options::slow_claim): a queue whose local claim took that long
// or more claims on the slow-claim thread from then on, so its storage calls
// never hold up the other queues' dispatch; its permits are reserved for the
// batch while the claim runs, and the result is delivered by the next pass.
// Back on this thread once such a claim takes under half of it. Up to
// kSlowClaimThreads slow claims run at once (a thread each, started when
// every one already started is busy); more slow queues than that wait for
// each other. Remote workers' claims always run here.
// Remote workers' claims (remote_claim.hpp) are served by the same polls:
// a queue with claims waiting serves them and its local handlers in turn
// (who goes first alternates), from one bucket and one set of permits. A
// new claim tries its queues at once, in a weighted random order.
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/config.hpp>
#include <conveyor/limit_resolver.hpp>
#include <conveyor/metrics.hpp>
#include <conveyor/storage.hpp>

#include "queue_bucket.hpp"
#include "remote_claim.hpp"
#include "resume_ramp.hpp"
#include "served_kinds.hpp"
#include "storage_health.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace conveyor {

// One queue's dispatch state. Fields marked (D) belong to the dispatcher
// thread; in_flight is shared with the workers.
struct QueueRunner {
  QueueRunner(std::string n, uint32_t workers, QueueCounters& c)
      : name(std::move(n)), max_workers(workers), counters(c) {}
  const std::string name;
  const uint32_t max_workers;
  QueueCounters& counters;
  std::atomic<uint32_t> in_flight{0};  // claimed and not yet finished
  std::atomic<bool> parked{false};     // waiting for a permit (no timer)
  std::optional<QueueBucket> bucket;   // (D) present iff limited
  // (D) The most a job cost in the last claimed batch (Job::cost, at most the
  // burst): claims wait for that many tokens and ask for tokens / cost_hint
  // jobs, so jobs that cost more than one rarely need giving back.
  uint32_t cost_hint = 1;
  EffectiveLimit limit;                        // (D)
  uint64_t limit_generation = 0;               // (D) resolver generation of limit
  SteadyTime due{};                            // (D) when it is next polled
  bool scheduled = false;                      // (D) present in the timer set
  std::chrono::milliseconds error_backoff{0};  // (D)
  bool coalescing = false;                     // (D) waiting briefly for more permits
  // (D) Until then claims take only the served kinds (claim_kinds); after, a
  // plain claim, which is the faster one on some plugins (see poll).
  SteadyTime filter_until{};
  // While coalescing: wake as soon as in_flight drops below this (0: off),
  // i.e. when a full batch of permits is free, instead of at the timer.
  std::atomic<uint32_t> wake_below{0};

  // Remote workers (D unless marked).
  std::list<std::shared_ptr<RemoteClaim>> remote;  // claims waiting here, oldest first
  // A remote worker claimed here: local claims always take the local kinds
  // only (claim_kinds), never the plain claim that would take its jobs.
  bool remote_seen = false;
  bool remote_first = false;  // remote claims go first at the next poll (last grant was local)
  // The last local claim found fewer jobs than it asked for: no local claim
  // until a wake that may concern local kinds (local_work), or local_retry.
  bool local_idle = false;
  SteadyTime local_retry{};
  std::atomic<bool> local_work{false};  // any thread

  // Backpressure: no claim before this steady time (ns since its epoch; 0:
  // none). Any thread sets it; held (D) notes a hold to end with an empty
  // bucket and a resume ramp.
  std::atomic<int64_t> hold_until_ns{0};
  std::atomic<int64_t> hold_began_ns{0};  // when the latest hold was set
  // Any thread: the operator ended the hold (no ramp after it).
  std::atomic<bool> hold_cleared{false};
  bool held = false;
  int64_t hold_applied_ns = 0;  // (D) the latest hold seen (and written into the bucket)
  // (D) After a hold: the pace the queue climbs back at (resume_ramp.hpp),
  // and the rate it was last refused at (0: not known), which the next
  // ramp of an unlimited queue starts from.
  std::optional<ResumeRamp> ramp;
  double refused_rate = 0;
  // (D) counters.dispatched at rate_sample_at, renewed each second at a
  // poll: what an unlimited queue was sending when refused.
  SteadyTime rate_sample_at{};
  uint64_t rate_sample_dispatched = 0;
  double sampled_rate = 0;  // (D) jobs/s over the sample before

  // (D) When jobs this process made ready later become due (wake_at; wall
  // clock, microseconds), kept until a poll interval past while storage
  // reports due jobs: a drained queue is polled at the earliest of them, not
  // only at the rare notified re-poll. At most kMaxDueTimes (dispatcher.cc).
  std::set<int64_t> due_at_us;
  // (D) Times past the set's bound were dropped: until the latest of them
  // (and a poll interval more) the queue keeps the short poll.
  int64_t due_dropped_until_us = 0;
  // (D) Drained polls left at poll_interval after the last wake, before
  // the notified poll (Options::notified_due): see kShortPollsAfterWake.
  uint32_t short_polls_after_wake = 0;
  // (D) Local claims run on the slow-claim thread (Options::slow_claim).
  bool slow_claims = false;
  // (D) A local claim of this queue is on the slow-claim thread: no other
  // local claim until its result is delivered.
  bool claim_in_flight = false;
  // (D) It was due while its claim was on the slow-claim thread (a wake, a
  // timer): polled again as soon as the claim is delivered.
  bool polled_during_claim = false;
};

// What a queue's runner looks like from outside the dispatcher thread.
struct RunnerView {
  std::string queue;
  uint32_t in_flight = 0;
  uint32_t max_workers = 0;
};

class Dispatcher {
 public:
  struct Options {
    uint32_t claim_batch_max = 100;
    std::chrono::milliseconds poll_interval{1000};
    std::chrono::milliseconds lease{30000};
    // Engine-wide: the worker thread cap. Jobs of asynchronous handlers
    // count only until started (job_left_slot).
    uint32_t max_in_flight = 256;
    // When a busy queue gets a permit back, wait this long for more to free
    // up before claiming, so fast jobs are claimed in batches, not one by one.
    std::chrono::microseconds coalesce{1000};
    // Where claim outcomes are reported (may be null).
    StorageHealth* health = nullptr;
    // The kinds to claim (claim_kinds), read at every poll; none served:
    // nothing is claimed. Null, or a plugin without claim_kinds: every kind.
    const ServedKinds* served = nullptr;
    // Whether storage now reports every job that becomes ready, delayed ones
    // when they come due (CONVEYOR_CAP_NOTIFY_DUE and a working notification
    // channel); asked at every drained poll, any thread's answer. Then a
    // drained queue waits for a notification, its own wake_at times, or
    // notified_poll (jittered down to half, so queues drained together do
    // not all poll together); otherwise for poll_interval. Null: never.
    std::function<bool()> notified_due;
    std::chrono::milliseconds notified_poll{60000};
    // Whether the engine's sweep (wake_queues_with_pending_jobs, every
    // notified_poll: one job_counts call for every queue) stands in for each
    // drained queue's own notified_poll. Then a drained queue waits only for
    // notifications, its wake_at times and the sweep, so the safety net costs
    // one storage call per notified_poll however many queues are idle (one
    // claim per queue cost 1,000 idle queues 4.5% of a core on PostgreSQL).
    bool swept = false;
    // A queue whose local claim takes this long claims on the slow-claim
    // thread from then on (see above); 0: every claim on the dispatcher
    // thread.
    std::chrono::milliseconds slow_claim{0};
    // Whether the outcomes of jobs already run wait, too many, to be
    // recorded (Completer::backlogged): then no local claim, since a job
    // whose result cannot be saved would only run again; asked at every
    // local claim, any thread's answer. Null: never.
    std::function<bool()> outcomes_backlogged;
  };
  // Receives each claimed batch; must not block on the jobs' execution.
  using Execute = std::function<void(QueueRunner&, std::vector<Job>&&)>;

  Dispatcher(Storage& storage, const LimitResolver& limits, const Clock& clock, Metrics& metrics,
             Options options, Execute execute);
  // Joins the slow-claim threads; what they claimed and nobody delivered goes
  // back to storage.
  ~Dispatcher();

  // The options an engine configured with engine gives its dispatcher.
  static Options options_for(const EngineConfig& engine, StorageHealth* health,
                             const ServedKinds* served = nullptr);

  // Adds a queue (no-op if known) and makes it due now. Thread-safe.
  void add_queue(const std::string& name, uint32_t max_workers);
  // Makes the queue due now, adding it first when it is new. Thread-safe.
  void add_or_wake(const std::string& name, uint32_t max_workers);
  bool has_queue(std::string_view name) const;
  // Makes a known queue due now (new jobs, a changed limit). Thread-safe.
  // local_work = false: the change concerns no kind the local handlers run
  // (a remote worker's job was enqueued), so on a queue remote workers serve
  // it wakes only their claims.
  void wake(std::string_view name, bool local_work = true);
  // Makes every queue due now. Thread-safe.
  void wake_all();
  // Jobs of a known queue become ready at at_us (wall clock): this process
  // scheduled them (a retry) and storage will not notify. The queue is
  // polled then, whatever its idle poll. Thread-safe.
  void wake_at(std::string_view name, int64_t at_us);
  // A worker finished a job of runner: frees its permit. Thread-safe.
  void job_finished(QueueRunner& runner);
  // A local job now waits without a thread (an asynchronous handler started
  // it): its engine-wide worker slot is free, its queue's permit still
  // held until async_job_finished. Any thread.
  void job_left_slot();
  void async_job_finished(QueueRunner& runner);

  // Backpressure: queue claims nothing (for local handlers or remote
  // workers) before until, and its bucket is empty then; after it the
  // queue resumes through a ResumeRamp from the rate it was refused at. A
  // later hold extends it; clear_hold (the operator's) ends it, with no
  // ramp, and wakes the queue. Thread-safe.
  void hold(const std::string& queue, SteadyTime until);
  void clear_hold(std::string_view queue);

  // Serves a remote worker's claim (remote_claim.hpp), adding its queues
  // when new. Answered empty at once after close_remote(). Thread-safe.
  void submit_remote(std::shared_ptr<RemoteClaim> claim);
  // Answers every waiting remote claim empty, and every later one at once.
  // Call after run() returned (the engine stops).
  void close_remote();
  // A job granted to a remote worker was settled or its lease expired:
  // frees its permit. Thread-safe.
  void remote_job_finished(QueueRunner& runner);

  // Polls every queue due at or before now, tries new remote claims and
  // answers those whose wait ended; returns when the next queue is due or
  // claim's wait ends (SteadyTime::max() when none). Dispatcher thread (or
  // a test) only.
  SteadyTime run_due(SteadyTime now);
  // The thread body: run_due in a loop until stop is requested, waiting on
  // the real clock in between. Before it returns, the slow-claim thread
  // stops and the jobs of claims not delivered go back to storage.
  void run(std::stop_token stop);
  // Interrupts run()'s wait so it sees a stop request promptly.
  void interrupt();

  uint32_t total_in_flight() const { return total_in_flight_.load(); }
  std::vector<RunnerView> runners() const;

 private:
  void poll(QueueRunner& r, SteadyTime now);
  // Whether r is held by backpressure now (then scheduled for the hold's
  // end); empties r's bucket once a hold ended.
  bool held(QueueRunner& r, SteadyTime now);
  // Jobs/s r dispatched lately: over its last sample, or since (counted
  // over at least a second), whichever is more.
  static double sending_rate(const QueueRunner& r, SteadyTime now);
  void poll_local(QueueRunner& r, SteadyTime now);
  // What one try to grant a remote claim jobs of a queue ended with.
  enum class RemoteTry { kGranted, kEmpty, kNoPermits, kThrottled, kFailed, kGone };
  RemoteTry try_remote(QueueRunner& r, RemoteClaim& claim, SteadyTime now);
  // What a limited queue may claim: up to jobs jobs, for which tokens were
  // taken. jobs 0: throttled (counted, and r scheduled for when the tokens
  // are due) or the fleet bucket's storage failed (backing off).
  struct Grant {
    uint32_t jobs = 0;
    uint32_t tokens = 0;
  };
  // For an unlimited queue: {max_jobs, 0}, no bucket touched.
  Grant take_tokens(QueueRunner& r, uint32_t max_jobs, SteadyTime now);
  // Frees n permits reserved for a slow claim that found fewer jobs.
  void release_reserved(QueueRunner& r, uint32_t n);
  // A local claim: what to claim, and (once made) what it returned.
  struct LocalClaim {
    QueueRunner* runner = nullptr;
    Grant grant;
    bool filtered = false;           // claim_kinds with kinds, else claim
    std::vector<std::string> kinds;  // when filtered
    int64_t wall_us = 0, expires_us = 0;
    uint32_t reserved = 0;  // permits held for it while on the slow-claim thread
    std::vector<Job> jobs;
    std::exception_ptr error;
    std::chrono::steady_clock::duration took{};
  };
  // Makes the storage call of c (any thread; never throws: error is set).
  void make_claim(LocalClaim& c);
  // After c's storage call, on the dispatcher thread: delivers its jobs,
  // settles tokens and permits, schedules the queue's next poll.
  void finish_claim(LocalClaim& c, SteadyTime now);
  // A slow-claim thread's body.
  void run_slow_claims();
  // Stops the slow-claim threads; claims not delivered give their jobs back.
  void stop_slow_claims();
  // Jobs were claimed with tokens taken for them (see the poll above):
  // takes the tokens costlier jobs lack, gives back the jobs that still do
  // not fit and refunds what is left. Whether jobs were given back (r is
  // then scheduled for when their tokens are due).
  bool settle_costs(QueueRunner& r, std::vector<Job>& jobs, uint32_t tokens, SteadyTime now);
  // The tokens job takes from a bucket of burst: its cost, at most the burst.
  static uint32_t token_cost(const Job& job, uint32_t burst);
  // The tokens jobs take from r's bucket (each at most the burst).
  static uint32_t tokens_for(const QueueRunner& r, std::span<const Job> jobs);
  // Gives n tokens back to r's bucket; a fleet bucket's failure only logs
  // (the tokens are lost: the fleet runs slower, never faster).
  void refund_tokens(QueueRunner& r, uint32_t n);
  // A claim failed with e: refund its tokens, health, log, back off.
  void claim_failed(QueueRunner& r, uint32_t tokens, const std::exception& e, const char* what,
                    SteadyTime now);
  // Serves r's waiting remote claims, oldest first, while it has permits and tokens.
  void serve_remote(QueueRunner& r, SteadyTime now);
  // A claim submitted since the last pass: its queues in weighted random
  // order, then it waits on each of them.
  void start_remote(const std::shared_ptr<RemoteClaim>& claim, SteadyTime now);
  // Answers empty the claims whose wait ended by now.
  void expire_remote(SteadyTime now);
  // The runner of queue, added when new.
  QueueRunner& runner_for(const std::string& queue, uint32_t max_workers);
  // Moves r's due time to at most due (mu_ taken).
  void schedule_by(QueueRunner& r, SteadyTime due);
  // When a queue whose claim found fewer jobs than it asked for is polled
  // again (Options::notified_due); forgets r's due times long past.
  SteadyTime drained_poll(QueueRunner& r, SteadyTime now);
  // Moves waiting_global_ into woken_ (mu_ held): engine-wide slots are free.
  void wake_global_waiters();
  // Frees one permit of runner (and, for a local job, one engine-wide
  // slot); wakes what waited for it.
  void release_permit(QueueRunner& runner, bool local);
  // After r's poll: claims again if r is a whole batch of tokens behind;
  // whether it claimed.
  bool catch_up(QueueRunner& r);
  void refresh_limit(QueueRunner& r, SteadyTime now);
  void schedule(QueueRunner& r, SteadyTime due);  // mu_ held
  void park(QueueRunner& r);
  // Releases claimed jobs unrun, each keeping its place (run_at); why
  // says why, for the log line of a release that fails.
  void give_back(const QueueRunner& r, std::span<const Job> jobs, const char* why);
  // The kinds to claim now (served_'s snapshot, refreshed when it changed);
  // null when claims take every kind. Dispatcher thread only.
  const std::vector<std::string>* claim_filter();

  Storage& storage_;
  const LimitResolver& limits_;
  const Clock& clock_;
  Metrics& metrics_;
  const Options options_;
  const Execute execute_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::unique_ptr<QueueRunner>, std::less<>> runners_;  // mu_
  std::set<std::pair<SteadyTime, QueueRunner*>> timers_;                      // mu_
  std::vector<QueueRunner*> woken_;                                           // mu_
  std::vector<QueueRunner*> waiting_global_;                                  // mu_
  std::vector<std::pair<QueueRunner*, int64_t>> due_inbox_;  // mu_: wake_at's, not yet scheduled
  std::atomic<bool> has_global_waiters_{false};
  bool interrupted_ = false;                                    // mu_
  std::vector<std::shared_ptr<RemoteClaim>> remote_submitted_;  // mu_
  bool remote_closed_ = false;                                  // mu_
  // (D) Every claim that waits, by the end of its wait.
  std::multimap<SteadyTime, std::shared_ptr<RemoteClaim>> remote_deadlines_;
  std::atomic<uint32_t> total_in_flight_{0};
  // The slow-claim threads (each started when a slow claim finds every
  // started one busy, up to kSlowClaimThreads) and their work.
  std::mutex slow_mu_;
  std::condition_variable slow_cv_;
  std::list<LocalClaim> slow_requests_;     // slow_mu_
  bool slow_stop_ = false;                  // slow_mu_
  uint32_t slow_waiting_ = 0;               // slow_mu_: threads waiting for a claim
  std::list<LocalClaim> slow_done_;         // mu_: made, not yet delivered
  std::vector<std::thread> slow_threads_;   // (D)
  const bool filter_kinds_;                 // served given and the plugin has claim_kinds
  uint64_t kinds_generation_ = UINT64_MAX;  // (D) of kinds_
  ServedKinds::Snapshot kinds_;             // (D)
};

}  // namespace conveyor
