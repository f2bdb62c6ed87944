#include "results.hpp"

#include "sample_stats.hpp"

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

std::vector<double> DrainResult::rates() const {
  std::vector<double> out;
  for (const DrainRun& r : runs) out.push_back(r.jobs_per_sec);
  return out;
}

std::optional<double> DrainResult::median_server_cpu_us_per_job() const {
  std::vector<double> cpu;
  for (const DrainRun& r : runs)
    if (r.server_cpu_us_per_job) cpu.push_back(*r.server_cpu_us_per_job);
  if (cpu.empty()) return std::nullopt;
  return median(cpu);
}

void append_runs(DrainResult& into, const DrainResult& more) {
  into.runs.insert(into.runs.end(), more.runs.begin(), more.runs.end());
  std::vector<double> enqueue_rates;
  for (const DrainRun& r : into.runs) enqueue_rates.push_back(r.enqueue_jobs_per_sec);
  into.median_jobs_per_sec = median(into.rates());
  into.median_enqueue_jobs_per_sec = median(enqueue_rates);
  if (more.postgres) into.postgres = more.postgres;
}

void append_runs(std::vector<ReferenceResult>& into, const std::vector<ReferenceResult>& more) {
  for (const ReferenceResult& m : more) {
    ReferenceResult* r = nullptr;
    for (ReferenceResult& existing : into)
      if (existing.name == m.name) r = &existing;
    if (!r) {
      into.push_back(m);
      continue;
    }
    r->runs_jobs_per_sec.insert(r->runs_jobs_per_sec.end(), m.runs_jobs_per_sec.begin(),
                                m.runs_jobs_per_sec.end());
    r->runs_server_cpu_us_per_job.insert(r->runs_server_cpu_us_per_job.end(),
                                         m.runs_server_cpu_us_per_job.begin(),
                                         m.runs_server_cpu_us_per_job.end());
    r->median_jobs_per_sec = median(r->runs_jobs_per_sec);
  }
}

bool BenchReport::rate_invariant_held() const {
  for (const BackendResult& b : backends)
    for (const RateResult& r : b.rate)
      if (r.worst_excess > 0) return false;
  for (const BackendResult& b : backends)
    for (const KeysAccuracyRun& k : b.keys_accuracy)
      if (k.worst_key_excess_from_start > 0 || k.queue_worst_excess > 0) return false;
  return true;
}

}  // namespace conveyor::bench
