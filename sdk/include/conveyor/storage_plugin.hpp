// conveyor/storage_plugin.hpp: a header-only C++ helper for writing storage
// plugins (the hourglass pattern). A plugin author writes a C++ class and
// exports it with CONVEYOR_EXPORT_STORAGE_PLUGIN; the adapter below turns
// every call into the C ABI of storage_plugin.h and every exception into a
// status code, so no exception ever crosses the boundary.
//
// The class Impl must provide (errors are thrown as conveyor::sdk::Error;
// any other exception becomes CONVEYOR_E_INTERNAL):
//
//   static std::unique_ptr<Impl> open(const Options& options);
//   void migrate();
//   void enqueue(std::span<const conveyor_new_job> jobs, std::span<int64_t> out_ids);
//   uint32_t claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token,
//                  int64_t now_us, int64_t lease_expires_us, const JobSink& sink);
//   void complete(std::span<const conveyor_lease> leases, int64_t now_us,
//                 std::span<conveyor_status> results);
//   void fail(conveyor_lease lease, std::string_view error_text,
//             int64_t retry_at_us, int64_t now_us);       // LEASE_LOST: throw
//   void extend_leases(std::span<const conveyor_lease> leases, int64_t expires_us,
//                      std::span<conveyor_status> results);
//   void release(std::span<const conveyor_lease> leases, int64_t now_us,
//                std::span<conveyor_status> results);
//   uint32_t rescue_expired(int64_t now_us, uint32_t max_jobs);
//   void cancel(int64_t job_id, int64_t now_us);             // NOT_FOUND: throw
//   void set_queue_paused(std::string_view queue, bool paused, int64_t now_us);
//   void queue_stats(int64_t now_us, const QueueStatsSink& sink);
//   void list_queues(const QueueSink& sink);   // sink(name, paused)
//   void get_job(int64_t job_id, int64_t now_us, const JobSink& sink);  // NOT_FOUND: throw
//   uint64_t purge_finished(int64_t finalized_before_us, uint32_t max_jobs);
//   void set_rate_limit(std::string_view queue, double rate, uint32_t burst, int64_t now_us);
//   void delete_rate_limit(std::string_view queue);          // NOT_FOUND: throw
//   void list_rate_limits(const RateLimitSink& sink);
//   int64_t change_marker();
// and optionally (advertise CONVEYOR_CAP_NOTIFY when present):
//   void wait_for_notification(int64_t timeout_us, const NotifySink& sink);
// and optionally the ABI 1.1 slots (each left NULL when absent; the adapter
// checks the arguments storage_plugin.h says are invalid before calling):
//   void enqueue_at(std::span<const conveyor_new_job> jobs, int64_t now_us,
//                   std::span<int64_t> out_ids);                    // enqueue_v2
//   uint32_t claim_kinds(std::string_view queue, std::span<const std::string_view> kinds,
//                        uint32_t max_jobs, int64_t lease_token, int64_t now_us,
//                        int64_t lease_expires_us, const JobSink& sink);  // kinds non-empty
//   uint32_t list_jobs(std::string_view queue, std::span<const int32_t> states,
//                      std::string_view kind, int64_t after_id, uint32_t limit,
//                      int64_t now_us, const JobSink& sink);
//   void retry_jobs(std::span<const int64_t> ids, int64_t now_us,
//                   std::span<conveyor_status> results);
//   void delete_jobs(std::span<const int64_t> ids, std::span<conveyor_status> results);
//   void job_counts(int64_t now_us, const QueueStatsSink& sink);
//   uint32_t rescue_expired_v2(int64_t now_us, uint32_t max_jobs,
//                              const JobSink& sink);  // each rescued job, after
// (conveyor_queue_stats' 1.1 field oldest_pending_run_at_us is the plugin's to
// fill in queue_stats and job_counts.)
// and optionally the ABI 1.2 slots (the adapter checks key length, NULL
// out-parameters, scope and cost ranges before calling):
//   SharedRecord swap_shared_state(std::string_view key, int64_t expected_version,
//                                  int64_t new_value);    // key 1..CONVEYOR_SHARED_KEY_MAX
//   void set_rate_limit_scoped(std::string_view queue, double rate, uint32_t burst,
//                              int32_t scope, int64_t now_us);   // set_rate_limit_v2
//   void enqueue_costed(std::span<const conveyor_new_job_v2> jobs, int64_t now_us,
//                       std::span<int64_t> out_ids);          // enqueue_v3, costs checked
// and optionally the ABI 1.3 slot (the adapter checks every range first;
// apply_shared_add below is the arithmetic, for a plugin that reads the
// record, computes and writes it back inside one atomic step):
//   SharedAddResult add_shared_state(std::string_view key, const SharedAdd& add);
// (conveyor_job.cost and conveyor_rate_limit.scope are the plugin's to fill:
// OwnedJob::cost, OwnedRateLimit::scope.)
// and optionally the ABI 1.4 slots (job keys; the adapter checks key
// lengths, duplicate keys, NULL arrays and the ranges first):
//   void enqueue_keyed(std::span<const conveyor_new_job_v3> jobs, int64_t now_us,
//                      std::span<int64_t> out_ids);          // enqueue_v4, costs and keys checked
//   uint32_t claim_keys(std::string_view queue, std::span<const std::string_view> kinds,
//                       std::span<const KeyClaim> keys, int64_t lease_token, int64_t now_us,
//                       int64_t lease_expires_us, const JobSink& sink);  // kinds may be empty
//   uint32_t list_ready_keys(std::string_view queue, std::optional<std::string_view> after_key,
//                            uint32_t limit, uint32_t count_limit, int64_t now_us,
//                            const ReadyKeySink& sink);
// (conveyor_job.key is the plugin's to fill: OwnedJob::key.)
// and optionally the ABI 1.5 slots (settings of keys; the adapter checks
// every field's range, the target and the key's length first, so the plugin
// sees a valid KeySetting with only the fields named in fields filled):
//   void set_key_setting(const KeySetting& setting, int64_t now_us);
//   bool delete_key_setting(std::string_view queue, int32_t target, std::string_view key,
//                           uint32_t fields);                // any of them was set
//   void list_key_settings(const KeySettingSink& sink);
//   uint32_t delete_shared_states(std::string_view prefix, int64_t value_below, uint32_t limit);
//   void add_shared_states(std::span<const KeyedAdd> adds,
//                          std::span<SharedAddResult> out);  // each add checked, keys distinct
// and optionally the ABI 1.6 slot (a job's own timeout; the adapter checks
// costs, keys and timeout ranges first):
//   void enqueue_timed(std::span<const conveyor_new_job_v4> jobs, int64_t now_us,
//                      std::span<int64_t> out_ids);          // enqueue_v5
// (conveyor_job.started_at_us and timeout_ms are the plugin's to fill:
// OwnedJob::started_at, OwnedJob::timeout_ms.)
//
// Threading is as the C header says: every method but the destructor may be
// called concurrently. The host never calls the object from inside one of its
// sinks (storage_plugin.h "Callbacks"), so a method may hold its own lock
// while it calls a sink. Batches have no fixed upper bound ("Batches"); when
// complete, extend_leases or release throws, the results are not read.
#ifndef CONVEYOR_STORAGE_PLUGIN_HPP
#define CONVEYOR_STORAGE_PLUGIN_HPP

#include <conveyor/storage_plugin.h>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor::sdk {

