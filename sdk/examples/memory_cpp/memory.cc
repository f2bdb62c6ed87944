// memory.cc: a complete Conveyor storage plugin in C++20 that keeps
// everything in memory, written against the helper header
// <conveyor/storage_plugin.hpp>. The helper turns this class into the C
// function table of <conveyor/storage_plugin.h> and every exception into a
// status code, so nothing but C crosses the boundary.
//
// The same plugin as examples/memory_c/memory.c, in C++, plus every newer
// slot: ABI 1.2's shared records, rate-limit scopes and job costs, 1.3's
// bounded add, 1.4's job keys (enqueue_keyed, claim_keys, list_ready_keys)
// and 1.5's key settings, forgetting of shared records and many bounded adds
// in one call. Not durable; handles opened with the same "name" option in one
// process share one store, freed with its last handle; one mutex per store.
// Read it next to writing-a-storage-plugin.md (both in share/doc/conveyor).
//
// Options ([storage.options] in the Conveyor config):
//   name = "..."   which in-process store to open (default "default").
#include <conveyor/storage_plugin.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace memory_plugin {
namespace {

using conveyor::sdk::Error;
using conveyor::sdk::JobSink;
using conveyor::sdk::KeyClaim;
using conveyor::sdk::KeyedAdd;
using conveyor::sdk::KeySetting;
using conveyor::sdk::KeySettingSink;
using conveyor::sdk::NotifySink;
using conveyor::sdk::Options;
using conveyor::sdk::QueueSink;
using conveyor::sdk::QueueStatsSink;
using conveyor::sdk::RateLimitSink;
using conveyor::sdk::ReadyKeySink;
using conveyor::sdk::SharedAdd;
using conveyor::sdk::SharedAddResult;
using conveyor::sdk::SharedRecord;
using conveyor::sdk::str;
using conveyor::sdk::view;

bool is_final(int32_t state) {
  return state == CONVEYOR_JOB_COMPLETED || state == CONVEYOR_JOB_FAILED ||
         state == CONVEYOR_JOB_CANCELLED;
}

// The only clock read here: for created_at_us of the 1.0 enqueue (it has no
// now_us; enqueue_v2 has). Every
// comparison of times uses the host's now_us (storage_plugin.h: Time).
int64_t wall_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Claim order inside a queue: priority, run_at, id, lowest first.
using ClaimOrder = std::tuple<int32_t, int64_t, int64_t>;

struct Queue {
  std::string name;
  bool paused = false;
  std::set<ClaimOrder> available;  // AVAILABLE jobs, ready or not yet due
  // ABI 1.4: the same jobs per job key, in key order (bytewise). A key is
  // here only while it has AVAILABLE jobs: nothing is kept for keys that had
  // jobs once, and claim_keys and list_ready_keys never look at other keys.
  std::map<std::string, std::set<ClaimOrder>, std::less<>> available_by_key;
  int64_t count[7] = {};  // retained jobs per stored state (CONVEYOR_JOB_*)
};

// Stored states are AVAILABLE, RUNNING, COMPLETED, FAILED and CANCELLED;
// SCHEDULED is AVAILABLE with run_at after the host's now_us.
struct Job {
  int64_t id = 0;
  int32_t state = 0;
  Queue* queue = nullptr;  // map nodes never move
  std::string kind, payload, last_error;
  std::string key;  // ABI 1.4: the job key; empty for jobs enqueued without one
  int32_t priority = 0, attempt = 0, max_attempts = 1;
  int32_t cost = 1;  // ABI 1.2's cost, as enqueue_v4 gives it; 1 otherwise
  int64_t run_at_us = 0, created_at_us = 0, finalized_at_us = 0;
  int64_t lease_token = 0, lease_expires_us = 0;
  int64_t started_at_us = 0;  // ABI 1.6: the latest claim's now_us; 0 before the first
  int64_t timeout_ms = 0;     // ABI 1.6: as enqueue_v5 gives it; 0 otherwise

  ClaimOrder claim_order() const { return {priority, run_at_us, id}; }
};

struct Limit {
  double rate_per_sec;
  uint32_t burst;
  int64_t updated_at_us;
  int32_t scope;  // ABI 1.2: CONVEYOR_SCOPE_*; PROCESS when set by set_rate_limit
};

// ABI 1.2: a shared record (swap_shared_state, add_shared_state). A key
// without one reads as version 0, value 0.
struct Shared {
  int64_t version = 0;
  int64_t value = 0;
};

// ABI 1.5: a key setting's row: (queue, target, key). The map's order is the
// order list_key_settings reports in: queue name, then target (ONE is 0,
// before EVERY, 1), then key, bytewise (std::string compares as unsigned
// bytes), so the empty key comes first.
using KeySettingId = std::tuple<std::string, int32_t, std::string>;

class MemoryStorage;

// One in-memory storage, shared by every handle opened with its name.
struct Store {
  std::mutex mu;  // guards everything below, and every handle's notes
  std::condition_variable noted;
  int64_t next_id = 1;
  int64_t marker = 0;
  std::map<int64_t, Job> jobs;                        // retained jobs by id
  std::map<std::string, Queue, std::less<>> queues;   // name order
  std::map<std::string, Limit, std::less<>> limits;   // queue-name order
  std::map<std::string, Shared, std::less<>> shared;  // ABI 1.2: by key, bytewise
  std::map<KeySettingId, KeySetting> key_settings;    // ABI 1.5: rows with a field set
  std::vector<MemoryStorage*> handles;                // open handles, for notifications

