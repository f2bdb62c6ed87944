// In-tree access to what the public Engine API does not offer: the
// effective limits and this process's counters (the server, the CLI and the
// benchmarks show them), and an engine built on a given storage (tests wrap
// storage to inject faults).
#pragma once

#include <conveyor/engine.hpp>
#include <conveyor/internal/limit_resolver.hpp>
#include <conveyor/internal/metrics.hpp>
#include <conveyor/internal/remote_workers.hpp>
#include <conveyor/internal/storage.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace conveyor {

struct EngineInternals {
  static const LimitResolver& limits(const Engine& engine);
  static Metrics& metrics(Engine& engine);
  static const Clock& clock(const Engine& engine);
  // The storage plugin the engine opened (name, capabilities, ABI).
  static const PluginInfo& plugin_info(const Engine& engine);
  // Per queue, the pending kinds no consumer here serves (the last scan).
  static std::map<std::string, std::vector<KindCount>, std::less<>> unserved_kinds(
      const Engine& engine);
  // Runs that scan now (tests; the engine runs it periodically). Throws StorageError.
  static void scan_unserved_kinds(Engine& engine);
  // The worker API's engine side (remote workers claim through it).
  static RemoteWorkers& remote_workers(Engine& engine);
  // Queues held by backpressure now, and when each hold ends (wall us).
  static std::map<std::string, int64_t, std::less<>> backoffs(const Engine& engine);
  // Per keyed queue known to the dispatcher: keys with ready jobs and keys
  // with jobs running here, as its KeyTurns knows them (no storage call).
  static std::map<std::string, QueueKeyCounts, std::less<>> key_counts(const Engine& engine);
  // Jobs of asynchronous handlers started and not yet reported.
  static size_t async_outstanding(const Engine& engine);
  // Worker slots the dispatcher counts as taken (jobs running, and permits
  // reserved for a claim on the slow-claim thread).
  static uint32_t slots_in_use(const Engine& engine);
  // How long a drained queue waits for its next poll now, at most:
  // notified_poll_interval_ms while storage reports due jobs (the pump's
  // channel works), poll_interval_ms otherwise.
  static uint32_t drained_queue_poll_ms(const Engine& engine);
  static std::unique_ptr<Engine> make(Config config, const Clock& clock,
                                      std::shared_ptr<Storage> storage) {
    return std::unique_ptr<Engine>(new Engine(std::move(config), clock, std::move(storage)));
  }
};

}  // namespace conveyor
