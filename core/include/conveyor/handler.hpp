// What a job handler is, and how it tells the engine a job's outcome:
// returning, throwing (PermanentError, RetryAfter, any std::exception), or,
// for an asynchronous handler, through a JobResult. Engine::register_handler
// and register_async_handler take them (engine.hpp).
//
// Thread-safety: a JobResult and its copies may be used from any thread.
#pragma once

#include <conveyor/job.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace conveyor {

// Thrown by a handler to fail its job without further retries.
class PermanentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown by a handler when the downstream asked to wait (HTTP 429/503 with
// Retry-After, a quota error): backpressure, not a failure. The job goes back
// to pending with its attempt given back, and its queue dispatches nothing
// in this process for delay, at most [engine] max_backoff_s. 0: the
// downstream named none, so the engine holds from [engine] backoff_base_ms,
// doubling while the resumed queue is refused again, at most a minute; a
// negative delay (kRetryNow): it said "now" (Retry-After: 0), a hold of zero.
// Answers to jobs started before the hold in force began belong to it and
// do not lengthen it; after a hold the queue resumes at a fraction of the
// rate it was refused at and climbs back (docs/reference.md, "Backpressure").
inline constexpr std::chrono::milliseconds kRetryNow{-1};
class RetryAfter : public std::runtime_error {
 public:
  explicit RetryAfter(std::chrono::milliseconds delay,
                      const std::string& why = "the downstream asked to wait")
      : std::runtime_error(why), delay_(delay) {}
  std::chrono::milliseconds delay() const noexcept { return delay_; }

 private:
  std::chrono::milliseconds delay_;
};

// Job timeouts ([queues.NAME] job_timeout_s, or the job's own timeout_ms):
// an attempt still running at its deadline fails with a TimeLimit's error,
// "timed out after 30 s (job_timeout_s)", as if the handler had thrown it
// (retried with backoff while attempts remain; not backpressure), and its
// lease is no longer heartbeated. What the handler does later is ignored.
// A thread cannot be stopped from outside: a synchronous handler keeps
// running, and keeps its queue's max_workers permit and its worker thread
// until it returns (so max_workers still bounds the threads a queue's hung
// handlers take); it should poll job_timed_out() in long loops and give its
// blocking calls at most job_time_limit()->left. An asynchronous handler's
// permit is freed at the deadline (its JobResult reports the failure).
struct TimeLimit {
  std::chrono::milliseconds timeout{0};  // the attempt's whole time limit
  std::chrono::milliseconds left{0};     // what is left of it now; 0 once it passed
  std::string error;                     // what the attempt fails with at the deadline
};
// On the thread of a synchronous handler, about the job it runs: its time
// limit (nullopt: none, or not called from a handler), and whether the
// attempt has timed out (then anything the handler does is ignored: it
// should return). Cheap: no lock, no storage.
std::optional<TimeLimit> job_time_limit();
bool job_timed_out();

using Handler = std::function<void(const Job& job)>;

// How an asynchronous handler reports its job's outcome, at any time after it
// returned, from any thread (an I/O loop's callback, say). Until then the job
// holds its queue's permit (max_workers counts it) and its lease, which the
// engine heartbeats, but no worker thread. The first report counts; later
// ones are ignored. Each maps to what a synchronous handler would do:
//   complete()              returning
//   fail(error)             throwing std::exception: retried while attempts remain
//   fail_permanently(error) throwing PermanentError
//   retry_after(delay, why) throwing RetryAfter: backpressure
// Copies share one report. When the last copy is destroyed unreported, the
// attempt fails ("the handler dropped the job's result ..."), so a lost
// callback cannot leak a permit. A report after stop() abandoned the job
// (shutdown timeout) is ignored: its lease was released and it runs again.
// Reporting never blocks on storage.
class JobResult {
 public:
  void complete();
  void fail(std::string error);
  void fail_permanently(std::string error);
  void retry_after(std::chrono::milliseconds delay, std::string why);
  // The handler's own work ran into the attempt's time limit first (a
  // request given time_limit()->left was cut): fails the attempt as the
  // deadline would (counted as timed out, retried while attempts remain),
  // with error saying where it stopped. Without a time limit: fail(error).
  void fail_timed_out(std::string error);
  // True once any copy has reported, or the attempt timed out.
  bool reported() const;
  // True once the attempt's time limit passed: it failed as timed out, and
  // any report is ignored. The work may stop.
  bool timed_out() const;
  // The attempt's time limit (see TimeLimit); nullopt when it has none.
  std::optional<TimeLimit> time_limit() const;

  class Sink;  // internal: where the report goes
  explicit JobResult(std::shared_ptr<Sink> sink);

 private:
  std::shared_ptr<Sink> sink_;
};

// Starts a job's work and returns without waiting for it; the outcome goes to
// result. An exception thrown before result was reported counts as the
// outcome, as for Handler.
using AsyncHandler = std::function<void(const Job& job, JobResult result)>;

}  // namespace conveyor
