// A C++ plugin built with the SDK helper whose open() works and whose every
// other method throws: proves the adapter turns exceptions into
// CONVEYOR_E_INTERNAL with the message and never lets one cross the C ABI.
// change_marker throws a non-std type (42) to exercise the catch-all.
#include <conveyor/storage_plugin.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string_view>

namespace {

[[noreturn]] void boom() { throw std::runtime_error("boom from plugin"); }

class ThrowingStorage {
 public:
  static std::unique_ptr<ThrowingStorage> open(const conveyor::sdk::Options& options) {
    options.require_known({});
    return std::make_unique<ThrowingStorage>();
  }
  void migrate() { boom(); }
  void enqueue(std::span<const conveyor_new_job>, std::span<int64_t>) { boom(); }
  uint32_t claim(std::string_view, uint32_t, int64_t, int64_t, int64_t,
                 const conveyor::sdk::JobSink&) {
    boom();
  }
  void complete(std::span<const conveyor_lease>, int64_t, std::span<conveyor_status>) { boom(); }
  void fail(conveyor_lease, std::string_view, int64_t, int64_t) { boom(); }
  void extend_leases(std::span<const conveyor_lease>, int64_t, std::span<conveyor_status>) {
    boom();
  }
  void release(std::span<const conveyor_lease>, int64_t, std::span<conveyor_status>) { boom(); }
  uint32_t rescue_expired(int64_t, uint32_t) { boom(); }
  void cancel(int64_t, int64_t) { boom(); }
  void set_queue_paused(std::string_view, bool, int64_t) { boom(); }
  void queue_stats(int64_t, const conveyor::sdk::QueueStatsSink&) { boom(); }
  void list_queues(const conveyor::sdk::QueueSink&) { boom(); }
  void get_job(int64_t, int64_t, const conveyor::sdk::JobSink&) { boom(); }
  uint64_t purge_finished(int64_t, uint32_t) { boom(); }
  void set_rate_limit(std::string_view, double, uint32_t, int64_t) { boom(); }
  void delete_rate_limit(std::string_view) { boom(); }
  void list_rate_limits(const conveyor::sdk::RateLimitSink&) { boom(); }
  // Not a std::exception: the adapter's catch (...) must handle it.
  int64_t change_marker() { throw 42; }
  // Present, so the helper advertises CONVEYOR_CAP_NOTIFY; throws like the rest.
  void wait_for_notification(int64_t, const conveyor::sdk::NotifySink&) { boom(); }
};

}  // namespace

CONVEYOR_EXPORT_STORAGE_PLUGIN(ThrowingStorage, "throws", "0.0.1", CONVEYOR_KIND_CANONICAL, 0)