// A failure with a status code; the adapter hands code and message to the host.
class Error : public std::runtime_error {
 public:
  Error(conveyor_status code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  conveyor_status code() const noexcept { return code_; }

 private:
  conveyor_status code_;
};

inline conveyor_str str(std::string_view s) noexcept { return conveyor_str{s.data(), s.size()}; }
inline std::string_view view(conveyor_str s) noexcept {
  return s.len == 0 ? std::string_view{} : std::string_view{s.data, s.len};
}

// The [storage.options] key/values, with checks a plugin wants on open.
class Options {
 public:
  Options(const conveyor_option* options, size_t n) {
    for (size_t i = 0; i < n; ++i)
      entries_.emplace_back(std::string(view(options[i].key)), std::string(view(options[i].value)));
  }
  // The value of key, or fallback when absent.
  std::string get(std::string_view key, std::string_view fallback = {}) const {
    for (const auto& [k, v] : entries_)
      if (k == key) return v;
    return std::string(fallback);
  }
  bool has(std::string_view key) const {
    for (const auto& [k, v] : entries_)
      if (k == key) return true;
    return false;
  }
  // Throws CONVEYOR_E_INVALID naming the first key not in known.
  void require_known(std::initializer_list<std::string_view> known) const {
    for (const auto& [k, v] : entries_) {
      bool ok = false;
      for (auto name : known) ok = ok || name == k;
      if (!ok) {
        std::string list;
        for (auto name : known) list += (list.empty() ? "" : ", ") + std::string(name);
        throw Error(CONVEYOR_E_INVALID, "unknown storage option '" + k +
                                            "' (known: " + (list.empty() ? "none" : list) + ")");
      }
    }
  }
  const std::vector<std::pair<std::string, std::string>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, std::string>> entries_;
};

// A borrowed C callback plus its context, callable from C++.
template <typename T, typename Fn>
class Sink {
 public:
  Sink(Fn fn, void* ctx) : fn_(fn), ctx_(ctx) {}
  void operator()(const T& value) const { fn_(ctx_, &value); }

 private:
  Fn fn_;
  void* ctx_;
};
using JobSink = Sink<conveyor_job, conveyor_job_fn>;
using QueueStatsSink = Sink<conveyor_queue_stats, conveyor_queue_stats_fn>;
using RateLimitSink = Sink<conveyor_rate_limit, conveyor_rate_limit_fn>;
using ReadyKeySink = Sink<conveyor_ready_key, conveyor_ready_key_fn>;
using KeySettingSink = Sink<conveyor_key_setting, conveyor_key_setting_fn>;

// One key's share of a claim_keys call (ABI 1.4), as the adapter hands it to
// the plugin: the key is borrowed from the host's array for the call.
struct KeyClaim {
  std::string_view key;
  uint32_t max_jobs = 0;
};

// A key with ready jobs copied out of a result (list_ready_keys), reported
// (view()) after the read has ended. The view borrows key.
struct OwnedReadyKey {
  std::string key;
  int64_t ready = 0;

  conveyor_ready_key view() const noexcept {
    conveyor_ready_key k{};
    k.struct_size = sizeof(conveyor_ready_key);
    k.key = str(key);
    k.ready = ready;
    return k;
  }
};

// A job with its own strings. A plugin copies rows into these inside a
// transaction, ends it, then hands view() to a JobSink (so a host callback
// never runs while the plugin holds locks); view() borrows from this object.
// The host copies what a plugin reported into the same type
// (conveyor/host/plugin_binding.hpp), struct_size and reserved0 included.
struct OwnedJob {
  int64_t id = 0;
  int32_t state = 0;
  std::string queue;
  std::string kind;
  std::string payload;
  int32_t priority = 0;
  int32_t attempt = 0;
  int32_t max_attempts = 0;
  int64_t run_at = 0;
  int64_t created_at = 0;
  int64_t finalized_at = 0;
  int64_t lease_token = 0;
  int64_t lease_expires = 0;
  std::string last_error;
  int32_t cost = 1;        // ABI 1.2; a host's copy of an older plugin's job: 1
  std::string key;         // ABI 1.4; empty: the empty key (and an older plugin's job)
  int64_t started_at = 0;  // ABI 1.6: the latest claim's now_us; 0 if never claimed
  int64_t timeout_ms = 0;  // ABI 1.6: as enqueued with enqueue_v5; 0: the queue's
  // As a plugin reported them, in a host's copy; view() always reports
  // sizeof(conveyor_job) and 0.
  uint32_t struct_size = sizeof(conveyor_job);
  int32_t reserved0 = 0;

  conveyor_lease lease() const noexcept { return conveyor_lease{id, lease_token}; }

  conveyor_job view() const noexcept {
    conveyor_job j{};
    j.struct_size = sizeof(conveyor_job);
    j.state = state;
    j.id = id;
    j.queue = str(queue);
    j.kind = str(kind);
    j.payload = str(payload);
    j.priority = priority;
    j.attempt = attempt;
    j.max_attempts = max_attempts;
    j.run_at_us = run_at;
    j.created_at_us = created_at;
    j.finalized_at_us = finalized_at;
    j.lease_token = lease_token;
    j.lease_expires_us = lease_expires;
    j.last_error = str(last_error);
    j.cost = cost;
    j.key = str(key);
    j.started_at_us = started_at;
    j.timeout_ms = timeout_ms;
    return j;
  }
};

// A rate-limit override copied out of a row, so that it can be reported
// (view()) after the statement or transaction that read it has ended. The
// view borrows queue: report it while this object lives.
struct OwnedRateLimit {
  std::string queue;
  double rate_per_sec = 0;
  int64_t burst = 0;  // as stored; view() clamps it to 1..UINT32_MAX
  int64_t updated_at = 0;
  int32_t scope = CONVEYOR_SCOPE_PROCESS;  // ABI 1.2

  conveyor_rate_limit view() const noexcept {
    conveyor_rate_limit l{};
    l.struct_size = sizeof(conveyor_rate_limit);
    l.queue = str(queue);
    l.rate_per_sec = rate_per_sec;
    l.burst = static_cast<uint32_t>(std::clamp<int64_t>(burst, 1, UINT32_MAX));
    l.updated_at_us = updated_at;
    l.scope = scope;
    return l;
  }
};

// One queue's counts copied out of a result, reported (view()) after the
// read has ended. The view borrows queue: report it while this object lives.
struct OwnedQueueStats {
  std::string queue;
  bool paused = false;
  // pending, scheduled, running, completed, failed, cancelled
  int64_t counts[6] = {};

  conveyor_queue_stats view() const noexcept {
    conveyor_queue_stats s{};
    s.struct_size = sizeof(conveyor_queue_stats);
    s.queue = str(queue);
    s.paused = paused ? 1 : 0;
    s.pending = counts[0];
    s.scheduled = counts[1];
    s.running = counts[2];
    s.completed = counts[3];
    s.failed = counts[4];
    s.cancelled = counts[5];
    return s;
  }
};

class QueueSink {
 public:
  QueueSink(conveyor_queue_fn fn, void* ctx) : fn_(fn), ctx_(ctx) {}
  void operator()(std::string_view queue, bool paused) const {
    fn_(ctx_, str(queue), paused ? 1 : 0);
  }

 private:
  conveyor_queue_fn fn_;
  void* ctx_;
};

class NotifySink {
 public:
  NotifySink(conveyor_notify_fn fn, void* ctx) : fn_(fn), ctx_(ctx) {}
  void operator()(int32_t kind, std::string_view queue) const { fn_(ctx_, kind, str(queue)); }

 private:
  conveyor_notify_fn fn_;
  void* ctx_;
};

// A key setting (storage_plugin.h, ABI 1.5), owned: what set_key_setting
// hands the plugin (checked) and what a plugin copies out of a read before
// reporting it (view() borrows queue and key). Fields not in fields are 0.
struct KeySetting {
  std::string queue;
  std::string key;
  int32_t target = CONVEYOR_KEY_TARGET_ONE;
  uint32_t fields = 0;  // CONVEYOR_KEY_FIELD_*
  double rate_per_sec = 0;
  uint32_t burst = 0;
  int32_t scope = CONVEYOR_SCOPE_PROCESS;
  uint32_t weight = 0;
  int64_t updated_at = 0;

