// conveyor-bench: runs the same workloads, measured the same way, on every
// backend given, in one process on one machine, and writes a table (stdout),
// bench-results.json and bench-results.svg (--out, default the current
// directory). Progress goes to stderr.
//
//   conveyor-bench --config a.toml --config b.toml [--quick] [--out DIR]
//   conveyor-bench --plugin ./libmy-backend.so --option dsn=... [--quick]
//
// Exit codes: 0 all measured; 1 a workload failed (see the errors); 2 usage
// or config error; 3 a rate-limited queue started more than burst + rate * t
// jobs (the limiter's contract broken).
#include "backend.hpp"
#include "bench_options.hpp"
#include "process_stats.hpp"
#include "report.hpp"
#include "run_backend.hpp"

#include <conveyor/config.hpp>
#include <conveyor/host/plugin_loader.hpp>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>

namespace {

using namespace conveyor::bench;

int fail(int code, const std::string& message) {
  std::cerr << "conveyor-bench: " << message << "\n";
  return code;
}

void setup_logging() {
  auto logger = spdlog::stderr_color_mt("conveyor");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::level::level_enum level = spdlog::level::warn;
  if (const char* env = std::getenv("CONVEYOR_LOG_LEVEL")) level = spdlog::level::from_str(env);
  spdlog::set_level(level);
}

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::filesystem::path make_scratch(const BenchOptions& o) {
  if (o.scratch_dir) {
    std::filesystem::create_directories(*o.scratch_dir);
    return *o.scratch_dir;
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "conveyor-bench-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr)
    throw std::runtime_error("cannot create a scratch directory in " +
                             std::filesystem::temp_directory_path().string());
  return tmpl;
}

// Removes a scratch directory the bench created, on every way out of main.
struct ScratchCleanup {
  std::filesystem::path path;
  bool remove = false;
  ~ScratchCleanup() {
    std::error_code ec;
    if (remove) std::filesystem::remove_all(path, ec);
  }
};

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) throw std::runtime_error("cannot write " + path.string());
}

}  // namespace

int main(int argc, char** argv) {
  setup_logging();
  std::optional<BenchOptions> parsed;
  try {
    parsed = parse_bench_options(argc, argv);
  } catch (const UsageError& e) {
    return fail(2, std::string(e.what()) + " (see --help)");
  }
  if (!parsed) return 0;
  const BenchOptions& o = *parsed;

  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (!std::filesystem::is_directory(o.out_dir))
    return fail(2, "--out " + o.out_dir.string() + ": not a directory and cannot be created");

  std::filesystem::path scratch;
  try {
    scratch = make_scratch(o);
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
  const ScratchCleanup cleanup{scratch, !o.keep_scratch && !o.scratch_dir};
  Progress progress;

  std::vector<Backend> backends;
  try {
    for (const std::string& path : o.configs)
      backends.push_back(Backend::from_config(path, o, scratch));
    for (const PluginSpec& spec : o.plugins)
      backends.push_back(Backend::from_plugin(spec, o, scratch));
  } catch (const conveyor::ConfigError& e) {
    return fail(2, e.what());
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
  // Labels name the table's columns: make them unique.
  std::map<std::string, int> seen;
  for (Backend& b : backends)
    if (int n = ++seen[b.label()]; n > 1) b.set_label(b.label() + "#" + std::to_string(n));

  BenchReport report;
  report.mode = o.quick ? "quick" : "full";
  report.started_at = now_iso8601();
  report.machine = machine_info();
  report.workers = o.workers;
  report.claim_batch = o.claim_batch;
  report.enqueue_batch = o.enqueue_batch;
  report.repeat = o.repeat;
  report.drain_jobs = o.drain_jobs;
  report.latency_rate = o.latency_rate;
  report.latency_seconds = o.latency_seconds;
  report.rate_seconds = o.rate_seconds;
  report.idle_seconds = o.idle_seconds;
  report.idle_queues = o.idle_queues;
  report.steady_jobs = o.steady_jobs;
  report.steady_rate = o.steady_rate;
  report.steady_tick_ms = o.steady_tick_ms;
  report.keys_scale = o.keys_scale;
  progress.line("{} mode, {} backend(s), scratch {}", report.mode, backends.size(),
                scratch.string());

  for (Backend& b : backends) report.backends.push_back(run_backend(b, o, progress));
  if (o.pg_reference_dsn)
    report.backends.push_back(run_postgres_reference_only(*o.pg_reference_dsn, o, progress));

  std::cout << "\n" << render_table(report) << "\n" << render_targets(report) << std::flush;
  const auto json_path = o.out_dir / "bench-results.json";
  const auto svg_path = o.out_dir / "bench-results.svg";
  int code = 0;
  try {
    write_file(json_path, to_json(report).dump(2) + "\n");
    write_file(svg_path, render_svg(report));
    progress.line("wrote {} and {}", json_path.string(), svg_path.string());
  } catch (const std::exception& e) {
    fail(1, e.what());
    code = 1;
  }

  bool errors = false;
  for (const BackendResult& b : report.backends) errors = errors || !b.errors.empty();
  if (!report.rate_invariant_held())
    return fail(3, "a rate-limited queue started more jobs than burst + rate * t (see the table)");
  if (errors) return fail(1, "some workloads failed (see the errors above)");
  return code;
}