  Queue& queue(std::string_view name) {
    auto it = queues.find(name);
    if (it == queues.end()) {
      it = queues.emplace(std::string(name), Queue{}).first;
      it->second.name = name;
    }
    return it->second;
  }

  // The state machine: every change of state goes through set_state, so the
  // per-queue AVAILABLE sets and counts always agree with the jobs.
  void set_state(Job& j, int32_t state) {
    leave_state(j);
    enter_state(j, state);
  }
  void leave_state(Job& j) {
    if (j.state == CONVEYOR_JOB_AVAILABLE) {
      j.queue->available.erase(j.claim_order());
      auto by_key = j.queue->available_by_key.find(j.key);
      by_key->second.erase(j.claim_order());
      if (by_key->second.empty()) j.queue->available_by_key.erase(by_key);  // the key is gone
    }
    j.queue->count[j.state]--;
  }
  void enter_state(Job& j, int32_t state) {
    j.state = state;
    j.queue->count[state]++;
    if (state == CONVEYOR_JOB_AVAILABLE) {
      j.queue->available.insert(j.claim_order());
      j.queue->available_by_key[j.key].insert(j.claim_order());
    }
  }
  void make_available(Job& j, int64_t run_at_us) {
    leave_state(j);  // before run_at changes: it is part of the claim order
    j.run_at_us = run_at_us;
    j.lease_token = j.lease_expires_us = 0;
    enter_state(j, CONVEYOR_JOB_AVAILABLE);
  }
  void make_running(Job& j, int64_t token, int64_t expires_us, int64_t now_us) {
    set_state(j, CONVEYOR_JOB_RUNNING);
    j.attempt += 1;
    j.started_at_us = now_us;  // kept by every other change until the next claim
    j.lease_token = token;
    j.lease_expires_us = expires_us;
  }
  void make_final(Job& j, int32_t state, int64_t now_us) {
    set_state(j, state);
    j.finalized_at_us = now_us;
    j.lease_token = j.lease_expires_us = 0;
  }

  // The job a lease names, or nullptr unless it is RUNNING under that token.
  Job* find_lease(conveyor_lease lease) {
    auto it = jobs.find(lease.job_id);
    if (it == jobs.end() || it->second.state != CONVEYOR_JOB_RUNNING ||
        it->second.lease_token != lease.lease_token)
      return nullptr;
    return &it->second;
  }

  void notify(int32_t kind, std::string_view queue);  // below MemoryStorage
};

// Hands a job to the host; the struct and its strings stay valid for the
// whole callback (storage_plugin.h: Strings).
void report(const Job& j, int64_t now_us, const JobSink& sink) {
  conveyor_job out{};
  out.struct_size = sizeof out;
  out.state =
      j.state == CONVEYOR_JOB_AVAILABLE && j.run_at_us > now_us ? CONVEYOR_JOB_SCHEDULED : j.state;
  out.id = j.id;
  out.queue = str(j.queue->name);
  out.kind = str(j.kind);
  out.payload = str(j.payload);
  out.priority = j.priority;
  out.attempt = j.attempt;
  out.max_attempts = j.max_attempts;
  out.run_at_us = j.run_at_us;
  out.created_at_us = j.created_at_us;
  out.finalized_at_us = j.finalized_at_us;
  out.lease_token = j.lease_token;
  out.lease_expires_us = j.lease_expires_us;
  out.last_error = str(j.last_error);
  out.cost = j.cost;
  out.key = str(j.key);
  out.started_at_us = j.started_at_us;
  out.timeout_ms = j.timeout_ms;
  sink(out);
}

// The store of this name, created on first use and freed with its last
// handle (so every conformance test starts from an empty store).
std::shared_ptr<Store> store_named(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<Store>> stores;
  std::lock_guard lock(mu);
  std::weak_ptr<Store>& entry = stores[name];
  std::shared_ptr<Store> store = entry.lock();
  if (!store) entry = store = std::make_shared<Store>();
  return store;
}

// One open handle: the class CONVEYOR_EXPORT_STORAGE_PLUGIN adapts. Every
// method but the destructor may run concurrently (storage_plugin.h:
// Threading); each takes the store's mutex.
class MemoryStorage {
 public:
  static std::unique_ptr<MemoryStorage> open(const Options& options) {
    options.require_known({"name"});  // a typo in [storage.options] is an error
    return std::make_unique<MemoryStorage>(store_named(options.get("name", "default")));
  }

