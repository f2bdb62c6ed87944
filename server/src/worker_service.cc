// WorkerService (proto/conveyor/v1/worker.proto) over the engine's
// RemoteWorkers: the messages in and out, the durations checked.
#include "api_service.hpp"

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
    out->set_code(r.status == CONVEYOR_OK ? "ok" : "failed_precondition");
    out->set_message(r.message);
  }
}

double seconds_of(std::chrono::milliseconds d) { return static_cast<double>(d.count()) / 1000.0; }

}  // namespace

void ApiService::add_worker_methods() {
  Engine& e = engine_;
  {
    Method m;
    m.mutates = true;
    m.audited = false;
    m.request_prototype = &v1::ClaimRequest::default_instance();
    m.response_prototype = &v1::ClaimResponse::default_instance();
    m.call_async = [&e](const Message& message, Done done) -> Cancel {
      const auto& request = static_cast<const v1::ClaimRequest&>(message);
      RemoteWorkers::ClaimRequest claim;
      for (const v1::QueueWeight& q : request.queues())
        claim.queues.push_back({q.queue(), q.weight()});
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
  add<v1::CompleteRequest, v1::CompleteResponse>(
      kWorker, "Complete", true, [&e](const auto& request, auto& response) {
        add_results(EngineInternals::remote_workers(e).complete(leases_of(request.leases())),
                    response);
      });
  add<v1::FailRequest, v1::FailResponse>(
      kWorker, "Fail", true, [&e](const auto& request, auto& response) {
        if (!request.has_lease())
          throw ValidationError("lease", "lease: give the lease of the job that failed");
        const auto retry_after =
            checked_seconds(request.retry_after_seconds(), "retryAfterSeconds",
                            std::chrono::hours(24 * 30), "0 means the engine's backoff");
        const RemoteWorkers::FailOutcome outcome = EngineInternals::remote_workers(e).fail(
            {request.lease().job_id(), request.lease().token()}, request.error(), retry_after,
            request.permanent(), request.backpressure());
        response.set_will_retry(outcome.will_retry);
        if (outcome.will_retry) response.set_retry_at(api::rfc3339(outcome.retry_at_us));
      });
  add<v1::HeartbeatRequest, v1::HeartbeatResponse>(
      kWorker, "Heartbeat", true, [&e](const auto& request, auto& response) {
        const auto lease = checked_seconds(request.lease_seconds(), "leaseSeconds",
                                           RemoteWorkers::kMaxLease, "0 means the server's lease");
        int64_t expires = 0;
        add_results(EngineInternals::remote_workers(e).heartbeat(leases_of(request.leases()), lease,
                                                                 &expires),
                    response);
        response.set_lease_expires_at(api::rfc3339(expires));
      });
  add<v1::ReleaseRequest, v1::ReleaseResponse>(
      kWorker, "Release", true, [&e](const auto& request, auto& response) {
        add_results(EngineInternals::remote_workers(e).release(leases_of(request.leases())),
                    response);
      });
  for (const char* name : {"Complete", "Fail", "Heartbeat", "Release"})
    methods_[std::string(kWorker) + name].audited = false;
}

}  // namespace conveyor
