#include "run_backend.hpp"

#include "postgres_probe.hpp"
#include "workloads.hpp"

#include <fmt/format.h>

#include <cctype>

namespace conveyor::bench {
namespace {

template <typename Fn>
void attempt(BackendResult& result, Progress& progress, const std::string& workload, Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    // One line per error: drivers' messages often span several.
    std::string message = e.what();
    while (!message.empty() && std::isspace(static_cast<unsigned char>(message.back())))
      message.pop_back();
    for (char& c : message)
      if (c == '\n' || c == '\t') c = ' ';
    result.errors.push_back(workload + ": " + message);
    progress.line("{} FAILED: {}", workload, message);
  }
}

}  // namespace

BackendResult run_backend(Backend& backend, const BenchOptions& options, Progress& progress) {
  BackendResult r = backend.describe();
  auto scope = [&](const std::string& w) { progress.set_scope(backend.label() + " " + w); };
  progress.set_scope(backend.label());
  progress.line("{} {} ({}), {}; storage: {}", r.plugin_name, r.plugin_version, r.plugin_kind,
                r.plugin_path, r.isolation);

  if (options.runs("enqueue")) {
    scope("enqueue");
    attempt(r, progress, "enqueue", [&] { r.enqueue = run_enqueue(backend, options, progress); });
  }
  if (backend.is_postgres()) {
    attempt(r, progress, "settings", [&] {
      r.server_settings = PostgresProbe(*backend.dsn()).durability_settings();
      progress.line("database server settings: {}", r.server_settings);
    });
  }
  auto references = [&](const BenchOptions& o) {
    std::vector<ReferenceResult> out;
    if (backend.is_sqlite())
      out = run_sqlite_reference(backend.scratch_file("reference"),
                                 backend.option("synchronous").value_or("NORMAL"), o, progress);
    else if (backend.is_postgres())
      out.push_back(run_postgres_reference(*backend.dsn(), o, progress));
    return out;
  };
  if (options.runs("drain") && options.runs("reference") && options.repeat > 1) {
    // Interleaved (drain, reference, drain, ...) so that a machine that gets
    // busier or quieter during the run moves both figures alike, and their
    // ratio stays meaningful.
    BenchOptions once = options;
    once.repeat = 1;
    DrainResult drain;
    for (uint32_t i = 1; i <= options.repeat; ++i) {
      scope(fmt::format("drain {}/{}", i, options.repeat));
      attempt(r, progress, "drain", [&] {
        const DrainResult d = run_drain(backend, once, progress);
        if (drain.runs.empty())
          drain = d;
        else
          append_runs(drain, d);
      });
      scope(fmt::format("reference {}/{}", i, options.repeat));
      attempt(r, progress, "reference", [&] { append_runs(r.references, references(once)); });
    }
    if (!drain.runs.empty()) r.drain = drain;
  } else {
    if (options.runs("drain")) {
      scope("drain");
      attempt(r, progress, "drain", [&] { r.drain = run_drain(backend, options, progress); });
    }
    if (options.runs("reference")) {
      scope("reference");
      attempt(r, progress, "reference", [&] { r.references = references(options); });
    }
  }
  if (options.runs("latency")) {
    scope("latency");
    attempt(r, progress, "latency", [&] { r.latency = run_latency(backend, options, progress); });
  }
  if (options.runs("rate")) {
    scope("rate");
    attempt(r, progress, "rate", [&] { r.rate = run_rate_accuracy(backend, options, progress); });
  }
  if (options.runs("idle")) {
    scope("idle");
    attempt(r, progress, "idle", [&] { r.idle = run_idle_queues(backend, options, progress); });
  }
  if (options.runs("many-queues")) {
    scope("many-queues");
    attempt(r, progress, "many-queues",
            [&] { r.many_queues = run_many_queues(backend, options, progress); });
  }
  if (options.runs("slow-claim")) {
    scope("slow-claim");
    attempt(r, progress, "slow-claim",
            [&] { r.slow_claim = run_slow_claim(backend, options, progress); });
  }
  for (const bool held : {false, true}) {
    const std::string workload = held ? "steady-held-txn" : "steady";
    if (!options.runs(workload)) continue;
    scope(workload);
    attempt(r, progress, workload,
            [&] { r.steady.push_back(run_steady(backend, options, progress, held)); });
  }
  if (options.runs("keys-noisy")) {
    scope("keys-noisy");
    attempt(r, progress, "keys-noisy",
            [&] { r.keys_noisy = run_keys_noisy(backend, options, progress); });
  }
  if (options.runs("keys-accuracy")) {
    scope("keys-accuracy");
    attempt(r, progress, "keys-accuracy",
            [&] { r.keys_accuracy = run_keys_accuracy(backend, options, progress); });
  }
  if (options.runs("keys-many")) {
    scope("keys-many");
    attempt(r, progress, "keys-many",
            [&] { r.keys_many = run_keys_many(backend, options, progress); });
  }
  if (options.runs("keys-idle")) {
    scope("keys-idle");
    attempt(r, progress, "keys-idle",
            [&] { r.keys_idle = run_keys_idle(backend, options, progress); });
  }
  progress.set_scope("");
  return r;
}

BackendResult run_postgres_reference_only(const std::string& dsn, const BenchOptions& options,
                                          Progress& progress) {
  BackendResult r;
  r.label = "postgres bare SQL";
  r.source = describe_dsn(dsn);
  r.plugin_name = "(none: bare SQL)";
  r.isolation = "schema conveyor_bench_ref";
  attempt(r, progress, "settings",
          [&] { r.server_settings = PostgresProbe(dsn).durability_settings(); });
  progress.set_scope("postgres reference");
  attempt(r, progress, "reference",
          [&] { r.references.push_back(run_postgres_reference(dsn, options, progress)); });
  progress.set_scope("");
  return r;
}

}  // namespace conveyor::bench