  explicit MemoryStorage(std::shared_ptr<Store> store) : store_(std::move(store)) {
    std::lock_guard lock(store_->mu);
    store_->handles.push_back(this);
  }
  ~MemoryStorage() {
    std::lock_guard lock(store_->mu);
    std::erase(store_->handles, this);
  }
  MemoryStorage(const MemoryStorage&) = delete;
  MemoryStorage& operator=(const MemoryStorage&) = delete;

  void migrate() {}  // memory has no schema

  void enqueue(std::span<const conveyor_new_job> jobs, std::span<int64_t> out_ids) {
    enqueue_at(jobs, wall_clock_us(), out_ids);
  }

  // ABI 1.1's enqueue_v2: created_at_us is the host's now_us. Jobs without
  // a key have the empty key (and cost 1).
  void enqueue_at(std::span<const conveyor_new_job> jobs, int64_t now_us,
                  std::span<int64_t> out_ids) {
    std::vector<conveyor_new_job_v3> keyless;
    for (const conveyor_new_job& j : jobs) keyless.push_back({{j, 1, 0}, conveyor_str{}});
    enqueue_keyed(keyless, now_us, out_ids);
  }

  // ABI 1.2's enqueue_v3: each job with its cost (the helper has refused a
  // cost out of range), and the empty key.
  void enqueue_costed(std::span<const conveyor_new_job_v2> jobs, int64_t now_us,
                      std::span<int64_t> out_ids) {
    std::vector<conveyor_new_job_v3> keyless;
    for (const conveyor_new_job_v2& j : jobs) keyless.push_back({j, conveyor_str{}});
    enqueue_keyed(keyless, now_us, out_ids);
  }

  // ABI 1.4's enqueue_v4: each job with its cost and key, timeout 0.
  void enqueue_keyed(std::span<const conveyor_new_job_v3> jobs, int64_t now_us,
                     std::span<int64_t> out_ids) {
    std::vector<conveyor_new_job_v4> untimed;
    for (const conveyor_new_job_v3& j : jobs) untimed.push_back({j, 0});
    enqueue_timed(untimed, now_us, out_ids);
  }

