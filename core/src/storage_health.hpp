// StorageHealth: tells a storage outage that may end (a database restarting:
// CONVEYOR_E_UNAVAILABLE, retried for as long as it lasts) from storage that
// is broken for good (a database file removed or overwritten, a schema that
// is not ours: every other error). The engine's storage calls report here;
// once max_failures non-transient failures in a row have spanned at least
// min_span with no success between them, the storage is declared broken:
// fatal() returns the last error and on_fatal runs once, so `conveyor serve`
// can exit 1 instead of retrying forever.
//
// Every failure, transient or not, also counts in the Metrics' storage
// errors (conveyor_storage_errors_total{operation}) when Options name them.
//
// Thread-safe.
#pragma once

#include <conveyor/internal/metrics.hpp>

#include <conveyor/clock.hpp>
#include <conveyor/internal/mutex.hpp>
#include <conveyor/internal/storage.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace conveyor {

class StorageHealth {
 public:
  struct Options {
    uint32_t max_failures = 10;
    std::chrono::milliseconds min_span{5000};
    Metrics* metrics = nullptr;  // where failures are counted, if anywhere
  };
  StorageHealth(const Clock& clock, Options options);

  // Runs once, on the reporting thread, when the storage is declared broken.
  // Set before the engine starts.
  void on_fatal(std::function<void(const std::string& error)> fn) { on_fatal_ = std::move(fn); }

  void succeeded() EXCLUDES(mu_);
  // A storage call failed. Transient errors neither count towards broken
  // storage nor reset (they do count in the metrics).
  void failed(std::string_view operation, const StorageError& error) EXCLUDES(mu_);
  // The error that made the storage broken, if it is.
  std::optional<std::string> fatal() const EXCLUDES(mu_);

 private:
  // Constant after construction (on_fatal_: set before the engine starts).
  const Clock& clock_;
  const Options options_;
  std::function<void(const std::string&)> on_fatal_;

  // Guarded by mu_.
  mutable Mutex mu_;
  SteadyTime first_failure_ GUARDED_BY(mu_){};
  std::optional<std::string> fatal_ GUARDED_BY(mu_);  // set once

  // Atomic: written under mu_, read without it.
  std::atomic<uint32_t> failures_{0};  // non-transient, in a row
};

}  // namespace conveyor
