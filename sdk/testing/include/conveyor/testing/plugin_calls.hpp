// Calls into a storage plugin's C function table for a plugin's own unit
// tests (sqlite, postgres, postgres-queue): each wrapper makes one ABI call
// through the host binding (conveyor/host/plugin_binding.hpp),
// checks what the ABI promises about it with GoogleTest EXPECT_* (a broken
// promise fails the test but the test goes on), and hands back plain C++
// copies of what the plugin reported.
//
// Not the conformance suite (sdk/conformance): that judges any plugin through
// the loader; these are conveniences for tests that know their plugin.
#pragma once

#include <conveyor/storage_plugin.h>
#include <conveyor/host/plugin_binding.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace conveyor::plugin_testing {

// Open options as (key, value) pairs, in the order they are passed.
using Opts = std::vector<std::pair<std::string, std::string>>;

// base with each option of extra set: an extra key replaces the base's value,
// a new one is appended.
Opts with_options(Opts base, const Opts& extra);

// A copy of a borrowed ABI string (empty for len == 0, whatever data is).
std::string s(conveyor_str v);
// Borrowed views: literals have static storage; std::string lvalues must
// outlive the call. A temporary std::string would dangle, so it is refused.
inline conveyor_str str(const char* v) { return conveyor_str{v, std::strlen(v)}; }
inline conveyor_str str(const std::string& v) { return conveyor_str{v.data(), v.size()}; }
conveyor_str str(std::string&&) = delete;

// Wall-clock time in microseconds since the Unix epoch.
int64_t wall_us();

// A job as reported through conveyor_job, copied out of the callback (the
// host binding's copy: struct_size and reserved0 as reported).
using JobCopy = host::JobCopy;

// One queue's conveyor_queue_stats.
using StatsCopy = host::StatsCopy;

// One conveyor_rate_limit.
struct LimitCopy {
  std::string queue;
  double rate = 0;
  uint32_t burst = 0;
  int64_t updated_at = 0;
  int32_t scope = CONVEYOR_SCOPE_PROCESS;  // ABI 1.2
};

// One notification delivered by wait_for_notification.
using Notice = host::NotificationCopy;

// Copies j; expects struct_size == sizeof(conveyor_job) and reserved0 == 0.
JobCopy copy_job(const conveyor_job* j);
// The ids of jobs, in order.
std::vector<int64_t> ids_of(const std::vector<JobCopy>& jobs);
// The leases (id, lease_token) of jobs, in order.
std::vector<conveyor_lease> leases_of(const std::vector<JobCopy>& jobs);

// The wrappers over one plugin's function table. A test fixture inherits it
// (next to ::testing::Test), sets api_ in SetUp and calls close_all() in
// TearDown; the test bodies then call enqueue(h, ...), claim(h, ...) and so on.
class PluginCalls {
 public:
  PluginCalls() = default;
  // Closes whatever handle is still open.
  ~PluginCalls();
  PluginCalls(const PluginCalls&) = delete;
  PluginCalls& operator=(const PluginCalls&) = delete;

  // --- handles ---
  // One open call; *out is the caller's to close (it is not tracked). On an
  // error, expects err.code == the status and gives err.message in *message
  // ("" on success; message may be null).
  conveyor_status try_open(const Opts& opts, conveyor_storage** out, std::string* message);
  // Opens with opts and, by default, migrates; expects both to succeed. The
  // handle is tracked: close_store or close_all closes it. nullptr when open
  // failed.
  conveyor_storage* open_tracked(const Opts& opts, bool migrate = true);
  // Closes a tracked handle (asserts that it is one) and stops tracking it.
  void close_store(conveyor_storage* h);
  // Closes every tracked handle.
  void close_all();

  // --- jobs ---
  // Enqueues one job; expects CONVEYOR_OK. Returns its id.
  int64_t enqueue(conveyor_storage* h, const std::string& queue, int32_t priority = 0,
                  int64_t run_at = 0, int32_t max_attempts = 3, const std::string& payload = "{}",
                  const std::string& kind = "noop");
  // Enqueues n "noop" jobs in one call; expects CONVEYOR_OK. Returns their ids.
  std::vector<int64_t> enqueue_many(conveyor_storage* h, const std::string& queue, size_t n,
                                    int64_t run_at = 0);
  // One claim call; expects the status expect and, on success, out_claimed to
  // equal the number of callbacks. Returns the claimed jobs.
  std::vector<JobCopy> claim(conveyor_storage* h, const std::string& queue, uint32_t max,
                             int64_t token, int64_t now, int64_t expires,
                             conveyor_status expect = CONVEYOR_OK);
  // complete / release / extend_leases on a batch; expect the call itself to
  // succeed. Return the per-lease results.
  std::vector<conveyor_status> complete(conveyor_storage* h, const std::vector<conveyor_lease>& l,
                                        int64_t now);
  std::vector<conveyor_status> release(conveyor_storage* h, const std::vector<conveyor_lease>& l,
                                       int64_t now);
  std::vector<conveyor_status> extend(conveyor_storage* h, const std::vector<conveyor_lease>& l,
                                      int64_t expires);
  // One fail call, unchecked: returns its status and err.message in *msg
  // (msg may be null).
  conveyor_status fail(conveyor_storage* h, conveyor_lease l, const std::string& text,
                       int64_t retry_at, int64_t now, std::string* msg = nullptr);
  // One get_job call: expects exactly one callback on success, none on an
  // error. Copies the job to *out (out may be null). Returns the status.
  conveyor_status get(conveyor_storage* h, int64_t id, int64_t now, JobCopy* out);
  // get() that expects CONVEYOR_OK.
  JobCopy job(conveyor_storage* h, int64_t id, int64_t now);

  // --- queues, rate limits, marker, notifications ---
  // queue_stats; expects CONVEYOR_OK and struct_size == sizeof(conveyor_queue_stats).
  std::vector<StatsCopy> stats(conveyor_storage* h, int64_t now);
  // list_rate_limits; expects CONVEYOR_OK and struct_size == sizeof(conveyor_rate_limit).
  std::vector<LimitCopy> limits(conveyor_storage* h);
  // list_queues; expects CONVEYOR_OK. Returns (queue, paused) pairs.
  std::vector<std::pair<std::string, int32_t>> queues(conveyor_storage* h);
  // change_marker; expects CONVEYOR_OK.
  int64_t marker(conveyor_storage* h);
  // swap_shared_state (ABI 1.2; expected < 0 reads); expects CONVEYOR_OK.
  host::PluginBinding::Shared swap_shared(conveyor_storage* h, const std::string& key,
                                          int64_t expected, int64_t new_value);
  // add_shared_state (ABI 1.3); expects CONVEYOR_OK.
  host::PluginBinding::SharedAdded add_shared(conveyor_storage* h, const std::string& key,
                                              int64_t credit, int64_t low, int64_t high,
                                              int64_t unit, uint32_t min_count, uint32_t max_count);
  // set_queue_paused at time 0; expects CONVEYOR_OK. Returns the status.
  conveyor_status pause(conveyor_storage* h, const std::string& q, bool paused);
  // One wait_for_notification call, unchecked: appends what arrived to *out
  // and gives err.message in *message ("" on success; message may be null).
  conveyor_status wait_notify(conveyor_storage* h, int64_t timeout_us, std::vector<Notice>* out,
                              std::string* message = nullptr);

  // Borrowed: the plugin's static function table (set by the fixture).
  const conveyor_storage_plugin* api_ = nullptr;
  // Owned: the handles open_tracked opened and nobody closed yet.
  std::vector<conveyor_storage*> handles_;
};

}  // namespace conveyor::plugin_testing
