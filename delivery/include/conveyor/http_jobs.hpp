// The "http" job kind: the queue itself makes each job's HTTP call, with no
// worker to write and no thread per request (conveyor/http_delivery.hpp).
//
// What a job calls:
//   - its queue has [queues.NAME.http]: that target (url, method, timeout_ms,
//     headers, secret_env, follow_redirects); the job's payload is the body;
//   - else the payload is a JSON object naming the request (HttpCall,
//     conveyor/http_call.hpp: url, method, headers, body, timeout_ms,
//     follow_redirects), checked when the job is enqueued.
// Content-Type is application/json unless the headers set it.
//
// Outcomes (docs/reference.md has the table): 2xx completes the job; 429 and
// 503 are backpressure (the attempt is given back and the queue is held for
// Retry-After, or backs off from [engine] backoff_base_ms); 408, 425, 500,
// 502, 504, timeouts and connection errors are failed attempts, retried with
// the job's backoff; any other status, a payload that names no valid request
// and a target the [http] guard refuses fail the job at once, saying why.
#pragma once

#include <conveyor/config.hpp>
#include <conveyor/http_delivery.hpp>
#include <conveyor/job.hpp>

#include <cstddef>
#include <map>
#include <memory>
#include <string>

namespace conveyor {

class Engine;

class HttpJobs {
 public:
  // Reads [http] and every [queues.NAME.http] of engine.config(), reads each
  // secret_env from env, starts the delivery thread and registers kind
  // "http" on engine. Throws ConfigError when a secret_env variable is unset
  // or empty (naming the queue and the variable), std::runtime_error when
  // libcurl cannot start. engine must outlive this object; destroy it after
  // engine.stop(), which waits up to shutdown_timeout_ms for the deliveries
  // in flight (the rest are aborted here and their jobs run again).
  explicit HttpJobs(Engine& engine, const EnvLookup& env = process_env());
  ~HttpJobs();
  HttpJobs(const HttpJobs&) = delete;
  HttpJobs& operator=(const HttpJobs&) = delete;

  // Requests sent (or waiting for a connection) whose outcome is not yet in.
  // Thread-safe.
  size_t in_flight() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The request job makes: from target when its queue has one (payload = body),
// else from the payload. secret signs it when non-empty. Throws
// PermanentError saying which payload field is wrong and what it takes.
http_delivery::Request http_request_for(const Job& job, const HttpTargetConfig* target,
                                        const std::string& secret);

}  // namespace conveyor
