#include "backend.hpp"

#include "postgres_probe.hpp"

#include <conveyor/internal/storage.hpp>

#include <fmt/format.h>

#include <unistd.h>
#include <chrono>
#include <random>

namespace conveyor::bench {
namespace {

std::string fresh_run_tag() {
  std::mt19937_64 rng{
      std::random_device{}() ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
  return fmt::format("{:06x}", rng() & 0xffffff);
}

bool has_option(const Config& c, const std::string& key) {
  for (const auto& [k, v] : c.storage.options)
    if (k == key) return true;
  return false;
}

void set_option(Config& c, const std::string& key, const std::string& value) {
  for (auto& [k, v] : c.storage.options)
    if (k == key) {
      v = value;
      return;
    }
  c.storage.options.emplace_back(key, value);
}

void remove_sqlite_files(const std::filesystem::path& db) noexcept {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"})
    std::filesystem::remove(db.string() + suffix, ec);
}

}  // namespace

Backend::Backend(Config base, std::string source, const BenchOptions& options,
                 const std::filesystem::path& scratch)
    : base_(std::move(base)),
      source_(std::move(source)),
      scratch_(scratch),
      run_tag_(fresh_run_tag()),
      workers_(options.workers),
      claim_batch_(options.claim_batch) {
  const std::filesystem::path path =
      resolve_plugin_path(base_.storage.plugin, base_.storage.plugin_dir);
  info_ = load_plugin(path)->info();
  // Always load this very file, whatever the working directory later.
  base_.storage.plugin = std::filesystem::absolute(path).string();
  if (info_.name == "sqlite") {
    isolation_ = Isolation::kSqliteFile;
  } else if (has_option(base_, "dsn") && info_.name.find("postgres") != std::string::npos) {
    isolation_ = Isolation::kPostgresSchema;
  }
  label_ = info_.name;
}

Backend Backend::from_config(const std::string& path, const BenchOptions& options,
                             const std::filesystem::path& scratch) {
  Config c = load_config_file(path);
  Backend b(std::move(c), path, options, scratch);
  b.label_ = std::filesystem::path(path).stem().string();
  return b;
}

Backend Backend::from_plugin(const PluginSpec& spec, const BenchOptions& options,
                             const std::filesystem::path& scratch) {
  Config c;
  c.source = "--plugin " + spec.path;
  c.storage.plugin = spec.path;
  c.storage.options = spec.options;
  return Backend(std::move(c), spec.path, options, scratch);
}

std::optional<std::string> Backend::option(const std::string& key) const {
  for (const auto& [k, v] : base_.storage.options)
    if (k == key) return v;
  return std::nullopt;
}

std::optional<std::string> Backend::dsn() const { return option("dsn"); }

std::string Backend::schema(const std::string& workload) const {
  // PostgreSQL identifiers unquoted: a-z, 0-9, _.
  std::string s = "conveyor_bench_" + workload;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

std::filesystem::path Backend::scratch_file(const std::string& name) const {
  std::string safe = label_ + "-" + name;
  for (char& ch : safe)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') ch = '_';
  return scratch_ / (safe + ".db");
}

std::string Backend::queue(const std::string& workload) const {
  return "bench-" + run_tag_ + "-" + workload;
}

Config Backend::workload_config(const std::string& workload) {
  Config c = base_;
  c.engine.max_workers = workers_;
  c.engine.claim_batch_max = claim_batch_;
  c.engine.worker_threads = std::max(c.engine.worker_threads, workers_);
  c.engine.rate_limit_enabled = true;
  c.engine.rate_limit_rate_per_sec = 0;
  c.engine.rate_limit_burst = 0;
  c.queues.clear();
  c.server = ServerConfig{};
  switch (isolation_) {
    case Isolation::kSqliteFile: {
      const auto db = scratch_file(workload);
      remove_sqlite_files(db);
      set_option(c, "path", db.string());
      break;
    }
    case Isolation::kPostgresSchema:
      PostgresProbe(*dsn()).drop_schema(schema(workload));
      set_option(c, "schema", schema(workload));
      break;
    case Isolation::kShared:
      if (!shared_checked_) {
        // The engine works every queue it finds: refuse storage with jobs of
        // someone else's rather than run (and fail) them.
        auto queues = open_storage(c.storage)->list_queues();
        if (!queues.empty())
          throw std::runtime_error(fmt::format(
              "storage of backend '{}' already has {} queue(s) (first: '{}'); conveyor-bench "
              "would run their jobs. Point its options at empty storage.",
              label_, queues.size(), queues.front().first));
        shared_checked_ = true;
      }
      break;
  }
  return c;
}

void Backend::finish_workload(const std::string& workload) noexcept {
  try {
    if (isolation_ == Isolation::kSqliteFile) remove_sqlite_files(scratch_file(workload));
    if (isolation_ == Isolation::kPostgresSchema)
      PostgresProbe(*dsn()).drop_schema(schema(workload));
  } catch (const std::exception&) {
    // Scratch left behind is harmless; the next run drops it first.
  }
}

BackendResult Backend::describe() const {
  BackendResult r;
  r.label = label_;
  r.source = source_;
  r.plugin_name = info_.name;
  r.plugin_version = info_.version;
  r.plugin_kind = kind_name(info_.kind);
  r.plugin_path = info_.path.string();
  r.capabilities = capability_names(info_.capabilities);
  switch (isolation_) {
    case Isolation::kSqliteFile:
      r.isolation = "fresh SQLite file per workload";
      break;
    case Isolation::kPostgresSchema:
      r.isolation = "fresh schema conveyor_bench_<workload>";
      break;
    case Isolation::kShared:
      r.isolation = "storage as configured (was empty)";
      break;
  }
  return r;
}

}  // namespace conveyor::bench
