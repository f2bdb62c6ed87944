#include "storage_health.hpp"

#include <fmt/format.h>

namespace conveyor {

StorageHealth::StorageHealth(const Clock& clock, Options options)
    : clock_(clock), options_(options) {}

void StorageHealth::succeeded() {
  if (failures_.load(std::memory_order_relaxed) == 0) return;  // the common case: no lock
  MutexLock lock(mu_);
  failures_.store(0, std::memory_order_relaxed);
}

void StorageHealth::failed(std::string_view operation, const StorageError& error) {
  if (options_.metrics)
    options_.metrics->storage_errors(operation_label(operation))
        .fetch_add(1, std::memory_order_relaxed);
  if (error.transient()) return;
  std::string message;
  {
    MutexLock lock(mu_);
    if (fatal_) return;
    const SteadyTime now = clock_.steady_now();
    const uint32_t failures = failures_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (failures == 1) first_failure_ = now;
    if (failures < options_.max_failures || now - first_failure_ < options_.min_span) return;
    fatal_ = fmt::format(
        "{} failed {} times in a row over {} ms, with an error retrying cannot fix: {}", operation,
        failures_,
        std::chrono::duration_cast<std::chrono::milliseconds>(now - first_failure_).count(),
        error.what());
    message = *fatal_;
  }
  if (on_fatal_) on_fatal_(message);
}

std::optional<std::string> StorageHealth::fatal() const {
  MutexLock lock(mu_);
  return fatal_;
}

}  // namespace conveyor