  conveyor_key_setting view() const noexcept {
    conveyor_key_setting s{};
    s.struct_size = sizeof(conveyor_key_setting);
    s.fields = fields;
    s.queue = str(queue);
    s.key = str(key);
    s.target = target;
    if (fields & CONVEYOR_KEY_FIELD_RATE) {
      s.scope = scope;
      s.rate_per_sec = rate_per_sec;
      s.burst = burst;
    }
    if (fields & CONVEYOR_KEY_FIELD_WEIGHT) s.weight = weight;
    s.updated_at_us = updated_at;
    return s;
  }
};

// A shared record after swap_shared_state (storage_plugin.h, ABI 1.2).
struct SharedRecord {
  int64_t version = 0;
  int64_t value = 0;
  bool applied = false;
};

// add_shared_state's inputs (storage_plugin.h, ABI 1.3), checked by the
// adapter before the plugin sees them.
struct SharedAdd {
  int64_t credit = 0;
  int64_t low = 0;
  int64_t high = 0;
  int64_t unit = 1;
  uint32_t min_count = 1;
  uint32_t max_count = 1;
};
// The record after add_shared_state, and how many units it added.
struct SharedAddResult {
  int64_t version = 0;
  int64_t value = 0;
  uint32_t count = 0;
};

// One add of add_shared_states (storage_plugin.h, ABI 1.5), checked by the
// adapter as add_shared_state's; key borrows the caller's.
struct KeyedAdd {
  std::string_view key;
  SharedAdd add;
};
// add_shared_state applied to a record's value: the count (0: nothing
// changes) and the value after. Never overflows for inputs the adapter let
// through (the order is storage_plugin.h's).
struct SharedAddOutcome {
  uint32_t count = 0;
  int64_t value = 0;
};
inline SharedAddOutcome apply_shared_add(int64_t value, const SharedAdd& a) noexcept {
  const int64_t base = value <= a.low ? a.low : std::max(value - a.credit, a.low);
  if (base > a.high) return {0, value};
  const int64_t fits = (a.high - base) / a.unit;
  const uint32_t count = fits >= int64_t{a.max_count} ? a.max_count : static_cast<uint32_t>(fits);
  if (count < a.min_count) return {0, value};
  return {count, base + a.unit * int64_t{count}};
}

namespace detail {

inline void set_error(conveyor_error* err, conveyor_status code, const char* message) noexcept {
  if (err == nullptr) return;
  err->code = code;
  std::snprintf(err->message, sizeof err->message, "%s", message);
}

// Runs body; turns every exception into a status and an error message.
template <typename Body>
conveyor_status guarded(conveyor_error* err, Body&& body) noexcept {
  try {
    body();
    return CONVEYOR_OK;
  } catch (const Error& e) {
    set_error(err, e.code(), e.what());
    return e.code();
  } catch (const std::bad_alloc&) {
    set_error(err, CONVEYOR_E_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    set_error(err, CONVEYOR_E_INTERNAL, e.what());
  } catch (...) {
    set_error(err, CONVEYOR_E_INTERNAL, "unknown exception in storage plugin");
  }
  return CONVEYOR_E_INTERNAL;
}

template <typename Impl>
struct Adapter {
  static Impl* self(conveyor_storage* s) { return reinterpret_cast<Impl*>(s); }

  static conveyor_status open(const conveyor_option* options, size_t n, conveyor_storage** out,
                              conveyor_error* err) {
    return guarded(err, [&] {
      if (out == nullptr) throw Error(CONVEYOR_E_INVALID, "out is NULL");
      std::unique_ptr<Impl> impl = Impl::open(Options(options, n));
      *out = reinterpret_cast<conveyor_storage*>(impl.release());
    });
  }
  static void close(conveyor_storage* s) {
    try {
      delete self(s);
    } catch (...) {
      // A destructor that throws must not escape; nothing more to do.
    }
  }
  static conveyor_status migrate(conveyor_storage* s, conveyor_error* err) {
    return guarded(err, [&] { self(s)->migrate(); });
  }
  static conveyor_status enqueue(conveyor_storage* s, const conveyor_new_job* jobs, size_t n,
                                 int64_t* ids, conveyor_error* err) {
    return guarded(err, [&] {
      if (n == 0) return;
      if (jobs == nullptr || ids == nullptr)
        throw Error(CONVEYOR_E_INVALID, "jobs or out_ids is NULL");
      self(s)->enqueue(std::span(jobs, n), std::span(ids, n));
    });
  }
  static conveyor_status claim(conveyor_storage* s, conveyor_str queue, uint32_t max_jobs,
                               int64_t token, int64_t now, int64_t expires, conveyor_job_fn fn,
                               void* ctx, uint32_t* out_claimed, conveyor_error* err) {
    return guarded(err, [&] {
      if (fn == nullptr || out_claimed == nullptr)
        throw Error(CONVEYOR_E_INVALID, "on_job or out_claimed is NULL");
      if (token == 0) throw Error(CONVEYOR_E_INVALID, "lease_token must be non-zero");
      *out_claimed = self(s)->claim(view(queue), max_jobs, token, now, expires, JobSink(fn, ctx));
    });
  }
  // The shape shared by complete, extend_leases and release: a batch of
  // leases in, one status per lease out.
  template <typename Call>
  static conveyor_status lease_batch(const conveyor_lease* leases, size_t n,
                                     conveyor_status* results, conveyor_error* err, Call&& call) {
    return guarded(err, [&] {
      if (n == 0) return;
      if (leases == nullptr || results == nullptr)
        throw Error(CONVEYOR_E_INVALID, "leases or results is NULL");
      call(std::span(leases, n), std::span(results, n));
    });
  }
  static conveyor_status complete(conveyor_storage* s, const conveyor_lease* leases, size_t n,
                                  int64_t now, conveyor_status* results, conveyor_error* err) {
    return lease_batch(leases, n, results, err,
                       [&](auto l, auto r) { self(s)->complete(l, now, r); });
  }
  static conveyor_status fail(conveyor_storage* s, conveyor_lease lease, conveyor_str error_text,
                              int64_t retry_at, int64_t now, conveyor_error* err) {
    return guarded(err, [&] { self(s)->fail(lease, view(error_text), retry_at, now); });
  }
  static conveyor_status extend_leases(conveyor_storage* s, const conveyor_lease* leases, size_t n,
                                       int64_t expires, conveyor_status* results,
                                       conveyor_error* err) {
    return lease_batch(leases, n, results, err,
                       [&](auto l, auto r) { self(s)->extend_leases(l, expires, r); });
  }
  static conveyor_status release(conveyor_storage* s, const conveyor_lease* leases, size_t n,
                                 int64_t now, conveyor_status* results, conveyor_error* err) {
    return lease_batch(leases, n, results, err,
                       [&](auto l, auto r) { self(s)->release(l, now, r); });
  }
  static conveyor_status rescue_expired(conveyor_storage* s, int64_t now, uint32_t max_jobs,
                                        uint32_t* out, conveyor_error* err) {
    return guarded(err, [&] {
      if (out == nullptr) throw Error(CONVEYOR_E_INVALID, "out_rescued is NULL");
      *out = self(s)->rescue_expired(now, max_jobs);
    });
  }
  static conveyor_status cancel(conveyor_storage* s, int64_t id, int64_t now, conveyor_error* err) {
    return guarded(err, [&] { self(s)->cancel(id, now); });
  }
  static conveyor_status set_queue_paused(conveyor_storage* s, conveyor_str queue, int32_t paused,
                                          int64_t now, conveyor_error* err) {
    return guarded(err, [&] { self(s)->set_queue_paused(view(queue), paused != 0, now); });
  }
  static conveyor_status queue_stats(conveyor_storage* s, int64_t now, conveyor_queue_stats_fn fn,
                                     void* ctx, conveyor_error* err) {
    return guarded(err, [&] {
      if (fn == nullptr) throw Error(CONVEYOR_E_INVALID, "on_stats is NULL");
      self(s)->queue_stats(now, QueueStatsSink(fn, ctx));
    });
  }
  static conveyor_status list_queues(conveyor_storage* s, conveyor_queue_fn fn, void* ctx,
                                     conveyor_error* err) {
    return guarded(err, [&] {
      if (fn == nullptr) throw Error(CONVEYOR_E_INVALID, "on_queue is NULL");
      self(s)->list_queues(QueueSink(fn, ctx));
    });
  }
  static conveyor_status get_job(conveyor_storage* s, int64_t id, int64_t now, conveyor_job_fn fn,
                                 void* ctx, conveyor_error* err) {
    return guarded(err, [&] {
      if (fn == nullptr) throw Error(CONVEYOR_E_INVALID, "on_job is NULL");
      self(s)->get_job(id, now, JobSink(fn, ctx));
    });
  }
  static conveyor_status purge_finished(conveyor_storage* s, int64_t before, uint32_t max_jobs,
                                        uint64_t* out, conveyor_error* err) {
    return guarded(err, [&] {
      if (out == nullptr) throw Error(CONVEYOR_E_INVALID, "out_deleted is NULL");
      *out = self(s)->purge_finished(before, max_jobs);
    });
  }
  static conveyor_status set_rate_limit(conveyor_storage* s, conveyor_str queue, double rate,
                                        uint32_t burst, int64_t now, conveyor_error* err) {
    return guarded(err, [&] {
      if (!(rate > 0) || rate > 1e300)
        throw Error(CONVEYOR_E_INVALID, "rate_per_sec must be > 0 and finite");
      if (burst < 1) throw Error(CONVEYOR_E_INVALID, "burst must be >= 1");
      self(s)->set_rate_limit(view(queue), rate, burst, now);
    });
  }
  static conveyor_status delete_rate_limit(conveyor_storage* s, conveyor_str queue,
                                           conveyor_error* err) {
    return guarded(err, [&] { self(s)->delete_rate_limit(view(queue)); });
  }
  static conveyor_status list_rate_limits(conveyor_storage* s, conveyor_rate_limit_fn fn, void* ctx,
                                          conveyor_error* err) {
    return guarded(err, [&] {
      if (fn == nullptr) throw Error(CONVEYOR_E_INVALID, "on_limit is NULL");
      self(s)->list_rate_limits(RateLimitSink(fn, ctx));
    });
  }
  static conveyor_status change_marker(conveyor_storage* s, int64_t* out, conveyor_error* err) {
    return guarded(err, [&] {
      if (out == nullptr) throw Error(CONVEYOR_E_INVALID, "out_marker is NULL");
      *out = self(s)->change_marker();
    });
  }
  static conveyor_status wait_for_notification(conveyor_storage* s, int64_t timeout,
                                               conveyor_notify_fn fn, void* ctx,
                                               conveyor_error* err) {
    return guarded(err, [&] {
      if (fn == nullptr) throw Error(CONVEYOR_E_INVALID, "on_notify is NULL");
      self(s)->wait_for_notification(timeout, NotifySink(fn, ctx));
    });
  }

  // ---- ABI 1.1 ----
  static conveyor_status enqueue_v2(conveyor_storage* s, const conveyor_new_job* jobs, size_t n,
                                    int64_t now, int64_t* ids, conveyor_error* err) {
    return guarded(err, [&] {
      if (n == 0) return;
      if (jobs == nullptr || ids == nullptr)
        throw Error(CONVEYOR_E_INVALID, "jobs or out_ids is NULL");
      self(s)->enqueue_at(std::span(jobs, n), now, std::span(ids, n));
    });
  }
  static conveyor_status claim_kinds(conveyor_storage* s, conveyor_str queue,
                                     const conveyor_str* kinds, size_t n_kinds, uint32_t max_jobs,
                                     int64_t token, int64_t now, int64_t expires,
                                     conveyor_job_fn fn, void* ctx, uint32_t* out_claimed,
                                     conveyor_error* err) {
    return guarded(err, [&] {
      if (fn == nullptr || out_claimed == nullptr)
        throw Error(CONVEYOR_E_INVALID, "on_job or out_claimed is NULL");
      if (token == 0) throw Error(CONVEYOR_E_INVALID, "lease_token must be non-zero");
      if (n_kinds > 0 && kinds == nullptr)
        throw Error(CONVEYOR_E_INVALID, "claim_kinds: kinds is NULL with n_kinds > 0");
      if (n_kinds == 0) {
        *out_claimed = self(s)->claim(view(queue), max_jobs, token, now, expires, JobSink(fn, ctx));
        return;
      }
      std::vector<std::string_view> k;
      k.reserve(n_kinds);
      for (size_t i = 0; i < n_kinds; ++i) {
        if (kinds[i].len == 0)
          throw Error(CONVEYOR_E_INVALID, "claim_kinds: kinds[" + std::to_string(i) + "] is empty");
        if (kinds[i].data == nullptr)
          throw Error(CONVEYOR_E_INVALID,
                      "claim_kinds: kinds[" + std::to_string(i) + "] has data NULL with a length");
        k.push_back(view(kinds[i]));
      }
      *out_claimed = self(s)->claim_kinds(view(queue), std::span<const std::string_view>(k),
                                          max_jobs, token, now, expires, JobSink(fn, ctx));
    });
  }
  static conveyor_status list_jobs(conveyor_storage* s, conveyor_str queue, const int32_t* states,
                                   size_t n_states, conveyor_str kind, int64_t after_id,
                                   uint32_t limit, int64_t now, conveyor_job_fn fn, void* ctx,
                                   uint32_t* out_listed, conveyor_error* err) {
    return guarded(err, [&] {
      if (fn == nullptr || out_listed == nullptr)
        throw Error(CONVEYOR_E_INVALID, "on_job or out_listed is NULL");
      if (queue.len == 0) throw Error(CONVEYOR_E_INVALID, "list_jobs: queue name is empty");
      if (after_id < 0)
        throw Error(CONVEYOR_E_INVALID,
                    "list_jobs: after_id must be >= 0, got " + std::to_string(after_id));
      if (limit == 0 || limit > CONVEYOR_LIST_JOBS_MAX)
        throw Error(CONVEYOR_E_INVALID, "list_jobs: limit must be 1.." +
                                            std::to_string(CONVEYOR_LIST_JOBS_MAX) + ", got " +
                                            std::to_string(limit));
      if (n_states > 0 && states == nullptr)
        throw Error(CONVEYOR_E_INVALID, "list_jobs: states is NULL with n_states > 0");
      for (size_t i = 0; i < n_states; ++i)
        if (states[i] < CONVEYOR_JOB_AVAILABLE || states[i] > CONVEYOR_JOB_CANCELLED)
          throw Error(CONVEYOR_E_INVALID, "list_jobs: states[" + std::to_string(i) + "] is " +
                                              std::to_string(states[i]) +
                                              ", not a CONVEYOR_JOB_* state (1..6)");
      *out_listed = self(s)->list_jobs(view(queue), std::span<const int32_t>(states, n_states),
                                       view(kind), after_id, limit, now, JobSink(fn, ctx));
    });
  }
  static conveyor_status retry_jobs(conveyor_storage* s, const int64_t* ids, size_t n, int64_t now,
                                    conveyor_status* results, conveyor_error* err) {
    return guarded(err, [&] {
      if (n == 0) return;
      if (ids == nullptr || results == nullptr)
        throw Error(CONVEYOR_E_INVALID, "job_ids or results is NULL");
      self(s)->retry_jobs(std::span(ids, n), now, std::span(results, n));
    });
  }
  static conveyor_status delete_jobs(conveyor_storage* s, const int64_t* ids, size_t n,
                                     conveyor_status* results, conveyor_error* err) {
    return guarded(err, [&] {
      if (n == 0) return;
      if (ids == nullptr || results == nullptr)
        throw Error(CONVEYOR_E_INVALID, "job_ids or results is NULL");
      self(s)->delete_jobs(std::span(ids, n), std::span(results, n));
    });
  }
  static conveyor_status job_counts(conveyor_storage* s, int64_t now, conveyor_queue_stats_fn fn,
                                    void* ctx, conveyor_error* err) {
    return guarded(err, [&] {
      if (fn == nullptr) throw Error(CONVEYOR_E_INVALID, "on_stats is NULL");
      self(s)->job_counts(now, QueueStatsSink(fn, ctx));
    });
  }

  static conveyor_status rescue_expired_v2(conveyor_storage* s, int64_t now, uint32_t max_jobs,
                                           conveyor_job_fn fn, void* ctx, uint32_t* out,
                                           conveyor_error* err) {
    return guarded(err, [&] {
      if (fn == nullptr || out == nullptr)
        throw Error(CONVEYOR_E_INVALID, "on_job or out_rescued is NULL");
      *out = self(s)->rescue_expired_v2(now, max_jobs, JobSink(fn, ctx));
    });
  }

  // ---- ABI 1.2 ----
  // A shared record's key: 1..CONVEYOR_SHARED_KEY_MAX bytes.
  static void check_shared_key(const std::string& op, conveyor_str key) {
    const std::string& o = op;
    if (key.len == 0) throw Error(CONVEYOR_E_INVALID, o + ": key is empty");
    if (key.data == nullptr)
      throw Error(CONVEYOR_E_INVALID, o + ": key has data NULL with a length");
    if (key.len > CONVEYOR_SHARED_KEY_MAX)
      throw Error(CONVEYOR_E_INVALID, o + ": key is " + std::to_string(key.len) +
                                          " bytes, longer than CONVEYOR_SHARED_KEY_MAX (" +
                                          std::to_string(CONVEYOR_SHARED_KEY_MAX) + ")");
  }
  static conveyor_status swap_shared_state(conveyor_storage* s, conveyor_str key,
                                           int64_t expected_version, int64_t new_value,
                                           int64_t* out_version, int64_t* out_value,
                                           int32_t* out_applied, conveyor_error* err) {
    return guarded(err, [&] {
      if (out_version == nullptr || out_value == nullptr || out_applied == nullptr)
        throw Error(CONVEYOR_E_INVALID,
                    "swap_shared_state: out_version, out_value or out_applied is NULL");
      check_shared_key("swap_shared_state", key);
      const SharedRecord r = self(s)->swap_shared_state(view(key), expected_version, new_value);
      *out_version = r.version;
      *out_value = r.value;
      *out_applied = r.applied ? 1 : 0;
    });
  }
  // ---- ABI 1.3 ----
  static void check_shared_add(const std::string& op, conveyor_str key, int64_t credit, int64_t low,
                               int64_t high, int64_t unit, uint32_t min_count, uint32_t max_count) {
    check_shared_key(op, key);
    constexpr int64_t kMax = CONVEYOR_SHARED_ADD_MAX;
    const auto refuse = [op](const std::string& why) {
      throw Error(CONVEYOR_E_INVALID, std::string(op) + ": " + why);
    };
    if (low < -kMax || low > kMax || high < -kMax || high > kMax)
      refuse("low and high must be within +-CONVEYOR_SHARED_ADD_MAX (2^62), got low " +
             std::to_string(low) + ", high " + std::to_string(high));
    if (low > high) refuse("low " + std::to_string(low) + " is above high " + std::to_string(high));
    if (high - low > kMax)
      refuse("high - low must be at most CONVEYOR_SHARED_ADD_MAX (2^62), got " +
             std::to_string(high - low));
    if (credit < 0 || credit > kMax)
      refuse("credit must be in 0..CONVEYOR_SHARED_ADD_MAX (2^62), got " + std::to_string(credit));
    if (unit < 1 || unit > kMax)
      refuse("unit must be in 1..CONVEYOR_SHARED_ADD_MAX (2^62), got " + std::to_string(unit));
    if (min_count < 1 || max_count < min_count)
      refuse("need 1 <= min_count <= max_count, got min_count " + std::to_string(min_count) +
             ", max_count " + std::to_string(max_count));
  }
  static conveyor_status add_shared_state(conveyor_storage* s, conveyor_str key, int64_t credit,
                                          int64_t low, int64_t high, int64_t unit,
                                          uint32_t min_count, uint32_t max_count,
                                          int64_t* out_version, int64_t* out_value,
                                          uint32_t* out_count, conveyor_error* err) {
    return guarded(err, [&] {
      if (out_version == nullptr || out_value == nullptr || out_count == nullptr)
        throw Error(CONVEYOR_E_INVALID,
                    "add_shared_state: out_version, out_value or out_count is NULL");
      check_shared_add("add_shared_state", key, credit, low, high, unit, min_count, max_count);
      const SharedAddResult r = self(s)->add_shared_state(
          view(key), SharedAdd{credit, low, high, unit, min_count, max_count});
      *out_version = r.version;
      *out_value = r.value;
      *out_count = r.count;
    });
  }
  static conveyor_status set_rate_limit_v2(conveyor_storage* s, conveyor_str queue, double rate,
                                           uint32_t burst, int32_t scope, int64_t now,
                                           conveyor_error* err) {
    return guarded(err, [&] {
      if (!(rate > 0) || rate > 1e300)
        throw Error(CONVEYOR_E_INVALID, "rate_per_sec must be > 0 and finite");
      if (burst < 1) throw Error(CONVEYOR_E_INVALID, "burst must be >= 1");
      if (scope != CONVEYOR_SCOPE_PROCESS && scope != CONVEYOR_SCOPE_FLEET)
        throw Error(CONVEYOR_E_INVALID,
                    "set_rate_limit_v2: scope is " + std::to_string(scope) +
                        ", not CONVEYOR_SCOPE_PROCESS (0) or CONVEYOR_SCOPE_FLEET (1)");
      self(s)->set_rate_limit_scoped(view(queue), rate, burst, scope, now);
    });
  }
  static conveyor_status enqueue_v3(conveyor_storage* s, const conveyor_new_job_v2* jobs, size_t n,
                                    int64_t now, int64_t* ids, conveyor_error* err) {
    return guarded(err, [&] {
      if (n == 0) return;
      if (jobs == nullptr || ids == nullptr)
        throw Error(CONVEYOR_E_INVALID, "jobs or out_ids is NULL");
      for (size_t i = 0; i < n; ++i)
        if (jobs[i].cost < 1 || jobs[i].cost > CONVEYOR_JOB_COST_MAX)
          throw Error(CONVEYOR_E_INVALID, "enqueue_v3: jobs[" + std::to_string(i) + "].cost is " +
                                              std::to_string(jobs[i].cost) + ", not 1.." +
                                              std::to_string(CONVEYOR_JOB_COST_MAX));
      self(s)->enqueue_costed(std::span(jobs, n), now, std::span(ids, n));
    });
  }

  // ---- ABI 1.4 ----
  static void check_key(const char* call, const std::string& what, conveyor_str key) {
    if (key.len > 0 && key.data == nullptr)
      throw Error(CONVEYOR_E_INVALID,
                  std::string(call) + ": " + what + " has data NULL with a length");
    if (key.len > CONVEYOR_JOB_KEY_MAX)
      throw Error(CONVEYOR_E_INVALID, std::string(call) + ": " + what + " is " +
                                          std::to_string(key.len) + " bytes, more than " +
                                          std::to_string(CONVEYOR_JOB_KEY_MAX));
  }
  static conveyor_status enqueue_v4(conveyor_storage* s, const conveyor_new_job_v3* jobs, size_t n,
                                    int64_t now, int64_t* ids, conveyor_error* err) {
    return guarded(err, [&] {
      if (n == 0) return;
      if (jobs == nullptr || ids == nullptr)
        throw Error(CONVEYOR_E_INVALID, "jobs or out_ids is NULL");
      for (size_t i = 0; i < n; ++i) {
        const std::string at = "jobs[" + std::to_string(i) + "]";
        if (jobs[i].job.cost < 1 || jobs[i].job.cost > CONVEYOR_JOB_COST_MAX)
          throw Error(CONVEYOR_E_INVALID, "enqueue_v4: " + at + ".cost is " +
                                              std::to_string(jobs[i].job.cost) + ", not 1.." +
                                              std::to_string(CONVEYOR_JOB_COST_MAX));
        check_key("enqueue_v4", at + ".key", jobs[i].key);
      }
      self(s)->enqueue_keyed(std::span(jobs, n), now, std::span(ids, n));
    });
  }
  // ---- ABI 1.6 ----
  static conveyor_status enqueue_v5(conveyor_storage* s, const conveyor_new_job_v4* jobs, size_t n,
                                    int64_t now, int64_t* ids, conveyor_error* err) {
    return guarded(err, [&] {
      if (n == 0) return;
      if (jobs == nullptr || ids == nullptr)
        throw Error(CONVEYOR_E_INVALID, "jobs or out_ids is NULL");
      for (size_t i = 0; i < n; ++i) {
        const std::string at = "jobs[" + std::to_string(i) + "]";
        if (jobs[i].job.job.cost < 1 || jobs[i].job.job.cost > CONVEYOR_JOB_COST_MAX)
          throw Error(CONVEYOR_E_INVALID, "enqueue_v5: " + at + ".cost is " +
                                              std::to_string(jobs[i].job.job.cost) + ", not 1.." +
                                              std::to_string(CONVEYOR_JOB_COST_MAX));
        check_key("enqueue_v5", at + ".key", jobs[i].job.key);
        if (jobs[i].timeout_ms < 0 || jobs[i].timeout_ms > CONVEYOR_JOB_TIMEOUT_MAX_MS)
          throw Error(CONVEYOR_E_INVALID, "enqueue_v5: " + at + ".timeout_ms is " +
                                              std::to_string(jobs[i].timeout_ms) + ", not 0.." +
                                              std::to_string(CONVEYOR_JOB_TIMEOUT_MAX_MS));
      }
      self(s)->enqueue_timed(std::span(jobs, n), now, std::span(ids, n));
    });
  }
  static conveyor_status claim_keys(conveyor_storage* s, conveyor_str queue,
                                    const conveyor_str* kinds, size_t n_kinds,
                                    const conveyor_key_claim* keys, size_t n_keys, int64_t token,
                                    int64_t now, int64_t expires, conveyor_job_fn fn, void* ctx,
                                    uint32_t* out_claimed, conveyor_error* err) {
    return guarded(err, [&] {
      if (fn == nullptr || out_claimed == nullptr)
        throw Error(CONVEYOR_E_INVALID, "on_job or out_claimed is NULL");
      if (token == 0) throw Error(CONVEYOR_E_INVALID, "lease_token must be non-zero");
      if (n_kinds > 0 && kinds == nullptr)
        throw Error(CONVEYOR_E_INVALID, "claim_keys: kinds is NULL with n_kinds > 0");
      if (n_keys > 0 && keys == nullptr)
        throw Error(CONVEYOR_E_INVALID, "claim_keys: keys is NULL with n_keys > 0");
      std::vector<std::string_view> k;
      k.reserve(n_kinds);
      for (size_t i = 0; i < n_kinds; ++i) {
        if (kinds[i].len == 0)
          throw Error(CONVEYOR_E_INVALID, "claim_keys: kinds[" + std::to_string(i) + "] is empty");
        if (kinds[i].data == nullptr)
          throw Error(CONVEYOR_E_INVALID,
                      "claim_keys: kinds[" + std::to_string(i) + "] has data NULL with a length");
        k.push_back(view(kinds[i]));
      }
      std::vector<KeyClaim> claims;
      claims.reserve(n_keys);
      for (size_t i = 0; i < n_keys; ++i) {
        check_key("claim_keys", "keys[" + std::to_string(i) + "].key", keys[i].key);
        claims.push_back(KeyClaim{view(keys[i].key), keys[i].max_jobs});
      }
      std::vector<std::string_view> sorted;
      sorted.reserve(claims.size());
      for (const KeyClaim& c : claims) sorted.push_back(c.key);
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
        throw Error(CONVEYOR_E_INVALID,
                    "claim_keys: the key \"" +
                        std::string(*std::adjacent_find(sorted.begin(), sorted.end())) +
                        "\" is listed twice");
      *out_claimed = n_keys == 0
                         ? 0
                         : self(s)->claim_keys(view(queue), std::span<const std::string_view>(k),
                                               std::span<const KeyClaim>(claims), token, now,
                                               expires, JobSink(fn, ctx));
    });
  }
  static conveyor_status list_ready_keys(conveyor_storage* s, conveyor_str queue,
                                         const conveyor_str* after_key, uint32_t limit,
                                         uint32_t count_limit, int64_t now,
                                         conveyor_ready_key_fn fn, void* ctx, uint32_t* out_listed,
                                         conveyor_error* err) {
    return guarded(err, [&] {
      if (fn == nullptr || out_listed == nullptr)
        throw Error(CONVEYOR_E_INVALID, "on_key or out_listed is NULL");
      if (queue.len == 0) throw Error(CONVEYOR_E_INVALID, "list_ready_keys: queue name is empty");
      if (limit == 0 || limit > CONVEYOR_LIST_JOBS_MAX)
        throw Error(CONVEYOR_E_INVALID, "list_ready_keys: limit must be 1.." +
                                            std::to_string(CONVEYOR_LIST_JOBS_MAX) + ", got " +
                                            std::to_string(limit));
      if (count_limit == 0)
        throw Error(CONVEYOR_E_INVALID, "list_ready_keys: count_limit must be >= 1");
      std::optional<std::string_view> after;
      if (after_key != nullptr) {
        check_key("list_ready_keys", "after_key", *after_key);
        after = view(*after_key);
      }
      *out_listed = self(s)->list_ready_keys(view(queue), after, limit, count_limit, now,
                                             ReadyKeySink(fn, ctx));
    });
  }

  // ---- ABI 1.5 ----
  static conveyor_status add_shared_states(conveyor_storage* s, const conveyor_shared_add* adds,
                                           size_t n, conveyor_shared_added* out,
                                           conveyor_error* err) {
    return guarded(err, [&] {
      if (n == 0) return;
      if (adds == nullptr || out == nullptr)
        throw Error(CONVEYOR_E_INVALID, "add_shared_states: adds or out is NULL");
      if (n > CONVEYOR_SHARED_ADDS_MAX)
        throw Error(CONVEYOR_E_INVALID, "add_shared_states: n is " + std::to_string(n) +
                                            ", more than CONVEYOR_SHARED_ADDS_MAX (" +
                                            std::to_string(CONVEYOR_SHARED_ADDS_MAX) + ")");
      std::vector<KeyedAdd> checked;
      checked.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        const conveyor_shared_add& a = adds[i];
        check_shared_add("add_shared_states: adds[" + std::to_string(i) + "]", a.key, a.credit,
                         a.low, a.high, a.unit, a.min_count, a.max_count);
        checked.push_back(KeyedAdd{
            view(a.key), SharedAdd{a.credit, a.low, a.high, a.unit, a.min_count, a.max_count}});
      }
      std::vector<std::string_view> sorted;
      sorted.reserve(n);
      for (const KeyedAdd& a : checked) sorted.push_back(a.key);
      std::sort(sorted.begin(), sorted.end());
      if (const auto d = std::adjacent_find(sorted.begin(), sorted.end()); d != sorted.end())
        throw Error(CONVEYOR_E_INVALID,
                    "add_shared_states: the key \"" + std::string(*d) + "\" is listed twice");
      std::vector<SharedAddResult> results(n);
      self(s)->add_shared_states(std::span<const KeyedAdd>(checked),
                                 std::span<SharedAddResult>(results));
      for (size_t i = 0; i < n; ++i)
        out[i] = conveyor_shared_added{results[i].version, results[i].value, results[i].count, 0};
    });
  }
  static void check_key_target(const char* call, conveyor_str queue, int32_t target,
                               conveyor_str key, uint32_t fields) {
    const std::string c(call);
    if (queue.len == 0 || queue.data == nullptr)
      throw Error(CONVEYOR_E_INVALID, c + ": queue name is empty");
    if (fields == 0 || (fields & ~CONVEYOR_KEY_FIELDS_ALL) != 0)
      throw Error(CONVEYOR_E_INVALID, c + ": fields is " + std::to_string(fields) +
                                          ", not a non-empty mask of CONVEYOR_KEY_FIELD_*");
    if (target != CONVEYOR_KEY_TARGET_ONE && target != CONVEYOR_KEY_TARGET_EVERY)
      throw Error(CONVEYOR_E_INVALID, c + ": target is " + std::to_string(target) +
                                          ", not CONVEYOR_KEY_TARGET_ONE (0) or _EVERY (1)");
    check_key(call, "key", key);
    if (target == CONVEYOR_KEY_TARGET_EVERY && key.len > 0)
      throw Error(CONVEYOR_E_INVALID, c + ": target CONVEYOR_KEY_TARGET_EVERY takes an empty key");
  }
  static conveyor_status set_key_setting(conveyor_storage* s, const conveyor_key_setting* in,
                                         int64_t now, conveyor_error* err) {
    return guarded(err, [&] {
      if (in == nullptr) throw Error(CONVEYOR_E_INVALID, "set_key_setting: setting is NULL");
      if (in->struct_size < sizeof(conveyor_key_setting))
        throw Error(CONVEYOR_E_INVALID, "set_key_setting: struct_size " +
                                            std::to_string(in->struct_size) +
                                            " is smaller than the 1.5 conveyor_key_setting (" +
                                            std::to_string(sizeof(conveyor_key_setting)) + ")");
      check_key_target("set_key_setting", in->queue, in->target, in->key, in->fields);
      KeySetting k;
      k.queue.assign(view(in->queue));
      k.key.assign(view(in->key));
      k.target = in->target;
      k.fields = in->fields;
      if (in->fields & CONVEYOR_KEY_FIELD_RATE) {
        if (!(in->rate_per_sec > 0) || in->rate_per_sec > 1e300)
          throw Error(CONVEYOR_E_INVALID, "set_key_setting: rate_per_sec must be > 0 and finite");
        if (in->burst < 1) throw Error(CONVEYOR_E_INVALID, "set_key_setting: burst must be >= 1");
        if (in->scope != CONVEYOR_SCOPE_PROCESS && in->scope != CONVEYOR_SCOPE_FLEET)
          throw Error(CONVEYOR_E_INVALID,
                      "set_key_setting: scope is " + std::to_string(in->scope) +
                          ", not CONVEYOR_SCOPE_PROCESS (0) or CONVEYOR_SCOPE_FLEET (1)");
        k.rate_per_sec = in->rate_per_sec;
        k.burst = in->burst;
        k.scope = in->scope;
      }
      if (in->fields & CONVEYOR_KEY_FIELD_WEIGHT) {
        if (in->weight < 1 || in->weight > CONVEYOR_KEY_WEIGHT_MAX)
          throw Error(CONVEYOR_E_INVALID, "set_key_setting: weight is " +
                                              std::to_string(in->weight) + ", not 1.." +
                                              std::to_string(CONVEYOR_KEY_WEIGHT_MAX));
        k.weight = in->weight;
      }
      k.updated_at = now;
      self(s)->set_key_setting(k, now);
    });
  }
  static conveyor_status delete_key_setting(conveyor_storage* s, conveyor_str queue, int32_t target,
                                            conveyor_str key, uint32_t fields, int32_t* out_cleared,
                                            conveyor_error* err) {
    return guarded(err, [&] {
      if (out_cleared == nullptr)
        throw Error(CONVEYOR_E_INVALID, "delete_key_setting: out_cleared is NULL");
      check_key_target("delete_key_setting", queue, target, key, fields);
      *out_cleared = self(s)->delete_key_setting(view(queue), target, view(key), fields) ? 1 : 0;
    });
  }
  static conveyor_status list_key_settings(conveyor_storage* s, conveyor_key_setting_fn fn,
                                           void* ctx, conveyor_error* err) {
    return guarded(err, [&] {
      if (fn == nullptr) throw Error(CONVEYOR_E_INVALID, "list_key_settings: on_setting is NULL");
      self(s)->list_key_settings(KeySettingSink(fn, ctx));
    });
  }
  static conveyor_status delete_shared_states(conveyor_storage* s, conveyor_str prefix,
                                              int64_t value_below, uint32_t limit,
                                              uint32_t* out_deleted, conveyor_error* err) {
    return guarded(err, [&] {
      if (out_deleted == nullptr)
        throw Error(CONVEYOR_E_INVALID, "delete_shared_states: out_deleted is NULL");
      if (prefix.len == 0) throw Error(CONVEYOR_E_INVALID, "delete_shared_states: prefix is empty");
      check_shared_key("delete_shared_states", prefix);
      if (limit == 0) throw Error(CONVEYOR_E_INVALID, "delete_shared_states: limit is 0");
      *out_deleted = self(s)->delete_shared_states(view(prefix), value_below, limit);
    });
  }

  static constexpr bool has_enqueue_at =
      requires(Impl & i, std::span<const conveyor_new_job> j, std::span<int64_t> o) {
    i.enqueue_at(j, int64_t{}, o);
  };
  static constexpr bool has_claim_kinds =
      requires(Impl & i, std::span<const std::string_view> k, const JobSink& sink) {
    i.claim_kinds(std::string_view{}, k, uint32_t{}, int64_t{}, int64_t{}, int64_t{}, sink);
  };
  static constexpr bool has_list_jobs =
      requires(Impl & i, std::span<const int32_t> st, const JobSink& sink) {
    i.list_jobs(std::string_view{}, st, std::string_view{}, int64_t{}, uint32_t{}, int64_t{}, sink);
  };
  static constexpr bool has_retry_jobs =
      requires(Impl & i, std::span<const int64_t> ids, std::span<conveyor_status> r) {
    i.retry_jobs(ids, int64_t{}, r);
  };
  static constexpr bool has_delete_jobs =
      requires(Impl & i, std::span<const int64_t> ids, std::span<conveyor_status> r) {
    i.delete_jobs(ids, r);
  };
  static constexpr bool has_job_counts = requires(Impl & i, const QueueStatsSink& sink) {
    i.job_counts(int64_t{}, sink);
  };
  static constexpr bool has_rescue_expired_v2 = requires(Impl & i, const JobSink& sink) {
    i.rescue_expired_v2(int64_t{}, uint32_t{}, sink);
  };

  static constexpr bool has_swap_shared_state = requires(Impl & i) {
    { i.swap_shared_state(std::string_view{}, int64_t{}, int64_t{}) } -> std::same_as<SharedRecord>;
  };
  static constexpr bool has_add_shared_state = requires(Impl & i, const SharedAdd& a) {
    { i.add_shared_state(std::string_view{}, a) } -> std::same_as<SharedAddResult>;
  };
  static constexpr bool has_set_rate_limit_scoped = requires(Impl & i) {
    i.set_rate_limit_scoped(std::string_view{}, double{}, uint32_t{}, int32_t{}, int64_t{});
  };
  static constexpr bool has_enqueue_costed =
      requires(Impl & i, std::span<const conveyor_new_job_v2> j, std::span<int64_t> o) {
    i.enqueue_costed(j, int64_t{}, o);
  };
  static constexpr bool has_enqueue_keyed =
      requires(Impl & i, std::span<const conveyor_new_job_v3> j, std::span<int64_t> o) {
    i.enqueue_keyed(j, int64_t{}, o);
  };
  static constexpr bool has_enqueue_timed =
      requires(Impl & i, std::span<const conveyor_new_job_v4> j, std::span<int64_t> o) {
    i.enqueue_timed(j, int64_t{}, o);
  };
  static constexpr bool has_claim_keys =
      requires(Impl & i, std::span<const std::string_view> k, std::span<const KeyClaim> c,
               const JobSink& sink) {
    {
      i.claim_keys(std::string_view{}, k, c, int64_t{}, int64_t{}, int64_t{}, sink)
      } -> std::same_as<uint32_t>;
  };
  static constexpr bool has_list_ready_keys = requires(Impl & i, const ReadyKeySink& sink) {
    {
      i.list_ready_keys(std::string_view{}, std::optional<std::string_view>{}, uint32_t{},
                        uint32_t{}, int64_t{}, sink)
      } -> std::same_as<uint32_t>;
  };

  static constexpr bool has_set_key_setting = requires(Impl & i, const KeySetting& k) {
    i.set_key_setting(k, int64_t{});
  };
  static constexpr bool has_delete_key_setting = requires(Impl & i) {
    {
      i.delete_key_setting(std::string_view{}, int32_t{}, std::string_view{}, uint32_t{})
      } -> std::same_as<bool>;
  };
  static constexpr bool has_list_key_settings = requires(Impl & i, const KeySettingSink& sink) {
    i.list_key_settings(sink);
  };
  static constexpr bool has_add_shared_states =
      requires(Impl & i, std::span<const KeyedAdd> a, std::span<SharedAddResult> r) {
    i.add_shared_states(a, r);
  };
  static constexpr bool has_delete_shared_states = requires(Impl & i) {
    { i.delete_shared_states(std::string_view{}, int64_t{}, uint32_t{}) } -> std::same_as<uint32_t>;
  };

    // Each optional slot: the adapter function when Impl has the method, else
    // NULL; if constexpr keeps the adapter function from being instantiated.
#define CONVEYOR_SDK_OPTIONAL_SLOT(getter, has, fn)                       \
  static constexpr auto getter() {                                        \
    if constexpr (has) {                                                  \
      return &Adapter::fn;                                                \
    } else {                                                              \
      return static_cast<decltype(conveyor_storage_plugin::fn)>(nullptr); \
    }                                                                     \
  }
  CONVEYOR_SDK_OPTIONAL_SLOT(enqueue_v2_slot, has_enqueue_at, enqueue_v2)
  CONVEYOR_SDK_OPTIONAL_SLOT(claim_kinds_slot, has_claim_kinds, claim_kinds)
  CONVEYOR_SDK_OPTIONAL_SLOT(list_jobs_slot, has_list_jobs, list_jobs)
  CONVEYOR_SDK_OPTIONAL_SLOT(retry_jobs_slot, has_retry_jobs, retry_jobs)
  CONVEYOR_SDK_OPTIONAL_SLOT(delete_jobs_slot, has_delete_jobs, delete_jobs)
  CONVEYOR_SDK_OPTIONAL_SLOT(job_counts_slot, has_job_counts, job_counts)
  CONVEYOR_SDK_OPTIONAL_SLOT(rescue_expired_v2_slot, has_rescue_expired_v2, rescue_expired_v2)
  CONVEYOR_SDK_OPTIONAL_SLOT(swap_shared_state_slot, has_swap_shared_state, swap_shared_state)
  CONVEYOR_SDK_OPTIONAL_SLOT(set_rate_limit_v2_slot, has_set_rate_limit_scoped, set_rate_limit_v2)
  CONVEYOR_SDK_OPTIONAL_SLOT(enqueue_v3_slot, has_enqueue_costed, enqueue_v3)
  CONVEYOR_SDK_OPTIONAL_SLOT(add_shared_state_slot, has_add_shared_state, add_shared_state)
  CONVEYOR_SDK_OPTIONAL_SLOT(enqueue_v4_slot, has_enqueue_keyed, enqueue_v4)
  CONVEYOR_SDK_OPTIONAL_SLOT(claim_keys_slot, has_claim_keys, claim_keys)
  CONVEYOR_SDK_OPTIONAL_SLOT(list_ready_keys_slot, has_list_ready_keys, list_ready_keys)
  CONVEYOR_SDK_OPTIONAL_SLOT(set_key_setting_slot, has_set_key_setting, set_key_setting)
  CONVEYOR_SDK_OPTIONAL_SLOT(delete_key_setting_slot, has_delete_key_setting, delete_key_setting)
  CONVEYOR_SDK_OPTIONAL_SLOT(list_key_settings_slot, has_list_key_settings, list_key_settings)
  CONVEYOR_SDK_OPTIONAL_SLOT(delete_shared_states_slot, has_delete_shared_states,
                             delete_shared_states)
  CONVEYOR_SDK_OPTIONAL_SLOT(add_shared_states_slot, has_add_shared_states, add_shared_states)
  CONVEYOR_SDK_OPTIONAL_SLOT(enqueue_v5_slot, has_enqueue_timed, enqueue_v5)
#undef CONVEYOR_SDK_OPTIONAL_SLOT

  static constexpr bool has_notify = requires(Impl & i, const NotifySink& sink) {
    i.wait_for_notification(0, sink);
  };

  // The notify slot, or NULL; if constexpr keeps the adapter of a plugin
  // without wait_for_notification from being instantiated at all.
  static constexpr auto notify_slot() {
    using Slot =
        conveyor_status (*)(conveyor_storage*, int64_t, conveyor_notify_fn, void*, conveyor_error*);
    if constexpr (has_notify) {
      return static_cast<Slot>(&Adapter::wait_for_notification);
    } else {
      return static_cast<Slot>(nullptr);
    }
  }

  static const conveyor_storage_plugin* table(const char* name, const char* version, uint32_t kind,
                                              uint64_t caps) {
    static const conveyor_storage_plugin t = {
        sizeof(conveyor_storage_plugin),
        CONVEYOR_ABI_MAJOR,
        CONVEYOR_ABI_MINOR,
        0,
        name,
        version,
        kind,
        0,
        has_notify ? (caps | CONVEYOR_CAP_NOTIFY) : (caps & ~CONVEYOR_CAP_NOTIFY),
        &Adapter::open,
        &Adapter::close,
        &Adapter::migrate,
        &Adapter::enqueue,
        &Adapter::claim,
        &Adapter::complete,
        &Adapter::fail,
        &Adapter::extend_leases,
        &Adapter::release,
        &Adapter::rescue_expired,
        &Adapter::cancel,
        &Adapter::set_queue_paused,
        &Adapter::queue_stats,
        &Adapter::list_queues,
        &Adapter::get_job,
        &Adapter::purge_finished,
        &Adapter::set_rate_limit,
        &Adapter::delete_rate_limit,
        &Adapter::list_rate_limits,
        &Adapter::change_marker,
        notify_slot(),
        enqueue_v2_slot(),
        claim_kinds_slot(),
        list_jobs_slot(),
        retry_jobs_slot(),
        delete_jobs_slot(),
        job_counts_slot(),
        rescue_expired_v2_slot(),
        swap_shared_state_slot(),
        set_rate_limit_v2_slot(),
        enqueue_v3_slot(),
        add_shared_state_slot(),
        enqueue_v4_slot(),
        claim_keys_slot(),
        list_ready_keys_slot(),
        set_key_setting_slot(),
        delete_key_setting_slot(),
        list_key_settings_slot(),
        delete_shared_states_slot(),
        add_shared_states_slot(),
        enqueue_v5_slot(),
    };
    return &t;
  }
};

}  // namespace detail
}  // namespace conveyor::sdk

// Exports the C entry point for the plugin class IMPL. NAME and VERSION are
// string literals; KIND is CONVEYOR_KIND_*; CAPS is a CONVEYOR_CAP_* mask
// (CONVEYOR_CAP_NOTIFY is set automatically when IMPL has
// wait_for_notification).
#define CONVEYOR_EXPORT_STORAGE_PLUGIN(IMPL, NAME, VERSION, KIND, CAPS)                           \
  extern "C" CONVEYOR_PLUGIN_EXPORT const conveyor_storage_plugin* conveyor_storage_plugin_entry( \
      uint32_t host_abi_major, uint32_t /*host_abi_minor*/) {                                     \
    if (host_abi_major != CONVEYOR_ABI_MAJOR) return nullptr;                                     \
    return ::conveyor::sdk::detail::Adapter<IMPL>::table(NAME, VERSION, KIND, CAPS);              \
  }

#endif  // CONVEYOR_STORAGE_PLUGIN_HPP
