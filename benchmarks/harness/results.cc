#include "results.hpp"

namespace conveyor::bench {

const ReferenceResult* BackendResult::reference(const std::string& name) const {
  for (const ReferenceResult& r : references)
    if (r.name == name) return &r;
  return nullptr;
}

const SteadyResult* BackendResult::steady_run(const std::string& variant) const {
  for (const SteadyResult& r : steady)
    if (r.variant == variant) return &r;
  return nullptr;
}

double BackendResult::engine_to_reference() const {
  const ReferenceResult* ref = reference("postgres-claim-complete");
  if (!ref) ref = reference("sqlite-claim-complete");
  if (!ref || !drain || ref->median_jobs_per_sec <= 0) return 0;
  return drain->median_jobs_per_sec / ref->median_jobs_per_sec;
}

bool BenchReport::rate_invariant_held() const {
  for (const BackendResult& b : backends)
    for (const RateResult& r : b.rate)
      if (r.worst_excess > 0) return false;
  return true;
}

}  // namespace conveyor::bench
