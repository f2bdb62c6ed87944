// A call through the C ABI versus a direct call of the same C++ code.
//
//   Direct:  the backend's C++ method, linked into this binary.
//   CTable:  the loaded plugin's function table (an indirect call into the
//            .so, the SDK adapter's try/catch, an out-parameter, a status).
//   Storage: the core's Storage wrapper, which is what the engine calls (the
//            table call plus a zeroed conveyor_error and a status check).
//
// Twice: on bench-trivial, whose change_marker only bumps a counter (the
// crossing's own cost), and on the SQLite plugin, whose change_marker reads a
// row (the crossing next to real work).
#include "sqlite_storage.hpp"
#include "trivial_storage.hpp"

#include <conveyor/config.hpp>
#include <conveyor/host/plugin_loader.hpp>
#include <conveyor/internal/storage.hpp>

#include <benchmark/benchmark.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace conveyor {
namespace {

// A directory with an SQLite database the plugin has migrated.
class SqliteFile {
 public:
  SqliteFile()
      : dir_(std::filesystem::temp_directory_path() /
             ("conveyor-microbench-abi-" + std::to_string(std::random_device{}()))) {
    std::filesystem::create_directories(dir_);
  }
  ~SqliteFile() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string path() const { return (dir_ / "abi.db").string(); }

 private:
  std::filesystem::path dir_;
};

std::shared_ptr<const Plugin> trivial_plugin() {
  return load_plugin(CONVEYOR_BENCH_TRIVIAL_PLUGIN);
}
std::shared_ptr<const Plugin> sqlite_plugin() {
  return load_plugin(resolve_plugin_path("sqlite", CONVEYOR_BENCH_PLUGIN_DIR));
}

// A handle opened straight through a plugin's table (no Storage wrapper).
class TableHandle {
 public:
  TableHandle(std::shared_ptr<const Plugin> plugin, const std::vector<conveyor_option>& options)
      : plugin_(std::move(plugin)), t_(plugin_->table()) {
    conveyor_error err{};
    if (t_.open(options.data(), options.size(), &handle_, &err) != CONVEYOR_OK ||
        t_.migrate(handle_, &err) != CONVEYOR_OK)
      throw std::runtime_error(err.message);
  }
  ~TableHandle() { t_.close(handle_); }
  const conveyor_storage_plugin& table() const { return t_; }
  conveyor_storage* handle() const { return handle_; }

 private:
  std::shared_ptr<const Plugin> plugin_;
  const conveyor_storage_plugin& t_;
  conveyor_storage* handle_ = nullptr;
};

conveyor_str cs(const std::string& s) { return conveyor_str{s.data(), s.size()}; }

// ---- bench-trivial: the crossing alone ----

void BM_ChangeMarker_Trivial_Direct(benchmark::State& state) {
  auto impl = bench::TrivialStorage::open(sdk::Options(nullptr, 0));
  for (auto _ : state) benchmark::DoNotOptimize(impl->change_marker());
}
BENCHMARK(BM_ChangeMarker_Trivial_Direct);

void BM_ChangeMarker_Trivial_CTable(benchmark::State& state) {
  TableHandle h(trivial_plugin(), {});
  const auto fn = h.table().change_marker;
  conveyor_storage* handle = h.handle();
  for (auto _ : state) {
    int64_t marker = 0;
    conveyor_error err;  // the plugin writes it only on failure
    const conveyor_status st = fn(handle, &marker, &err);
    benchmark::DoNotOptimize(st);
    benchmark::DoNotOptimize(marker);
  }
}
BENCHMARK(BM_ChangeMarker_Trivial_CTable);

void BM_ChangeMarker_Trivial_Storage(benchmark::State& state) {
  auto storage = Storage::open(trivial_plugin(), {});
  for (auto _ : state) benchmark::DoNotOptimize(storage->change_marker());
}
BENCHMARK(BM_ChangeMarker_Trivial_Storage);

// ---- SQLite: the crossing next to a real read ----

void BM_ChangeMarker_Sqlite_Direct(benchmark::State& state) {
  SqliteFile file;
  const std::string key = "path", value = file.path();
  const conveyor_option opt{cs(key), cs(value)};
  auto impl = sqlite::SqliteStorage::open(sdk::Options(&opt, 1));
  impl->migrate();
  for (auto _ : state) benchmark::DoNotOptimize(impl->change_marker());
}
BENCHMARK(BM_ChangeMarker_Sqlite_Direct);

void BM_ChangeMarker_Sqlite_CTable(benchmark::State& state) {
  SqliteFile file;
  const std::string key = "path", value = file.path();
  TableHandle h(sqlite_plugin(), {conveyor_option{cs(key), cs(value)}});
  const auto fn = h.table().change_marker;
  conveyor_storage* handle = h.handle();
  for (auto _ : state) {
    int64_t marker = 0;
    conveyor_error err;
    const conveyor_status st = fn(handle, &marker, &err);
    benchmark::DoNotOptimize(st);
    benchmark::DoNotOptimize(marker);
  }
}
BENCHMARK(BM_ChangeMarker_Sqlite_CTable);

void BM_ChangeMarker_Sqlite_Storage(benchmark::State& state) {
  SqliteFile file;
  auto storage = Storage::open(sqlite_plugin(), {{"path", file.path()}});
  for (auto _ : state) benchmark::DoNotOptimize(storage->change_marker());
}
BENCHMARK(BM_ChangeMarker_Sqlite_Storage);

}  // namespace
}  // namespace conveyor
