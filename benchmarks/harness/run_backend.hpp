// Runs every selected workload on one backend, in order, and collects what
// each measured. A workload that fails is recorded as an error and the rest
// still run.
#pragma once

#include "backend.hpp"
#include "bench_options.hpp"
#include "progress.hpp"
#include "results.hpp"

#include <string>

namespace conveyor::bench {

BackendResult run_backend(Backend& backend, const BenchOptions& options, Progress& progress);

// Only the bare-SQL PostgreSQL loop (--pg-reference), as a column of its own.
BackendResult run_postgres_reference_only(const std::string& dsn, const BenchOptions& options,
                                          Progress& progress);

}  // namespace conveyor::bench
