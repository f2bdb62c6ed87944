// TrivialStorage: a storage "backend" whose change_marker only bumps a
// counter and whose other operations are unsupported. Compiled twice: into
// libconveyor-bench-trivial.so (called through the C ABI) and into the
// micro-benchmark (called directly), so the difference between the two calls
// is the cost of crossing the ABI and nothing else.
#pragma once

#include <conveyor/storage_plugin.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace conveyor::bench {

class TrivialStorage {
 public:
  static std::unique_ptr<TrivialStorage> open(const sdk::Options& options) {
    options.require_known({});
    return std::make_unique<TrivialStorage>();
  }
  void migrate() {}
  // The operation measured: as cheap as a real operation can be while still
  // doing something the optimiser cannot remove.
  int64_t change_marker() { return marker_.fetch_add(1, std::memory_order_relaxed); }

  void enqueue(std::span<const conveyor_new_job>, std::span<int64_t>) { unsupported(); }
  uint32_t claim(std::string_view, uint32_t, int64_t, int64_t, int64_t, const sdk::JobSink&) {
    unsupported();
  }
  void complete(std::span<const conveyor_lease>, int64_t, std::span<conveyor_status>) {
    unsupported();
  }
  void fail(conveyor_lease, std::string_view, int64_t, int64_t) { unsupported(); }
  void extend_leases(std::span<const conveyor_lease>, int64_t, std::span<conveyor_status>) {
    unsupported();
  }
  void release(std::span<const conveyor_lease>, int64_t, std::span<conveyor_status>) {
    unsupported();
  }
  uint32_t rescue_expired(int64_t, uint32_t) { unsupported(); }
  void cancel(int64_t, int64_t) { unsupported(); }
  void set_queue_paused(std::string_view, bool, int64_t) { unsupported(); }
  void queue_stats(int64_t, const sdk::QueueStatsSink&) { unsupported(); }
  void list_queues(const sdk::QueueSink&) {}
  void get_job(int64_t, int64_t, const sdk::JobSink&) { unsupported(); }
  uint64_t purge_finished(int64_t, uint32_t) { return 0; }
  void set_rate_limit(std::string_view, double, uint32_t, int64_t) { unsupported(); }
  void delete_rate_limit(std::string_view) { unsupported(); }
  void list_rate_limits(const sdk::RateLimitSink&) {}

 private:
  [[noreturn]] static void unsupported() {
    throw sdk::Error(CONVEYOR_E_UNSUPPORTED, "bench-trivial stores nothing");
  }
  std::atomic<int64_t> marker_{0};
};

}  // namespace conveyor::bench
