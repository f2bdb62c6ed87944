// WorkerService (proto/conveyor/v1/worker.proto) over the engine's
// RemoteWorkers: the messages in and out, the durations checked.
#include "api_service.hpp"

#include "auth.hpp"

#include <conveyor/api_messages.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/internal/engine_internals.hpp>
#include <conveyor/internal/remote_workers.hpp>
#include <conveyor/validation.hpp>

#include <fmt/format.h>

#include <cmath>

#include "conveyor/v1/worker.pb.h"

namespace conveyor {
namespace {

namespace v1 = conveyor::v1;
constexpr std::string_view kWorker = "/conveyor.v1.WorkerService/";

// A seconds field as milliseconds: finite, 0..max.
std::chrono::milliseconds checked_seconds(double seconds, const char* field,
                                          std::chrono::seconds max, const char* zero_means) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > static_cast<double>(max.count()))
    throw ValidationError(field, fmt::format("{}: must be 0..{} seconds ({}), got {}", field,
                                             max.count(), zero_means, format_number(seconds)));
  return std::chrono::milliseconds(std::llround(seconds * 1000));
}

template <typename Leases>
std::vector<conveyor_lease> leases_of(const Leases& leases) {
  std::vector<conveyor_lease> out;
  out.reserve(static_cast<size_t>(leases.size()));
  for (const v1::Lease& l : leases) out.push_back({l.job_id(), l.token()});
  return out;
}

template <typename Response>
void add_results(const std::vector<RemoteWorkers::Result>& results, Response& response) {
  for (const RemoteWorkers::Result& r : results) {
    v1::LeaseResult* out = response.add_results();
    out->set_job_id(r.job_id);
    // deadline_exceeded: the job ran past its time limit (job_timeout_s) and
    // the server failed the attempt; like failed_precondition, the lease is gone.
    out->set_code(r.status == CONVEYOR_OK ? "ok"
                  : r.timed_out           ? "deadline_exceeded"
                                          : "failed_precondition");
    out->set_message(r.message);
  }
}

double seconds_of(std::chrono::milliseconds d) { return static_cast<double>(d.count()) / 1000.0; }

// Refuses the whole call, before anything changes, when a lease names a job
// of a queue the token does not cover. A lease that is not current passes:
// it changes nothing, and the engine answers it lost.
void require_lease(RemoteWorkers& remote, const WorkerScope* scope, const conveyor_lease& lease,
                   std::string_view what) {
  if (!scope || scope->every_queue) return;
  if (const std::optional<std::string> queue = remote.queue_of(lease))
    scope->require_queue(*queue, what);
}

template <typename Leases>
void require_leases(RemoteWorkers& remote, const WorkerScope* scope, const Leases& leases,
                    std::string_view what) {
  for (const v1::Lease& l : leases) require_lease(remote, scope, {l.job_id(), l.token()}, what);
}

}  // namespace

void ApiService::add_worker_methods() {
  Engine& e = engine_;
  {
    Method m;
    m.mutates = true;
    m.audited = false;
    m.request_prototype = &v1::ClaimRequest::default_instance();
    m.response_prototype = &v1::ClaimResponse::default_instance();
    m.call_async = [&e](const Message& message, Done done, const WorkerScope* scope) -> Cancel {
      const auto& request = static_cast<const v1::ClaimRequest&>(message);
      RemoteWorkers::ClaimRequest claim;
      for (const v1::QueueWeight& q : request.queues()) {
        if (scope) scope->require_queue(q.queue(), "claim from");
        claim.queues.push_back({q.queue(), q.weight()});
      }
      claim.kinds.assign(request.kinds().begin(), request.kinds().end());
      claim.max_jobs = request.max_jobs();
      claim.wait = checked_seconds(request.wait_seconds(), "waitSeconds", RemoteWorkers::kMaxWait,
                                   "0 answers at once");
      claim.lease = checked_seconds(request.lease_seconds(), "leaseSeconds",
                                    RemoteWorkers::kMaxLease, "0 means the server's lease");
      claim.worker_id = request.worker_id();
      return EngineInternals::remote_workers(e).claim(
          std::move(claim), [done = std::move(done)](RemoteWorkers::Claimed&& claimed) {
            auto response = std::make_unique<v1::ClaimResponse>();
            response->set_lease_seconds(seconds_of(claimed.lease));
            for (const Job& job : claimed.jobs) {
              v1::ClaimedJob* out = response->add_jobs();
              api::to_proto(job, *out->mutable_job());
              out->mutable_lease()->set_job_id(job.id);
              out->mutable_lease()->set_token(job.lease_token);
            }
            done(std::move(response));
          });
    };
    methods_[std::string(kWorker) + "Claim"] = std::move(m);
  }
  add_scoped<v1::CompleteRequest, v1::CompleteResponse>(
      kWorker, "Complete", true,
      [&e](const auto& request, auto& response, const WorkerScope* scope) {
        RemoteWorkers& remote = EngineInternals::remote_workers(e);
        require_leases(remote, scope, request.leases(), "complete a job of");
        add_results(remote.complete(leases_of(request.leases())), response);
      });
  add_scoped<v1::FailRequest, v1::FailResponse>(
      kWorker, "Fail", true, [&e](const auto& request, auto& response, const WorkerScope* scope) {
        if (!request.has_lease())
          throw ValidationError("lease", "lease: give the lease of the job that failed");
        const auto retry_after =
            checked_seconds(request.retry_after_seconds(), "retryAfterSeconds",
                            std::chrono::hours(24 * 30), "0 means the engine's backoff");
        RemoteWorkers& remote = EngineInternals::remote_workers(e);
        const conveyor_lease lease{request.lease().job_id(), request.lease().token()};
        require_lease(remote, scope, lease, "fail a job of");
        // retryAt is when the hold in force ends, bounded by the token's
        // max_backpressure_s: the worker is told the truth.
        const RemoteWorkers::FailOutcome outcome =
            remote.fail(lease, request.error(), retry_after, request.permanent(),
                        request.backpressure(), scope ? scope->max_backpressure : std::nullopt);
        response.set_will_retry(outcome.will_retry);
        if (outcome.will_retry) response.set_retry_at(api::rfc3339(outcome.retry_at_us));
      });
  add_scoped<v1::HeartbeatRequest, v1::HeartbeatResponse>(
      kWorker, "Heartbeat", true,
      [&e](const auto& request, auto& response, const WorkerScope* scope) {
        const auto lease = checked_seconds(request.lease_seconds(), "leaseSeconds",
                                           RemoteWorkers::kMaxLease, "0 means the server's lease");
        RemoteWorkers& remote = EngineInternals::remote_workers(e);
        require_leases(remote, scope, request.leases(), "heartbeat a job of");
        int64_t expires = 0;
        add_results(remote.heartbeat(leases_of(request.leases()), lease, &expires), response);
        response.set_lease_expires_at(api::rfc3339(expires));
      });
  add_scoped<v1::ReleaseRequest, v1::ReleaseResponse>(
      kWorker, "Release", true,
      [&e](const auto& request, auto& response, const WorkerScope* scope) {
        RemoteWorkers& remote = EngineInternals::remote_workers(e);
        require_leases(remote, scope, request.leases(), "release a job of");
        add_results(remote.release(leases_of(request.leases())), response);
      });
  for (const char* name : {"Complete", "Fail", "Heartbeat", "Release"})
    methods_[std::string(kWorker) + name].audited = false;
}

}  // namespace conveyor
