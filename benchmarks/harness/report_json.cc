#include "report.hpp"
#include "sample_stats.hpp"

namespace conveyor::bench {
namespace {

using nlohmann::json;

json pickup_json(const PickupSummary& p) {
  return {{"samples", p.samples},
          {"p50_ms", p.p50_ms},
          {"p95_ms", p.p95_ms},
          {"p99_ms", p.p99_ms},
          {"max_ms", p.max_ms}};
}

json reference_json(const ReferenceResult& r) {
  return {{"name", r.name},
          {"description", r.description},
          {"clients", r.clients},
          {"batch", r.batch},
          {"jobs", r.jobs},
          {"runs_jobs_per_sec", r.runs_jobs_per_sec},
          {"median_jobs_per_sec", r.median_jobs_per_sec},
          {"min_jobs_per_sec", min_of(r.runs_jobs_per_sec)},
          {"max_jobs_per_sec", max_of(r.runs_jobs_per_sec)},
          {"runs_database_server_cpu_us_per_job", r.runs_server_cpu_us_per_job},
          {"median_database_server_cpu_us_per_job", median(r.runs_server_cpu_us_per_job)}};
}

json backend_json(const BackendResult& b) {
  json j = {{"label", b.label},
            {"source", b.source},
            {"plugin",
             {{"name", b.plugin_name},
              {"version", b.plugin_version},
              {"kind", b.plugin_kind},
              {"path", b.plugin_path},
              {"capabilities", b.capabilities}}},
            {"storage_per_workload", b.isolation},
            {"database_server_settings", b.server_settings},
            {"errors", b.errors}};
  if (b.enqueue)
    j["enqueue_single"] = {{"jobs", b.enqueue->single_jobs},
                           {"seconds", b.enqueue->single_seconds},
                           {"jobs_per_sec", b.enqueue->single_jobs_per_sec}};
  if (b.drain) {
    json runs = json::array();
    for (const DrainRun& r : b.drain->runs) {
      runs.push_back({{"jobs", r.jobs},
                      {"enqueue_seconds", r.enqueue_seconds},
                      {"enqueue_jobs_per_sec", r.enqueue_jobs_per_sec},
                      {"drain_seconds", r.seconds},
                      {"drain_jobs_per_sec", r.jobs_per_sec},
                      {"cpu_cores_busy", r.cpu_cores}});
      if (r.server_cpu_cores) runs.back()["database_server_cores_busy"] = *r.server_cpu_cores;
      if (r.server_cpu_us_per_job)
        runs.back()["database_server_cpu_us_per_job"] = *r.server_cpu_us_per_job;
    }
    j["enqueue_batched"] = {{"batch", b.drain->enqueue_batch},
                            {"median_jobs_per_sec", b.drain->median_enqueue_jobs_per_sec}};
    j["drain"] = {{"max_workers", b.drain->workers},
                  {"claim_batch_max", b.drain->claim_batch},
                  {"runs", runs},
                  {"median_jobs_per_sec", b.drain->median_jobs_per_sec},
                  {"min_jobs_per_sec", min_of(b.drain->rates())},
                  {"max_jobs_per_sec", max_of(b.drain->rates())}};
    if (const auto cpu = b.drain->median_server_cpu_us_per_job())
      j["drain"]["median_database_server_cpu_us_per_job"] = *cpu;
    if (b.drain->postgres)
      j["postgres_cost"] = {{"wal_bytes_per_job", b.drain->postgres->wal_bytes_per_job},
                            {"dead_tuples_made_per_job", b.drain->postgres->dead_tuples_per_job},
                            {"dead_tuples_peak_sampled", b.drain->postgres->dead_tuples_peak},
                            {"dead_tuples_after_drain", b.drain->postgres->dead_tuples_after}};
  }
  if (!b.references.empty()) {
    json refs = json::array();
    for (const ReferenceResult& r : b.references) refs.push_back(reference_json(r));
    j["references"] = refs;
    if (b.engine_to_reference() > 0) j["engine_to_reference"] = b.engine_to_reference();
  }
  if (!b.latency.empty()) {
    json lat = json::array();
    for (const LatencyResult& l : b.latency)
      lat.push_back({{"producer", l.producer},
                     {"offered_per_sec", l.offered_per_sec},
                     {"seconds", l.seconds},
                     {"samples", l.samples},
                     {"p50_ms", l.p50_ms},
                     {"p95_ms", l.p95_ms},
                     {"p99_ms", l.p99_ms},
                     {"max_ms", l.max_ms}});
    j["pickup_latency"] = lat;
  }
  if (!b.rate.empty()) {
    json rate = json::array();
    for (const RateResult& r : b.rate)
      rate.push_back({{"rate", r.rate},
                      {"burst", r.burst},
                      {"window_s", r.window_s},
                      {"started", r.started},
                      {"achieved_per_sec", r.achieved_per_sec},
                      {"error_pct", r.error_pct},
                      {"overall_per_sec", r.overall_per_sec},
                      {"worst_excess", r.worst_excess},
                      {"first_start_ms", r.first_start_ms},
                      {"within_bound", r.worst_excess <= 0}});
    j["rate_accuracy"] = rate;
  }
  if (b.idle)
    j["idle_queues"] = {{"queues", b.idle->queues},
                        {"seconds", b.idle->seconds},
                        {"cpu_pct_of_one_core", b.idle->cpu_pct_of_core},
                        {"threads_before_engine", b.idle->threads_before},
                        {"threads", b.idle->threads},
                        {"handler_threads", b.idle->worker_threads},
                        {"handler_thread_cap", b.idle->worker_thread_cap},
                        {"claims_per_sec", b.idle->claims_per_sec},
                        {"drained_queue_poll_ms", b.idle->drained_poll_ms}};
  if (!b.steady.empty()) {
    json steady = json::array();
    for (const SteadyResult& s : b.steady) {
      json one = {{"workload", s.variant},
                  {"held_transaction", s.held_transaction},
                  {"jobs", s.jobs},
                  {"offered_per_sec", s.offered_per_sec},
                  {"tick_ms", s.tick_ms},
                  {"enqueued_per_sec", s.enqueued_per_sec},
                  {"seconds", s.seconds},
                  {"jobs_per_sec", s.jobs_per_sec},
                  {"pickup", pickup_json(s.pickup)}};
      if (s.postgres) {
        const SteadyStorage& p = *s.postgres;
        json samples = json::array();
        for (const DeadTupleSample& d : p.samples)
          samples.push_back(
              {{"seconds", d.seconds}, {"completed", d.completed}, {"n_dead_tup", d.dead_tuples}});
        one["postgres"] = {{"n_dead_tup_peak", p.dead_tuples_peak},
                           {"n_dead_tup_final", p.dead_tuples_final},
                           {"relation_bytes_before", p.relation_bytes_before},
                           {"relation_bytes_after", p.relation_bytes_after},
                           {"vacuums", p.vacuums},
                           {"held_xid", p.held_xid},
                           {"n_dead_tup_samples", samples}};
      }
      steady.push_back(one);
    }
    j["steady"] = steady;
  }
  if (!b.many_queues.empty()) {
    json many = json::array();
    for (const ManyQueuesResult& m : b.many_queues)
      many.push_back({{"queues", m.queues},
                      {"jobs_per_queue", m.jobs_per_queue},
                      {"runs_jobs_per_sec", m.runs_jobs_per_sec},
                      {"median_jobs_per_sec", m.median_jobs_per_sec},
                      {"to_single_queue_drain",
                       b.drain && b.drain->median_jobs_per_sec > 0
                           ? json(m.median_jobs_per_sec / b.drain->median_jobs_per_sec)
                           : json(nullptr)}});
    j["many_queues"] = many;
  }
  if (b.slow_claim) {
    const SlowClaimResult& s = *b.slow_claim;
    j["slow_claim"] = {
        {"claim_delay_ms", s.claim_delay_ms},   {"fast_queues", s.fast_queues},
        {"offered_per_sec", s.offered_per_sec}, {"seconds", s.seconds},
        {"pickup_alone", pickup_json(s.alone)}, {"pickup_beside_slow", pickup_json(s.beside_slow)},
        {"slow_claims", s.slow_claims}};
  }
  if (b.keys_noisy) {
    const KeysNoisyResult& n = *b.keys_noisy;
    j["keys_noisy_neighbour"] = {{"max_workers", n.workers},
                                 {"handler_ms", n.handler_ms},
                                 {"big_key_jobs", n.big_jobs},
                                 {"small_keys", n.small_keys},
                                 {"small_jobs_per_key", n.small_jobs_per_key},
                                 {"small_enqueued_after_ms", n.small_after_ms},
                                 {"small_pickup_fair", pickup_json(n.fair)},
                                 {"small_pickup_fifo", pickup_json(n.fifo)},
                                 {"big_key_alone_jobs_per_sec", n.big_alone_jobs_per_sec},
                                 {"big_key_alone_window_s", n.big_alone_window_s}};
  }
  if (!b.keys_accuracy.empty()) {
    json runs = json::array();
    for (const KeysAccuracyRun& k : b.keys_accuracy)
      runs.push_back(
          {{"keys", k.keys},
           {"jobs_per_key", k.jobs_per_key},
           {"key_rate", k.key_rate},
           {"key_burst", k.key_burst},
           {"queue_rate", k.queue_rate},
           {"queue_burst", k.queue_burst},
           {"max_workers", k.workers},
           {"seconds", k.seconds},
           {"started", k.started},
           {"window_from_s", k.window_from_s},
           {"window_to_s", k.window_to_s},
           {"jobs_per_sec", k.jobs_per_sec},
           {"worst_key_excess_from_first_start", k.worst_key_excess},
           {"worst_key", k.worst_key},
           {"worst_key_excess_from_engine_start", k.worst_key_excess_from_start},
           {"queue_worst_excess", k.queue_worst_excess},
           {"jobs_per_key_in_window",
            {{"min", k.key_count_min}, {"median", k.key_count_median}, {"max", k.key_count_max}}},
           {"within_bound", k.worst_key_excess_from_start <= 0 && k.queue_worst_excess <= 0}});
    j["keys_accuracy"] = runs;
  }
  if (b.keys_many) {
    const KeysManyResult& m = *b.keys_many;
    j["keys_many"] = {{"keys", m.keys},
                      {"jobs_per_key", m.jobs_per_key},
                      {"jobs", m.jobs},
                      {"keyed_runs_jobs_per_sec", m.keyed_runs_jobs_per_sec},
                      {"unkeyed_runs_jobs_per_sec", m.unkeyed_runs_jobs_per_sec},
                      {"keyed_jobs_per_sec", m.keyed_jobs_per_sec},
                      {"unkeyed_jobs_per_sec", m.unkeyed_jobs_per_sec},
                      {"keyed_seconds", m.keyed_seconds},
                      {"unkeyed_seconds", m.unkeyed_seconds},
                      {"unkeyed_fifo_runs_jobs_per_sec", m.unkeyed_fifo_runs_jobs_per_sec},
                      {"unkeyed_fifo_jobs_per_sec", m.unkeyed_fifo_jobs_per_sec},
                      {"unkeyed_fifo_seconds", m.unkeyed_fifo_seconds},
                      {"keyed_to_unkeyed", m.ratio()}};
  }
  if (b.keys_idle) {
    auto run = [](const KeysIdleRun& k) {
      json one = {{"drain_seconds", k.drain_seconds},
                  {"rss_bytes_before", k.rss_before},
                  {"rss_bytes_drained", k.rss_drained},
                  {"rss_bytes_purged", k.rss_purged},
                  {"rss_bytes_peak_draining", k.rss_peak},
                  {"storage_bytes_before", k.storage_before},
                  {"storage_bytes_drained", k.storage_drained},
                  {"storage_bytes_purged", k.storage_purged},
                  {"purged_jobs", k.purged}};
      if (k.sqlite_used_before)
        one["sqlite_used_bytes"] = {{"before", *k.sqlite_used_before},
                                    {"drained", *k.sqlite_used_drained},
                                    {"purged", *k.sqlite_used_purged}};
      return one;
    };
    j["keys_idle"] = {{"keys", b.keys_idle->keys},
                      {"storage_measure", b.keys_idle->storage_measure},
                      {"keyed", run(b.keys_idle->keyed)},
                      {"unkeyed", run(b.keys_idle->unkeyed)}};
  }
  if (b.idle && b.idle->server_cpu_pct_of_core)
    j["idle_queues"]["database_server_cpu_pct_of_one_core"] = *b.idle->server_cpu_pct_of_core;
  return j;
}

}  // namespace

json to_json(const BenchReport& r) {
  json backends = json::array();
  for (const BackendResult& b : r.backends) backends.push_back(backend_json(b));
  return {{"tool", "conveyor-bench"},
          {"mode", r.mode},
          {"started_at", r.started_at},
          {"machine",
           {{"cpu", r.machine.cpu},
            {"cores", r.machine.cores},
            {"kernel", r.machine.kernel},
            {"memory_bytes", r.machine.memory_bytes}}},
          {"settings",
           {{"max_workers", r.workers},
            {"claim_batch_max", r.claim_batch},
            {"enqueue_batch", r.enqueue_batch},
            {"drain_jobs", r.drain_jobs},
            {"repeat", r.repeat},
            {"latency_offered_per_sec", r.latency_rate},
            {"latency_seconds", r.latency_seconds},
            {"rate_seconds", r.rate_seconds},
            {"idle_queues", r.idle_queues},
            {"idle_seconds", r.idle_seconds},
            {"steady_jobs", r.steady_jobs},
            {"steady_offered_per_sec", r.steady_rate},
            {"steady_tick_ms", r.steady_tick_ms},
            {"keys_scale", r.keys_scale}}},
          {"rate_invariant_held", r.rate_invariant_held()},
          {"backends", backends}};
}

}  // namespace conveyor::bench