  // ABI 1.6's enqueue_v5: each job with its cost, key and timeout (the
  // helper has refused a cost or timeout out of range and a key longer than
  // CONVEYOR_JOB_KEY_MAX).
  void enqueue_timed(std::span<const conveyor_new_job_v4> all, int64_t now_us,
                     std::span<int64_t> out_ids) {
    std::vector<conveyor_new_job_v3> jobs;
    jobs.reserve(all.size());
    for (const conveyor_new_job_v4& j : all) jobs.push_back(j.job);
    // Check the whole batch before storing any of it: all or none.
    for (size_t i = 0; i < jobs.size(); ++i) {
      const conveyor_new_job& job = jobs[i].job.job;
      const std::string at = "job " + std::to_string(i) + " of the batch: ";
      if (job.queue.len == 0) throw Error(CONVEYOR_E_INVALID, at + "empty queue name");
      if (job.kind.len == 0) throw Error(CONVEYOR_E_INVALID, at + "empty kind");
      if (job.max_attempts < 1)
        throw Error(CONVEYOR_E_INVALID,
                    at + "max_attempts is " + std::to_string(job.max_attempts) + ", must be >= 1");
    }
    // Copy everything before taking the lock.
    const int64_t created_at_us = now_us;
    std::vector<Job> batch(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      const conveyor_new_job& job = jobs[i].job.job;
      batch[i].kind = view(job.kind);
      batch[i].payload = view(job.payload);
      batch[i].key = view(jobs[i].key);
      batch[i].priority = job.priority;
      batch[i].max_attempts = job.max_attempts;
      batch[i].cost = jobs[i].job.cost;
      batch[i].timeout_ms = all[i].timeout_ms;
      batch[i].run_at_us = job.run_at_us;
      batch[i].created_at_us = created_at_us;
    }
    std::lock_guard lock(store_->mu);
    // Below, only a failed allocation could throw, leaving part of the batch
    // stored; a backend with transactions makes the batch one transaction.
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i].id = store_->next_id++;
      batch[i].queue = &store_->queue(view(jobs[i].job.job.queue));
      Job& stored = store_->jobs.emplace(batch[i].id, std::move(batch[i])).first->second;
      store_->enter_state(stored, CONVEYOR_JOB_AVAILABLE);
      out_ids[i] = stored.id;
      store_->notify(CONVEYOR_NOTIFY_JOBS, stored.queue->name);
    }
  }

  uint32_t claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                 int64_t lease_expires_us, const JobSink& sink) {
    std::lock_guard lock(store_->mu);
    auto q = store_->queues.find(queue);
    if (q == store_->queues.end() || q->second.paused) return 0;  // nothing ready is success
    // The set is in claim order; jobs not yet due are skipped, not taken.
    std::vector<int64_t> ids;
    for (const auto& [priority, run_at_us, id] : q->second.available) {
      if (ids.size() == max_jobs) break;
      if (run_at_us <= now_us) ids.push_back(id);
    }
    for (int64_t id : ids) store_->make_running(store_->jobs.at(id), lease_token, lease_expires_us, now_us);
    // Report once every claim is made; callbacks never call back into this
    // handle, so holding the lock is safe.
    for (int64_t id : ids) report(store_->jobs.at(id), now_us, sink);
    return static_cast<uint32_t>(ids.size());
  }

  void complete(std::span<const conveyor_lease> leases, int64_t now_us,
                std::span<conveyor_status> results) {
    std::lock_guard lock(store_->mu);
    for (size_t i = 0; i < leases.size(); ++i) {
      Job* j = store_->find_lease(leases[i]);
      results[i] = j != nullptr ? CONVEYOR_OK : CONVEYOR_E_LEASE_LOST;
      if (j != nullptr) store_->make_final(*j, CONVEYOR_JOB_COMPLETED, now_us);
    }
  }

  void fail(conveyor_lease lease, std::string_view error_text, int64_t retry_at_us,
            int64_t now_us) {
    std::lock_guard lock(store_->mu);
    Job* j = store_->find_lease(lease);
    if (j == nullptr)
      throw Error(CONVEYOR_E_LEASE_LOST,
                  "job " + std::to_string(lease.job_id) + " is not running under lease " +
                      std::to_string(lease.lease_token) +
                      " (expired and claimed again, cancelled, or finished)");
    j->last_error = error_text;
    if (retry_at_us >= 0) {
      store_->make_available(*j, retry_at_us);  // the attempt stays spent
      store_->notify(CONVEYOR_NOTIFY_JOBS, j->queue->name);
    } else {
      store_->make_final(*j, CONVEYOR_JOB_FAILED, now_us);
    }
  }

  void extend_leases(std::span<const conveyor_lease> leases, int64_t lease_expires_us,
                     std::span<conveyor_status> results) {
    std::lock_guard lock(store_->mu);
    for (size_t i = 0; i < leases.size(); ++i) {
      Job* j = store_->find_lease(leases[i]);
      results[i] = j != nullptr ? CONVEYOR_OK : CONVEYOR_E_LEASE_LOST;
      if (j != nullptr) j->lease_expires_us = lease_expires_us;
    }
  }

  void release(std::span<const conveyor_lease> leases, int64_t now_us,
               std::span<conveyor_status> results) {
    std::lock_guard lock(store_->mu);
    for (size_t i = 0; i < leases.size(); ++i) {
      Job* j = store_->find_lease(leases[i]);
      results[i] = j != nullptr ? CONVEYOR_OK : CONVEYOR_E_LEASE_LOST;
      if (j == nullptr) continue;
      store_->make_available(*j, now_us);
      j->attempt -= 1;  // given back unrun: the attempt is not spent
      store_->notify(CONVEYOR_NOTIFY_JOBS, j->queue->name);
    }
  }

  uint32_t rescue_expired(int64_t now_us, uint32_t max_jobs) {
    return rescue(now_us, max_jobs, nullptr);
  }
  uint32_t rescue_expired_v2(int64_t now_us, uint32_t max_jobs, const JobSink& sink) {
    return rescue(now_us, max_jobs, &sink);
  }
  // sink (null from rescue_expired) hears of each rescued job, after.
  uint32_t rescue(int64_t now_us, uint32_t max_jobs, const JobSink* sink) {
    std::lock_guard lock(store_->mu);
    uint32_t rescued = 0;
    for (auto& [id, j] : store_->jobs) {
      if (rescued == max_jobs) break;
      if (j.state != CONVEYOR_JOB_RUNNING || j.lease_expires_us >= now_us) continue;
      j.last_error = "lease expired: the worker stopped heartbeating (presumed dead)";
      if (j.attempt < j.max_attempts) {
        store_->make_available(j, now_us);
        store_->notify(CONVEYOR_NOTIFY_JOBS, j.queue->name);
      } else {
        store_->make_final(j, CONVEYOR_JOB_FAILED, now_us);
      }
      if (sink != nullptr) report(j, now_us, *sink);
      ++rescued;
    }
    return rescued;
  }

  void cancel(int64_t job_id, int64_t now_us) {
    std::lock_guard lock(store_->mu);
    auto it = store_->jobs.find(job_id);
    if (it == store_->jobs.end() || is_final(it->second.state))
      throw Error(CONVEYOR_E_NOT_FOUND,
                  "no job " + std::to_string(job_id) + " that can be cancelled (" +
                      (it == store_->jobs.end() ? "no such job" : "already finished") + ")");
    // A RUNNING job's lease is voided with it: its worker gets LEASE_LOST.
    store_->make_final(it->second, CONVEYOR_JOB_CANCELLED, now_us);
  }

  void set_queue_paused(std::string_view queue, bool paused, int64_t /*now_us*/) {
    if (queue.empty()) throw Error(CONVEYOR_E_INVALID, "empty queue name");
    std::lock_guard lock(store_->mu);
    store_->queue(queue).paused = paused;  // a queue with no jobs may be paused
    store_->marker++;
    store_->notify(CONVEYOR_NOTIFY_QUEUE_STATE, queue);
  }

  void queue_stats(int64_t now_us, const QueueStatsSink& sink) {
    std::lock_guard lock(store_->mu);
    for (const auto& [name, q] : store_->queues) {
      const int64_t* c = q.count;
      const int64_t retained = c[CONVEYOR_JOB_AVAILABLE] + c[CONVEYOR_JOB_RUNNING] +
                               c[CONVEYOR_JOB_COMPLETED] + c[CONVEYOR_JOB_FAILED] +
                               c[CONVEYOR_JOB_CANCELLED];
      if (retained == 0 && !q.paused) continue;  // "retained jobs or is paused"
      conveyor_queue_stats out{};
      out.struct_size = sizeof out;
      out.paused = q.paused ? 1 : 0;
      out.queue = str(name);
      for (const auto& [priority, run_at_us, id] : q.available) {
        if (run_at_us > now_us)
          ++out.scheduled;
        else if (out.oldest_pending_run_at_us == 0 || run_at_us < out.oldest_pending_run_at_us)
          out.oldest_pending_run_at_us = run_at_us;
      }
      out.pending = c[CONVEYOR_JOB_AVAILABLE] - out.scheduled;
      out.running = c[CONVEYOR_JOB_RUNNING];
      out.completed = c[CONVEYOR_JOB_COMPLETED];
      out.failed = c[CONVEYOR_JOB_FAILED];
      out.cancelled = c[CONVEYOR_JOB_CANCELLED];
      sink(out);
    }
  }

  void list_queues(const QueueSink& sink) {
    std::lock_guard lock(store_->mu);
    for (const auto& [name, q] : store_->queues) sink(name, q.paused);  // no job is looked at
  }

  void get_job(int64_t job_id, int64_t now_us, const JobSink& sink) {
    std::lock_guard lock(store_->mu);
    auto it = store_->jobs.find(job_id);
    if (it == store_->jobs.end())
      throw Error(CONVEYOR_E_NOT_FOUND,
                  "no job " + std::to_string(job_id) + " (never enqueued, or purged)");
    report(it->second, now_us, sink);
  }

  uint64_t purge_finished(int64_t finalized_before_us, uint32_t max_jobs) {
    std::lock_guard lock(store_->mu);
    uint64_t deleted = 0;
    for (auto it = store_->jobs.begin(); it != store_->jobs.end() && deleted < max_jobs;) {
      Job& j = it->second;
      if (is_final(j.state) && j.finalized_at_us < finalized_before_us) {
        j.queue->count[j.state]--;
        it = store_->jobs.erase(it);
        ++deleted;
      } else {
        ++it;
      }
    }
    return deleted;
  }

  void set_rate_limit(std::string_view queue, double rate_per_sec, uint32_t burst, int64_t now_us) {
    set_rate_limit_scoped(queue, rate_per_sec, burst, CONVEYOR_SCOPE_PROCESS, now_us);
  }

  // ABI 1.2's set_rate_limit_v2. The helper has already refused a rate that
  // is not > 0 and finite, burst 0 and an unknown scope (CONVEYOR_E_INVALID).
  void set_rate_limit_scoped(std::string_view queue, double rate_per_sec, uint32_t burst,
                             int32_t scope, int64_t now_us) {
    if (queue.empty()) throw Error(CONVEYOR_E_INVALID, "empty queue name");
    std::lock_guard lock(store_->mu);
    store_->limits.insert_or_assign(std::string(queue), Limit{rate_per_sec, burst, now_us, scope});
    store_->marker++;
    store_->notify(CONVEYOR_NOTIFY_RATE_LIMITS, queue);
  }

  void delete_rate_limit(std::string_view queue) {
    std::lock_guard lock(store_->mu);
    auto it = store_->limits.find(queue);
    if (it == store_->limits.end())
      throw Error(CONVEYOR_E_NOT_FOUND,
                  "queue " + std::string(queue) + " has no rate-limit override");
    store_->limits.erase(it);
    store_->marker++;
    store_->notify(CONVEYOR_NOTIFY_RATE_LIMITS, queue);
  }

  void list_rate_limits(const RateLimitSink& sink) {
    std::lock_guard lock(store_->mu);
    for (const auto& [queue, limit] : store_->limits) {
      conveyor_rate_limit out{};
      out.struct_size = sizeof out;
      out.burst = limit.burst;
      out.queue = str(queue);
      out.rate_per_sec = limit.rate_per_sec;
      out.updated_at_us = limit.updated_at_us;
      out.scope = limit.scope;
      sink(out);
    }
  }

  int64_t change_marker() {
    std::lock_guard lock(store_->mu);
    return store_->marker;
  }

  // ---- ABI 1.1: job operations ----

  // claim, only kinds in the set. Walks the queue's claim order, skipping
  // other kinds (a real backend keeps an index per kind instead).
  uint32_t claim_kinds(std::string_view queue, std::span<const std::string_view> kinds,
                       uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                       int64_t lease_expires_us, const JobSink& sink) {
    std::lock_guard lock(store_->mu);
    auto q = store_->queues.find(queue);
    if (q == store_->queues.end() || q->second.paused) return 0;
    std::vector<int64_t> ids;
    for (const auto& [priority, run_at_us, id] : q->second.available) {
      if (ids.size() == max_jobs) break;
      if (run_at_us > now_us) continue;
      const std::string& kind = store_->jobs.at(id).kind;
      if (std::find(kinds.begin(), kinds.end(), kind) != kinds.end()) ids.push_back(id);
    }
    for (int64_t id : ids) store_->make_running(store_->jobs.at(id), lease_token, lease_expires_us, now_us);
    for (int64_t id : ids) report(store_->jobs.at(id), now_us, sink);
    return static_cast<uint32_t>(ids.size());
  }

  // One page of a queue's jobs in id order (the helper checked the arguments).
  uint32_t list_jobs(std::string_view queue, std::span<const int32_t> states, std::string_view kind,
                     int64_t after_id, uint32_t limit, int64_t now_us, const JobSink& sink) {
    std::lock_guard lock(store_->mu);
    uint32_t listed = 0;
    for (auto it = store_->jobs.upper_bound(after_id); it != store_->jobs.end() && listed < limit;
         ++it) {
      const Job& j = it->second;
      if (j.queue->name != queue || (!kind.empty() && j.kind != kind)) continue;
      const int32_t reported = j.state == CONVEYOR_JOB_AVAILABLE && j.run_at_us > now_us
                                   ? CONVEYOR_JOB_SCHEDULED
                                   : j.state;
      if (!states.empty() && std::find(states.begin(), states.end(), reported) == states.end())
        continue;
      report(j, now_us, sink);
      ++listed;
    }
    return listed;
  }

  // FAILED or CANCELLED -> AVAILABLE now, attempts reset; last_error kept.
  void retry_jobs(std::span<const int64_t> ids, int64_t now_us,
                  std::span<conveyor_status> results) {
    std::lock_guard lock(store_->mu);
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = store_->jobs.find(ids[i]);
      if (it == store_->jobs.end()) {
        results[i] = CONVEYOR_E_NOT_FOUND;
        continue;
      }
      Job& j = it->second;
      if (j.state != CONVEYOR_JOB_FAILED && j.state != CONVEYOR_JOB_CANCELLED) {
        results[i] = CONVEYOR_E_WRONG_STATE;
        continue;
      }
      store_->make_available(j, now_us);
      j.attempt = 0;
      j.finalized_at_us = 0;
      store_->notify(CONVEYOR_NOTIFY_JOBS, j.queue->name);
      results[i] = CONVEYOR_OK;
    }
  }

  // Deletes final jobs; others are kept.
  void delete_jobs(std::span<const int64_t> ids, std::span<conveyor_status> results) {
    std::lock_guard lock(store_->mu);
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = store_->jobs.find(ids[i]);
      if (it == store_->jobs.end()) {
        results[i] = CONVEYOR_E_NOT_FOUND;
      } else if (!is_final(it->second.state)) {
        results[i] = CONVEYOR_E_WRONG_STATE;
      } else {
        it->second.queue->count[it->second.state]--;
        store_->jobs.erase(it);
        results[i] = CONVEYOR_OK;
      }
    }
  }

  // The counts are maintained per queue already (Queue::count): queue_stats
  // never scans retained jobs here.
  void job_counts(int64_t now_us, const QueueStatsSink& sink) { queue_stats(now_us, sink); }

  // ---- ABI 1.4: job keys ----

  // Up to max_jobs ready jobs of each listed key, in claim order, all in one
  // step (under one lock). Only the listed keys' entries of the per-key index
  // are read. The helper has refused duplicate and over-long keys, and calls
  // this only with at least one key.
  uint32_t claim_keys(std::string_view queue, std::span<const std::string_view> kinds,
                      std::span<const KeyClaim> keys, int64_t lease_token, int64_t now_us,
                      int64_t lease_expires_us, const JobSink& sink) {
    std::lock_guard lock(store_->mu);
    auto q = store_->queues.find(queue);
    if (q == store_->queues.end() || q->second.paused) return 0;
    std::vector<int64_t> ids;
    for (const KeyClaim& wanted : keys) {
      auto jobs_of_key = q->second.available_by_key.find(wanted.key);
      if (jobs_of_key == q->second.available_by_key.end()) continue;  // no jobs: nothing to take
      uint32_t taken = 0;
      for (const auto& [priority, run_at_us, id] : jobs_of_key->second) {
        if (taken == wanted.max_jobs) break;
        if (run_at_us > now_us) continue;  // not yet due
        const std::string& kind = store_->jobs.at(id).kind;
        if (!kinds.empty() && std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) continue;
        ids.push_back(id);
        ++taken;
      }
    }
    for (int64_t id : ids) store_->make_running(store_->jobs.at(id), lease_token, lease_expires_us, now_us);
    for (int64_t id : ids) report(store_->jobs.at(id), now_us, sink);
    return static_cast<uint32_t>(ids.size());
  }

  // One page of the keys with ready jobs, in key order, each with its ready
  // jobs counted up to count_limit. A key whose jobs are all scheduled for
  // later is read (its jobs are counted as not yet due) but not listed.
  uint32_t list_ready_keys(std::string_view queue, std::optional<std::string_view> after_key,
                           uint32_t limit, uint32_t count_limit, int64_t now_us,
                           const ReadyKeySink& sink) {
    std::lock_guard lock(store_->mu);
    auto q = store_->queues.find(queue);
    if (q == store_->queues.end()) return 0;  // an unknown queue lists nothing
    const auto& by_key = q->second.available_by_key;
    uint32_t listed = 0;
    for (auto it = after_key ? by_key.upper_bound(*after_key) : by_key.begin();
         it != by_key.end() && listed < limit; ++it) {
      int64_t ready = 0;
      for (const auto& [priority, run_at_us, id] : it->second)
        if (run_at_us <= now_us && ++ready == count_limit) break;
      if (ready == 0) continue;
      conveyor_ready_key out{};
      out.struct_size = sizeof out;
      out.key = str(it->first);
      out.ready = ready;
      sink(out);
      ++listed;
    }
    return listed;
  }

  // ---- ABI 1.2 and 1.3: shared records ----

  // Compare-and-set of one record (the helper has checked the key's length).
  // Under the store's mutex, so every swap is atomic against every other
  // call on the key, from any handle of this store.
  SharedRecord swap_shared_state(std::string_view key, int64_t expected_version,
                                 int64_t new_value) {
    std::lock_guard lock(store_->mu);
    auto it = store_->shared.find(key);
    const Shared now = it == store_->shared.end() ? Shared{} : it->second;
    if (expected_version < 0 || expected_version != now.version)
      return {now.version, now.value, false};  // a read, or a lost swap: nothing changes
    const Shared after{now.version + 1, new_value};
    store_->shared.insert_or_assign(std::string(key), after);
    return {after.version, after.value, true};
  }

  // A bounded add in one step (the helper checked every range).
  SharedAddResult add_shared_state(std::string_view key, const SharedAdd& add) {
    std::lock_guard lock(store_->mu);
    return add_locked(key, add);
  }

  // ABI 1.5: add_shared_state on each key, in order (the helper checked every
  // add and that no key is listed twice). One hold of the store's mutex
  // covers the batch, so each add is atomic on its key, as add_shared_state.
  void add_shared_states(std::span<const KeyedAdd> adds, std::span<SharedAddResult> out) {
    std::lock_guard lock(store_->mu);
    for (size_t i = 0; i < adds.size(); ++i) out[i] = add_locked(adds[i].key, adds[i].add);
  }

  // ABI 1.5: deletes up to limit records whose key starts with prefix (a
  // plain byte comparison, no pattern: '%' and '_' are bytes like others)
  // and whose value is below value_below. The map is in key order, so the
  // keys with the prefix are one range from lower_bound(prefix). Under the
  // mutex, a record a concurrent swap moved to value_below or above is seen
  // as such and kept.
  uint32_t delete_shared_states(std::string_view prefix, int64_t value_below, uint32_t limit) {
    std::lock_guard lock(store_->mu);
    uint32_t deleted = 0;
    for (auto it = store_->shared.lower_bound(prefix);
         it != store_->shared.end() && deleted < limit && it->first.starts_with(prefix);) {
      if (it->second.value < value_below) {
        it = store_->shared.erase(it);  // reads as never written: (0, 0)
        ++deleted;
      } else {
        ++it;
      }
    }
    return deleted;
  }

  // ---- ABI 1.5: key settings ----

  // Stores the named fields of the setting's row, keeping the others (the
  // helper has checked every field, the target and the key, and filled only
  // the named fields). A change like an override's: the marker moves and
  // waiters hear CONVEYOR_NOTIFY_RATE_LIMITS for the queue.
  void set_key_setting(const KeySetting& setting, int64_t now_us) {
    std::lock_guard lock(store_->mu);
    KeySetting& row =
        store_->key_settings[KeySettingId{setting.queue, setting.target, setting.key}];
    row.queue = setting.queue;
    row.target = setting.target;
    row.key = setting.key;
    if (setting.fields & CONVEYOR_KEY_FIELD_RATE) {
      row.rate_per_sec = setting.rate_per_sec;
      row.burst = setting.burst;
      row.scope = setting.scope;
    }
    if (setting.fields & CONVEYOR_KEY_FIELD_WEIGHT) row.weight = setting.weight;
    row.fields |= setting.fields;
    row.updated_at = now_us;
    store_->marker++;
    store_->notify(CONVEYOR_NOTIFY_RATE_LIMITS, setting.queue);
  }

  // Clears the named fields of the row; a row left with none is removed.
  // Whether any of them was set: clearing what is not there changes nothing
  // (no marker move, no notification).
  bool delete_key_setting(std::string_view queue, int32_t target, std::string_view key,
                          uint32_t fields) {
    std::lock_guard lock(store_->mu);
    auto it = store_->key_settings.find(KeySettingId{std::string(queue), target, std::string(key)});
    if (it == store_->key_settings.end() || (it->second.fields & fields) == 0) return false;
    KeySetting& row = it->second;
    if (fields & CONVEYOR_KEY_FIELD_RATE) {
      row.rate_per_sec = 0;
      row.burst = 0;
      row.scope = CONVEYOR_SCOPE_PROCESS;
    }
    if (fields & CONVEYOR_KEY_FIELD_WEIGHT) row.weight = 0;
    row.fields &= ~fields;
    if (row.fields == 0) store_->key_settings.erase(it);
    store_->marker++;
    store_->notify(CONVEYOR_NOTIFY_RATE_LIMITS, queue);
    return true;
  }

  // Every row in the map's order (queue, target, key); view() reports the
  // fields stored and zero for the others.
  void list_key_settings(const KeySettingSink& sink) {
    std::lock_guard lock(store_->mu);
    for (const auto& [id, row] : store_->key_settings) sink(row.view());
  }

  // Present, so the helper sets CONVEYOR_CAP_NOTIFY and fills the optional
  // slot. Blocks until this handle has a note or the timeout passes.
  void wait_for_notification(int64_t timeout_us, const NotifySink& sink) {
    std::vector<std::pair<int32_t, std::string>> taken;
    {
      std::unique_lock lock(store_->mu);
      const auto timeout = std::chrono::microseconds(std::clamp<int64_t>(
          timeout_us, 0, int64_t{3600} * 1'000'000));  // steady clock: no wall-clock jumps
      store_->noted.wait_for(lock, timeout, [&] { return !notes_.empty(); });
      taken.swap(notes_);
    }
    for (const auto& [kind, queue] : taken) sink(kind, queue);  // without the lock
  }

 private:
  friend struct Store;

  // add_shared_state's step, with store_->mu held: apply_shared_add is the
  // header's arithmetic; an add of nothing changes nothing and makes no key.
  SharedAddResult add_locked(std::string_view key, const SharedAdd& add) {
    auto it = store_->shared.find(key);
    const Shared now = it == store_->shared.end() ? Shared{} : it->second;
    const conveyor::sdk::SharedAddOutcome o = conveyor::sdk::apply_shared_add(now.value, add);
    if (o.count == 0) return {now.version, now.value, 0};
    const Shared after{now.version + 1, o.value};
    store_->shared.insert_or_assign(std::string(key), after);
    return {after.version, after.value, o.count};
  }

  std::shared_ptr<Store> store_;
  // Pending notifications, one per (kind, queue); guarded by store_->mu.
  std::vector<std::pair<int32_t, std::string>> notes_;
};

// Queues a note on every open handle of the store (deduplicated, so a handle
// that never waits holds at most three per queue) and wakes the waiters.
// Called with mu held.
void Store::notify(int32_t kind, std::string_view queue) {
  for (MemoryStorage* h : handles) {
    bool seen = false;
    for (const auto& [k, q] : h->notes_) seen = seen || (k == kind && q == queue);
    if (!seen) h->notes_.emplace_back(kind, std::string(queue));
  }
  noted.notify_all();
}

}  // namespace
}  // namespace memory_plugin

// The one exported symbol, conveyor_storage_plugin_entry: the helper builds
// the table (sizeof as compiled, this header's ABI version) and returns NULL
// to a host of another major.
CONVEYOR_EXPORT_STORAGE_PLUGIN(memory_plugin::MemoryStorage, "memory_cpp", "1.0.0",
                               CONVEYOR_KIND_CANONICAL, 0)
