// Backend: one storage backend under test (from a --config file or a
// --plugin path) and how each workload gets storage of its own.
//
// Every workload starts on empty storage, so no workload measures another's
// leftovers and the bench never touches jobs it did not make:
//   sqlite                    a fresh database file per workload in the scratch dir;
//   postgres (has a dsn)      a fresh schema conveyor_bench_<workload>, dropped after;
//   anything else             the storage as configured, which must hold no queues
//                             when the bench starts; queues are named per run and
//                             every job a workload leaves unfinished is cancelled.
#pragma once

#include "bench_options.hpp"
#include "results.hpp"

#include <conveyor/config.hpp>
#include <conveyor/host/plugin_loader.hpp>

#include <filesystem>
#include <optional>
#include <string>

namespace conveyor::bench {

enum class Isolation { kSqliteFile, kPostgresSchema, kShared };

class Backend {
 public:
  // Loads the config and the plugin it names (to learn what it is). Throws
  // ConfigError, PluginLoadError.
  static Backend from_config(const std::string& path, const BenchOptions& options,
                             const std::filesystem::path& scratch);
  static Backend from_plugin(const PluginSpec& spec, const BenchOptions& options,
                             const std::filesystem::path& scratch);

  const std::string& label() const { return label_; }
  void set_label(std::string label) { label_ = std::move(label); }
  const PluginInfo& plugin() const { return info_; }
  Isolation isolation() const { return isolation_; }
  bool is_postgres() const { return isolation_ == Isolation::kPostgresSchema; }
  bool is_sqlite() const { return isolation_ == Isolation::kSqliteFile; }
  // The storage option "dsn", if any.
  std::optional<std::string> dsn() const;
  // The schema a workload's storage lives in (PostgreSQL only).
  std::string schema(const std::string& workload) const;
  // A database file in the scratch directory (SQLite references use it too).
  std::filesystem::path scratch_file(const std::string& name) const;

  // The config one workload runs with: the bench's engine settings
  // (max_workers, claim_batch_max, no limits, no [queues.*]) on fresh storage.
  // Throws if shared storage is not empty.
  Config workload_config(const std::string& workload);
  // Deletes the workload's scratch storage (file or schema). Never throws.
  void finish_workload(const std::string& workload) noexcept;
  // A queue name for a workload, unique to this run.
  std::string queue(const std::string& workload) const;
  // A storage option's value from the backend's own config, if set.
  std::optional<std::string> option(const std::string& key) const;

  // The descriptive part of a result: label, plugin, isolation.
  BackendResult describe() const;

 private:
  Backend(Config base, std::string source, const BenchOptions& options,
          const std::filesystem::path& scratch);

  Config base_;
  std::string source_;
  std::string label_;
  PluginInfo info_;
  Isolation isolation_ = Isolation::kShared;
  std::filesystem::path scratch_;
  std::string run_tag_;
  uint32_t workers_, claim_batch_;
  bool shared_checked_ = false;
};

}  // namespace conveyor::bench
