// A plugin that wraps a real one and breaks one behaviour on purpose: the
// suite's own test. Run under conveyor-conformance with --option mutant=NAME,
// the test that guards NAME's behaviour must fail (CTest checks it, see
// ../CMakeLists.txt); with mutant=none everything passes through untouched.
//
// The wrapped plugin is the file named by the environment variable
// CONVEYOR_MUTANT_INNER, loaded when the entry point is first called. The
// mutant option is removed before the inner open sees the options. Slots
// after ABI 1.1 are wrapped only where the inner plugin has them (the ABI
// 1.4 and 1.5 bugs need an inner plugin with those slots; the 1.5 ones also
// one whose change marker moves by one per change, as the C++ example's).
#include <conveyor/storage_plugin.h>

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

namespace {

const conveyor_storage_plugin* inner = nullptr;  // set once by the entry point

struct Mutant {
  conveyor_storage* storage = nullptr;
  std::string bug;  // "none" or one of the names below
  bool is(std::string_view name) const { return bug == name; }
  // counts_cached: the first job_counts answer (queue names owned here).
  std::mutex counts_mu;
  bool counts_taken = false;
  std::vector<std::pair<std::string, conveyor_queue_stats>> counts;
  // key_set_static_marker: the set_key_setting calls that applied, hidden
  // from change_marker (the inner marker moves by one per change).
  std::atomic<int64_t> key_sets{0};
};

Mutant* self(conveyor_storage* s) { return reinterpret_cast<Mutant*>(s); }
conveyor_storage* in(conveyor_storage* s) { return self(s)->storage; }

void set_error(conveyor_error* err, conveyor_status code, const char* message) {
  if (err == nullptr) return;
  err->code = code;
  std::snprintf(err->message, sizeof err->message, "%s", message);
}

constexpr const char* kBugs[] = {
    "none",               // pass everything through
    "ignore_lease",       // complete: any token completes a RUNNING job
    "worst_first",        // claim: the lowest-priority jobs first
    "claim_early",        // claim: jobs become ready 1 s before run_at
    "rescue_inclusive",   // rescue_expired: also leases expiring exactly at now
    "cancel_final_ok",    // cancel: a final job "cancels" fine
    "static_marker",      // change_marker: never changes
    "accept_nan",         // set_rate_limit: NaN stored as 1/s
    "payload_cstr",       // enqueue: payload cut at its first NUL byte
    "late_callback",      // get_job: calls the previous call's callback again
    "empty_message",      // every error without a message
    "crash_on_null",      // claim: calls a NULL on_job
    "hang_on_purge",      // purge_finished: never returns
    "duplicate_claim",    // claim: every 50th claim also reports an earlier job
    "small_struct",       // get_job: struct_size smaller than conveyor_job
    "retry_now",          // fail: retry_at ignored, retried at once
    "purge_inclusive",    // purge_finished: also jobs finalized at the cutoff
    "pause_ignored",      // set_queue_paused: does nothing
    "unknown_option_ok",  // open: ignores unknown options
    // ABI 1.1
    "created_plugin_clock",    // enqueue_v2: the 1.0 enqueue (created_at from the plugin's clock)
    "kinds_ignored",           // claim_kinds: a plain claim
    "kinds_first_only",        // claim_kinds: only the first kind of the set
    "list_ignores_after",      // list_jobs: always from the first id
    "list_ignores_states",     // list_jobs: every state
    "list_ignores_kind",       // list_jobs: every kind
    "list_no_max",             // list_jobs: a limit above the maximum is cut to it
    "retry_later",             // retry_jobs: available an hour after now_us
    "retry_wrong_state_ok",    // retry_jobs: WRONG_STATE reported as OK
    "delete_any_state",        // delete_jobs: cancels a job that is not final, then deletes it
    "delete_nothing",          // delete_jobs: reports OK, deletes nothing
    "counts_no_scheduled",     // job_counts: scheduled jobs counted as pending
    "counts_cached",           // job_counts: the handle's first answer, forever
    "rescue_reports_running",  // rescue_expired_v2: jobs reported as they were (RUNNING)
    "oldest_zero",             // queue_stats, job_counts: oldest_pending_run_at_us always 0
    // ABI 1.4
    "key_dropped",                // enqueue_v4: every job stored with the empty key
    "cost_dropped_v4",            // enqueue_v4: every job stored with cost 1
    "old_enqueue_keyed",          // enqueue_v2: each job stored with its kind as its key
    "long_key_cut",               // enqueue_v4: a key longer than the maximum is cut to it
    "keys_ignore_max",            // claim_keys: every ready job of each listed key
    "keys_worst_first",           // claim_keys: the last max_jobs of each key in claim order
    "keys_unlisted",              // claim_keys: claim_kinds of the sum of max_jobs, any key
    "keys_ignore_kinds",          // claim_keys: no kind filter
    "keys_claim_early",           // claim_keys: jobs ready 1 s before run_at
    "keys_none_is_all",           // claim_keys: no keys claims from every key
    "keys_duplicate_ok",          // claim_keys: a key listed twice counts once
    "keys_duplicate_claim",       // claim_keys: every 10th call also reports an earlier job
    "ready_scheduled",            // list_ready_keys: jobs due within 2 h count as ready
    "ready_empty_last",           // list_ready_keys: the empty key after the others
    "ready_no_count_limit",       // list_ready_keys: count_limit ignored
    "ready_ignores_after",        // list_ready_keys: always from the first key
    "ready_after_empty_is_null",  // list_ready_keys: an empty after_key taken as NULL
    "ready_no_max",               // list_ready_keys: a limit above the maximum is cut to it
    // ABI 1.5
    "key_set_replaces",           // set_key_setting: fields not named are cleared, not kept
    "key_delete_row",             // delete_key_setting: removes the whole row, whatever fields
    "key_delete_always_cleared",  // delete_key_setting: *out_cleared = 1 even when nothing was set
    "key_noop_delete_marks",      // delete_key_setting: clearing nothing still moves the marker
    "key_list_every_first",       // list_key_settings: EVERY before ONE within a queue
    "key_set_static_marker",      // set_key_setting: the change marker does not move
    "key_weight_clamped",         // set_key_setting: a weight above the maximum clamped to it
    "key_updated_plugin_clock",   // set_key_setting: updated_at from the plugin's clock
    "forget_ignores_value",       // delete_shared_states: every value counts as below
    "forget_inclusive",           // delete_shared_states: also values equal to value_below
    "forget_like_pattern",        // delete_shared_states: the prefix read as a LIKE pattern
    "forget_shorter_prefix",      // delete_shared_states: the prefix less its last byte
    "forget_ignores_limit",       // delete_shared_states: deletes all, reports at most limit
    "adds_ignore_min_count",      // add_shared_states: every min_count taken as 1
    "adds_first_only",            // add_shared_states: only adds[0] applied, the rest read
    "adds_drop_last",             // add_shared_states: the last add read, not applied
    "adds_swap_results",          // add_shared_states: out[0] and out[1] swapped
    "adds_accept_duplicates",     // add_shared_states: a key listed twice added twice
    "adds_partial_on_invalid",    // add_shared_states: adds before an invalid one applied
    "adds_message_no_index",      // add_shared_states: a refusal's message names no index
    "adds_no_max",                // add_shared_states: n above the maximum taken in parts
    "adds_zero_invalid",          // add_shared_states: n == 0 refused
    "adds_no_version_bump",       // add_shared_states: applied adds report the version before
    "adds_lost_update",           // add_shared_states: read, compute, then swap from a fresh read
    // ABI 1.6
    "timeout_dropped",  // enqueue_v5: every job stored with timeout 0
    "timeout_clamped",  // enqueue_v5: a timeout above the maximum stored as the maximum
    "started_at_zero",  // get_job: started_at_us reported as 0
};

bool known_bug(std::string_view name) {
  for (const char* b : kBugs)
    if (name == b) return true;
  return false;
}

conveyor_status m_open(const conveyor_option* options, size_t n, conveyor_storage** out,
                       conveyor_error* err) {
  std::string bug = "none";
  std::vector<conveyor_option> pass;
  for (size_t i = 0; i < n; ++i) {
    std::string_view key(options[i].key.data, options[i].key.len);
    if (key == "mutant") {
      bug.assign(options[i].value.data, options[i].value.len);
      continue;
    }
    pass.push_back(options[i]);
  }
  if (!known_bug(bug)) {
    set_error(err, CONVEYOR_E_INVALID, ("unknown mutant '" + bug + "'").c_str());
    return CONVEYOR_E_INVALID;
  }
  if (bug == "unknown_option_ok") {
    std::vector<conveyor_option> known;
    for (const conveyor_option& o : pass)
      if (std::string_view(o.key.data, o.key.len).find("no_such") == std::string_view::npos)
        known.push_back(o);
    pass = known;
  }
  if (out == nullptr) return inner->open(pass.data(), pass.size(), out, err);
  conveyor_storage* s = nullptr;
  conveyor_status st = inner->open(pass.data(), pass.size(), &s, err);
  if (st != CONVEYOR_OK) return st;
  auto* m = new (std::nothrow) Mutant;
  if (m != nullptr) {
    m->storage = s;
    m->bug = bug;
  }
  if (m == nullptr) {
    inner->close(s);
    set_error(err, CONVEYOR_E_INTERNAL, "out of memory");
    return CONVEYOR_E_INTERNAL;
  }
  *out = reinterpret_cast<conveyor_storage*>(m);
  return CONVEYOR_OK;
}

void m_close(conveyor_storage* s) {
  if (s == nullptr) return;
  inner->close(in(s));
  delete self(s);
}

// Applies empty_message to a failing status.
conveyor_status out_status(conveyor_storage* s, conveyor_status st, conveyor_error* err) {
  if (st != CONVEYOR_OK && err != nullptr && self(s)->is("empty_message")) err->message[0] = '\0';
  return st;
}

conveyor_status m_migrate(conveyor_storage* s, conveyor_error* err) {
  return out_status(s, inner->migrate(in(s), err), err);
}

conveyor_status m_enqueue(conveyor_storage* s, const conveyor_new_job* jobs, size_t n, int64_t* ids,
                          conveyor_error* err) {
  if (self(s)->is("payload_cstr") && jobs != nullptr) {
    std::vector<conveyor_new_job> cut(jobs, jobs + n);
    for (conveyor_new_job& j : cut)
      if (j.payload.data != nullptr) j.payload.len = strnlen(j.payload.data, j.payload.len);
    return inner->enqueue(in(s), cut.data(), n, ids, err);
  }
  return out_status(s, inner->enqueue(in(s), jobs, n, ids, err), err);
}

// Jobs reported by an inner call; only their numbers are used (their
// strings die with the callback).
struct Collected {
  std::vector<conveyor_job> jobs;
};
void collect(void* ctx, const conveyor_job* j) {
  auto* c = static_cast<Collected*>(ctx);
  conveyor_job copy = *j;
  c->jobs.push_back(copy);
}

std::mutex dup_mu;
std::string dup_queue;
conveyor_job dup_job{};  // the job duplicate_claim reports again (strings: empty)
std::atomic<int> claim_count{0};

conveyor_status m_claim(conveyor_storage* s, conveyor_str queue, uint32_t max_jobs, int64_t token,
                        int64_t now, int64_t expires, conveyor_job_fn on_job, void* ctx,
                        uint32_t* out_claimed, conveyor_error* err) {
  Mutant& m = *self(s);
  if (m.is("crash_on_null") && on_job == nullptr) {
    conveyor_job j{};
    on_job(ctx, &j);  // the bug: a NULL callback called
  }
  if (m.is("claim_early")) now += 1'000'000;
  if (m.is("worst_first") && max_jobs > 0 && on_job != nullptr && out_claimed != nullptr) {
    // Claim everything ready, keep the last max_jobs in claim order, give the rest back.
    Collected all;
    uint32_t n = 0;
    conveyor_status st =
        inner->claim(in(s), queue, 1000, token, now, expires, collect, &all, &n, err);
    if (st != CONVEYOR_OK) return st;
    const size_t keep = std::min<size_t>(max_jobs, all.jobs.size());
    std::vector<conveyor_lease> back;
    for (size_t i = 0; i + keep < all.jobs.size(); ++i)
      back.push_back({all.jobs[i].id, all.jobs[i].lease_token});
    std::vector<conveyor_status> r(back.size());
    if (!back.empty()) inner->release(in(s), back.data(), back.size(), now, r.data(), err);
    // The kept ones are reported from a fresh read (the copies' strings are gone).
    *out_claimed = 0;
    for (size_t i = all.jobs.size() - keep; i < all.jobs.size(); ++i) {
      inner->get_job(in(s), all.jobs[i].id, now, on_job, ctx, err);
      ++*out_claimed;
    }
    return CONVEYOR_OK;
  }
  if (m.is("duplicate_claim") && on_job != nullptr && out_claimed != nullptr) {
    struct Tee {
      conveyor_job_fn fn;
      void* ctx;
    } tee{on_job, ctx};
    auto forward = [](void* c, const conveyor_job* j) {
      auto* t = static_cast<Tee*>(c);
      {
        std::lock_guard lock(dup_mu);
        dup_job = *j;
        dup_job.queue = dup_job.kind = dup_job.payload = dup_job.last_error = conveyor_str{"", 0};
      }
      t->fn(t->ctx, j);
    };
    conveyor_status st =
        inner->claim(in(s), queue, max_jobs, token, now, expires, forward, &tee, out_claimed, err);
    if (st == CONVEYOR_OK && *out_claimed > 0 && ++claim_count % 50 == 0) {
      std::lock_guard lock(dup_mu);
      conveyor_job again = dup_job;
      again.queue = queue;
      on_job(ctx, &again);
      ++*out_claimed;
    }
    return st;
  }
  return out_status(
      s, inner->claim(in(s), queue, max_jobs, token, now, expires, on_job, ctx, out_claimed, err),
      err);
}

conveyor_status m_complete(conveyor_storage* s, const conveyor_lease* leases, size_t n, int64_t now,
                           conveyor_status* results, conveyor_error* err) {
  if (self(s)->is("ignore_lease") && leases != nullptr) {
    // Look up each job's current token and use it, whatever the caller said.
    std::vector<conveyor_lease> fixed(leases, leases + n);
    for (conveyor_lease& l : fixed) {
      Collected c;
      if (inner->get_job(in(s), l.job_id, now, collect, &c, nullptr) == CONVEYOR_OK &&
          !c.jobs.empty() && c.jobs[0].state == CONVEYOR_JOB_RUNNING)
        l.lease_token = c.jobs[0].lease_token;
    }
    return inner->complete(in(s), fixed.data(), n, now, results, err);
  }
  return out_status(s, inner->complete(in(s), leases, n, now, results, err), err);
}

conveyor_status m_fail(conveyor_storage* s, conveyor_lease lease, conveyor_str text,
                       int64_t retry_at, int64_t now, conveyor_error* err) {
  if (self(s)->is("retry_now") && retry_at >= 0) retry_at = now;
  return out_status(s, inner->fail(in(s), lease, text, retry_at, now, err), err);
}

conveyor_status m_extend(conveyor_storage* s, const conveyor_lease* leases, size_t n,
                         int64_t expires, conveyor_status* results, conveyor_error* err) {
  return out_status(s, inner->extend_leases(in(s), leases, n, expires, results, err), err);
}

conveyor_status m_release(conveyor_storage* s, const conveyor_lease* leases, size_t n, int64_t now,
                          conveyor_status* results, conveyor_error* err) {
  return out_status(s, inner->release(in(s), leases, n, now, results, err), err);
}

conveyor_status m_rescue(conveyor_storage* s, int64_t now, uint32_t max_jobs, uint32_t* out,
                         conveyor_error* err) {
  if (self(s)->is("rescue_inclusive")) now += 1;
  return out_status(s, inner->rescue_expired(in(s), now, max_jobs, out, err), err);
}

conveyor_status m_cancel(conveyor_storage* s, int64_t id, int64_t now, conveyor_error* err) {
  conveyor_status st = inner->cancel(in(s), id, now, err);
  if (self(s)->is("cancel_final_ok") && st == CONVEYOR_E_NOT_FOUND) {
    Collected c;
    if (inner->get_job(in(s), id, now, collect, &c, nullptr) == CONVEYOR_OK) return CONVEYOR_OK;
  }
  return out_status(s, st, err);
}

conveyor_status m_pause(conveyor_storage* s, conveyor_str queue, int32_t paused, int64_t now,
                        conveyor_error* err) {
  if (self(s)->is("pause_ignored")) return CONVEYOR_OK;
  return out_status(s, inner->set_queue_paused(in(s), queue, paused, now, err), err);
}

// Reports forwarded with oldest_pending_run_at_us zeroed (mutant oldest_zero).
struct OldestTap {
  conveyor_queue_stats_fn fn;
  void* ctx;
  static void forward(void* c, const conveyor_queue_stats* st) {
    auto* t = static_cast<OldestTap*>(c);
    conveyor_queue_stats copy = *st;
    copy.oldest_pending_run_at_us = 0;
    t->fn(t->ctx, &copy);
  }
};

conveyor_status m_stats(conveyor_storage* s, int64_t now, conveyor_queue_stats_fn fn, void* ctx,
                        conveyor_error* err) {
  if (self(s)->is("oldest_zero") && fn != nullptr) {
    OldestTap tap{fn, ctx};
    return out_status(s, inner->queue_stats(in(s), now, &OldestTap::forward, &tap, err), err);
  }
  return out_status(s, inner->queue_stats(in(s), now, fn, ctx, err), err);
}

conveyor_status m_list_queues(conveyor_storage* s, conveyor_queue_fn fn, void* ctx,
                              conveyor_error* err) {
  return out_status(s, inner->list_queues(in(s), fn, ctx, err), err);
}

std::mutex late_mu;
conveyor_job_fn late_fn = nullptr;
void* late_ctx = nullptr;

conveyor_status m_get_job(conveyor_storage* s, int64_t id, int64_t now, conveyor_job_fn fn,
                          void* ctx, conveyor_error* err) {
  Mutant& m = *self(s);
  if (m.is("late_callback")) {
    std::lock_guard lock(late_mu);
    if (late_fn != nullptr) {
      conveyor_job stale{};
      stale.struct_size = sizeof stale;
      stale.state = CONVEYOR_JOB_AVAILABLE;
      stale.id = id;
      late_fn(late_ctx, &stale);  // the previous call's callback, after it returned
    }
    late_fn = fn;
    late_ctx = ctx;
  }
  if (m.is("started_at_zero") && fn != nullptr) {
    struct Zero {
      conveyor_job_fn fn;
      void* ctx;
    } z{fn, ctx};
    return out_status(s,
                      inner->get_job(
                          in(s), id, now,
                          [](void* c, const conveyor_job* j) {
                            auto* x = static_cast<Zero*>(c);
                            conveyor_job copy = *j;
                            copy.started_at_us = 0;
                            x->fn(x->ctx, &copy);
                          },
                          &z, err),
                      err);
  }
  if (m.is("small_struct") && fn != nullptr) {
    struct Shrink {
      conveyor_job_fn fn;
      void* ctx;
    } sh{fn, ctx};
    return inner->get_job(
        in(s), id, now,
        [](void* c, const conveyor_job* j) {
          auto* x = static_cast<Shrink*>(c);
          conveyor_job copy = *j;
          copy.struct_size = 8;
          x->fn(x->ctx, &copy);
        },
        &sh, err);
  }
  return out_status(s, inner->get_job(in(s), id, now, fn, ctx, err), err);
}

conveyor_status m_purge(conveyor_storage* s, int64_t before, uint32_t max_jobs, uint64_t* out,
                        conveyor_error* err) {
  if (self(s)->is("hang_on_purge"))
    for (;;) ::pause();
  if (self(s)->is("purge_inclusive")) before += 1;
  return out_status(s, inner->purge_finished(in(s), before, max_jobs, out, err), err);
}

conveyor_status m_set_rate(conveyor_storage* s, conveyor_str queue, double rate, uint32_t burst,
                           int64_t now, conveyor_error* err) {
  if (self(s)->is("accept_nan") && std::isnan(rate)) rate = 1.0;
  return out_status(s, inner->set_rate_limit(in(s), queue, rate, burst, now, err), err);
}

conveyor_status m_delete_rate(conveyor_storage* s, conveyor_str queue, conveyor_error* err) {
  return out_status(s, inner->delete_rate_limit(in(s), queue, err), err);
}

conveyor_status m_list_rates(conveyor_storage* s, conveyor_rate_limit_fn fn, void* ctx,
                             conveyor_error* err) {
  return out_status(s, inner->list_rate_limits(in(s), fn, ctx, err), err);
}

conveyor_status m_marker(conveyor_storage* s, int64_t* out, conveyor_error* err) {
  if (self(s)->is("static_marker") && out != nullptr) {
    *out = 7;
    return CONVEYOR_OK;
  }
  conveyor_status st = inner->change_marker(in(s), out, err);
  if (st == CONVEYOR_OK && self(s)->is("key_set_static_marker")) *out -= self(s)->key_sets.load();
  return out_status(s, st, err);
}

// ---- ABI 1.1 ----
conveyor_status m_enqueue_v2(conveyor_storage* s, const conveyor_new_job* jobs, size_t n,
                             int64_t now, int64_t* ids, conveyor_error* err) {
  if (self(s)->is("created_plugin_clock"))
    return out_status(s, inner->enqueue(in(s), jobs, n, ids, err), err);
  if (self(s)->is("old_enqueue_keyed") && jobs != nullptr &&
      inner->struct_size >= CONVEYOR_PLUGIN_V1_4_SIZE && inner->enqueue_v4 != nullptr) {
    std::vector<conveyor_new_job_v3> keyed;
    for (size_t i = 0; i < n; ++i) keyed.push_back({{jobs[i], 1, 0}, jobs[i].kind});
    return out_status(s, inner->enqueue_v4(in(s), keyed.data(), n, now, ids, err), err);
  }
  return out_status(s, inner->enqueue_v2(in(s), jobs, n, now, ids, err), err);
}
conveyor_status m_claim_kinds(conveyor_storage* s, conveyor_str queue, const conveyor_str* kinds,
                              size_t n_kinds, uint32_t max_jobs, int64_t token, int64_t now,
                              int64_t expires, conveyor_job_fn fn, void* ctx, uint32_t* out,
                              conveyor_error* err) {
  if (self(s)->is("kinds_ignored")) n_kinds = 0;
  if (self(s)->is("kinds_first_only") && n_kinds > 1) n_kinds = 1;
  return out_status(s,
                    inner->claim_kinds(in(s), queue, kinds, n_kinds, max_jobs, token, now, expires,
                                       fn, ctx, out, err),
                    err);
}
conveyor_status m_list_jobs(conveyor_storage* s, conveyor_str queue, const int32_t* states,
                            size_t n_states, conveyor_str kind, int64_t after_id, uint32_t limit,
                            int64_t now, conveyor_job_fn fn, void* ctx, uint32_t* out,
                            conveyor_error* err) {
  Mutant& m = *self(s);
  if (m.is("list_ignores_after")) after_id = 0;
  if (m.is("list_ignores_states")) n_states = 0;
  if (m.is("list_ignores_kind")) kind = conveyor_str{nullptr, 0};
  if (m.is("list_no_max") && limit > CONVEYOR_LIST_JOBS_MAX) limit = CONVEYOR_LIST_JOBS_MAX;
  return out_status(s,
                    inner->list_jobs(in(s), queue, states, n_states, kind, after_id, limit, now, fn,
                                     ctx, out, err),
                    err);
}
conveyor_status m_retry_jobs(conveyor_storage* s, const int64_t* ids, size_t n, int64_t now,
                             conveyor_status* results, conveyor_error* err) {
  if (self(s)->is("retry_later")) now += int64_t{3600} * 1'000'000;
  conveyor_status st = inner->retry_jobs(in(s), ids, n, now, results, err);
  if (st == CONVEYOR_OK && self(s)->is("retry_wrong_state_ok"))
    for (size_t i = 0; i < n; ++i)
      if (results[i] == CONVEYOR_E_WRONG_STATE) results[i] = CONVEYOR_OK;
  return out_status(s, st, err);
}
conveyor_status m_delete_jobs(conveyor_storage* s, const int64_t* ids, size_t n,
                              conveyor_status* results, conveyor_error* err) {
  if (self(s)->is("delete_nothing") && results != nullptr) {
    for (size_t i = 0; i < n; ++i) results[i] = CONVEYOR_OK;
    return CONVEYOR_OK;
  }
  if (self(s)->is("delete_any_state") && ids != nullptr)
    for (size_t i = 0; i < n; ++i) inner->cancel(in(s), ids[i], 1, nullptr);
  return out_status(s, inner->delete_jobs(in(s), ids, n, results, err), err);
}
struct CountsTap {
  Mutant* m;
  conveyor_queue_stats_fn fn;
  void* ctx;
};
conveyor_status m_job_counts(conveyor_storage* s, int64_t now, conveyor_queue_stats_fn fn,
                             void* ctx, conveyor_error* err) {
  Mutant& m = *self(s);
  if (m.is("oldest_zero") && fn != nullptr) {
    OldestTap tap{fn, ctx};
    return out_status(s, inner->job_counts(in(s), now, &OldestTap::forward, &tap, err), err);
  }
  if (m.is("counts_no_scheduled") && fn != nullptr) {
    CountsTap tap{&m, fn, ctx};
    return out_status(s,
                      inner->job_counts(
                          in(s), now,
                          [](void* c, const conveyor_queue_stats* st) {
                            auto* t = static_cast<CountsTap*>(c);
                            conveyor_queue_stats copy = *st;
                            copy.pending += copy.scheduled;
                            copy.scheduled = 0;
                            t->fn(t->ctx, &copy);
                          },
                          &tap, err),
                      err);
  }
  if (m.is("counts_cached") && fn != nullptr) {
    std::lock_guard lock(m.counts_mu);
    if (!m.counts_taken) {
      CountsTap tap{&m, fn, ctx};
      conveyor_status st = inner->job_counts(
          in(s), now,
          [](void* c, const conveyor_queue_stats* q) {
            auto* t = static_cast<CountsTap*>(c);
            t->m->counts.emplace_back(std::string(q->queue.data, q->queue.len), *q);
          },
          &tap, err);
      if (st != CONVEYOR_OK) return out_status(s, st, err);
      m.counts_taken = true;
    }
    for (auto& [name, q] : m.counts) {
      conveyor_queue_stats copy = q;
      copy.queue = conveyor_str{name.data(), name.size()};
      fn(ctx, &copy);
    }
    return CONVEYOR_OK;
  }
  return out_status(s, inner->job_counts(in(s), now, fn, ctx, err), err);
}

// Jobs forwarded as RUNNING (mutant rescue_reports_running).
struct RunningTap {
  conveyor_job_fn fn;
  void* ctx;
  static void forward(void* c, const conveyor_job* job) {
    auto* t = static_cast<RunningTap*>(c);
    conveyor_job copy = *job;
    copy.state = CONVEYOR_JOB_RUNNING;
    t->fn(t->ctx, &copy);
  }
};

conveyor_status m_rescue_v2(conveyor_storage* s, int64_t now, uint32_t max_jobs, conveyor_job_fn fn,
                            void* ctx, uint32_t* out, conveyor_error* err) {
  if (self(s)->is("rescue_reports_running") && fn != nullptr) {
    RunningTap tap{fn, ctx};
    return out_status(
        s, inner->rescue_expired_v2(in(s), now, max_jobs, &RunningTap::forward, &tap, out, err),
        err);
  }
  return out_status(s, inner->rescue_expired_v2(in(s), now, max_jobs, fn, ctx, out, err), err);
}

// ---- ABI 1.4 ----
conveyor_status m_enqueue_v4(conveyor_storage* s, const conveyor_new_job_v3* jobs, size_t n,
                             int64_t now, int64_t* ids, conveyor_error* err) {
  Mutant& m = *self(s);
  if ((m.is("key_dropped") || m.is("cost_dropped_v4") || m.is("long_key_cut")) && jobs != nullptr) {
    std::vector<conveyor_new_job_v3> changed(jobs, jobs + n);
    for (conveyor_new_job_v3& j : changed) {
      if (m.is("key_dropped")) j.key = conveyor_str{nullptr, 0};
      if (m.is("cost_dropped_v4")) j.job.cost = 1;
      if (m.is("long_key_cut")) j.key.len = std::min<size_t>(j.key.len, CONVEYOR_JOB_KEY_MAX);
    }
    return out_status(s, inner->enqueue_v4(in(s), changed.data(), n, now, ids, err), err);
  }
  return out_status(s, inner->enqueue_v4(in(s), jobs, n, now, ids, err), err);
}

// ---- ABI 1.6 ----
conveyor_status m_enqueue_v5(conveyor_storage* s, const conveyor_new_job_v4* jobs, size_t n,
                             int64_t now, int64_t* ids, conveyor_error* err) {
  Mutant& m = *self(s);
  if ((m.is("timeout_dropped") || m.is("timeout_clamped")) && jobs != nullptr) {
    std::vector<conveyor_new_job_v4> changed(jobs, jobs + n);
    for (conveyor_new_job_v4& j : changed) {
      if (m.is("timeout_dropped")) j.timeout_ms = 0;
      if (m.is("timeout_clamped"))
        j.timeout_ms = std::clamp<int64_t>(j.timeout_ms, 0, CONVEYOR_JOB_TIMEOUT_MAX_MS);
    }
    return out_status(s, inner->enqueue_v5(in(s), changed.data(), n, now, ids, err), err);
  }
  return out_status(s, inner->enqueue_v5(in(s), jobs, n, now, ids, err), err);
}

// A job claimed by keys_worst_first: what ordering, releasing and reporting
// it again need (the reported strings die with the callback).
struct KeyedJob {
  int64_t id, token;
  int32_t priority;
  int64_t run_at_us;
};
void collect_keyed(void* ctx, const conveyor_job* j) {
  static_cast<std::vector<KeyedJob>*>(ctx)->push_back(
      KeyedJob{j->id, j->lease_token, j->priority, j->run_at_us});
}

std::mutex keys_dup_mu;
conveyor_job keys_dup_job{};  // the job keys_duplicate_claim reports again (strings: empty)
std::atomic<int> keys_claim_count{0};

conveyor_status m_claim_keys(conveyor_storage* s, conveyor_str queue, const conveyor_str* kinds,
                             size_t n_kinds, const conveyor_key_claim* keys, size_t n_keys,
                             int64_t token, int64_t now, int64_t expires, conveyor_job_fn on_job,
                             void* ctx, uint32_t* out_claimed, conveyor_error* err) {
  Mutant& m = *self(s);
  const bool usable =
      on_job != nullptr && out_claimed != nullptr && (keys != nullptr || n_keys == 0);
  if (m.is("keys_ignore_kinds")) n_kinds = 0;
  if (m.is("keys_claim_early")) now += 1'000'000;
  if (m.is("keys_none_is_all") && n_keys == 0)
    return out_status(
        s, inner->claim(in(s), queue, 1000, token, now, expires, on_job, ctx, out_claimed, err),
        err);
  if (m.is("keys_unlisted") && usable) {
    uint32_t total = 0;
    for (size_t i = 0; i < n_keys; ++i) total += keys[i].max_jobs;
    return out_status(s,
                      inner->claim_kinds(in(s), queue, kinds, n_kinds, total, token, now, expires,
                                         on_job, ctx, out_claimed, err),
                      err);
  }
  std::vector<conveyor_key_claim> changed(keys, keys + (keys == nullptr ? 0 : n_keys));
  if (m.is("keys_ignore_max"))
    for (conveyor_key_claim& k : changed) k.max_jobs = 1000;
  if (m.is("keys_duplicate_ok")) {
    std::vector<conveyor_key_claim> once;
    for (const conveyor_key_claim& k : changed) {
      bool seen = false;
      for (const conveyor_key_claim& o : once)
        seen = seen || (o.key.len == k.key.len &&
                        (k.key.len == 0 || std::memcmp(o.key.data, k.key.data, k.key.len) == 0));
      if (!seen) once.push_back(k);
    }
    changed = once;
  }
  if (m.is("keys_worst_first") && usable) {
    // Per key: claim every ready job, keep the last max_jobs in claim order,
    // give the rest back.
    *out_claimed = 0;
    for (const conveyor_key_claim& k : changed) {
      conveyor_key_claim all = k;
      all.max_jobs = 1000;
      std::vector<KeyedJob> got;
      uint32_t n = 0;
      conveyor_status st = inner->claim_keys(in(s), queue, kinds, n_kinds, &all, 1, token, now,
                                             expires, collect_keyed, &got, &n, err);
      if (st != CONVEYOR_OK) return out_status(s, st, err);
      std::sort(got.begin(), got.end(), [](const KeyedJob& a, const KeyedJob& b) {
        return std::tie(a.priority, a.run_at_us, a.id) < std::tie(b.priority, b.run_at_us, b.id);
      });
      const size_t keep = std::min<size_t>(k.max_jobs, got.size());
      std::vector<conveyor_lease> back;
      for (size_t i = 0; i + keep < got.size(); ++i) back.push_back({got[i].id, got[i].token});
      std::vector<conveyor_status> r(back.size());
      if (!back.empty()) inner->release(in(s), back.data(), back.size(), now, r.data(), err);
      for (size_t i = got.size() - keep; i < got.size(); ++i) {
        inner->get_job(in(s), got[i].id, now, on_job, ctx, err);
        ++*out_claimed;
      }
    }
    return CONVEYOR_OK;
  }
  const conveyor_key_claim* pass = keys == nullptr ? nullptr : changed.data();
  const size_t n_pass = keys == nullptr ? n_keys : changed.size();
  if (m.is("keys_duplicate_claim") && usable) {
    struct Tee {
      conveyor_job_fn fn;
      void* ctx;
    } tee{on_job, ctx};
    auto forward = [](void* c, const conveyor_job* j) {
      auto* t = static_cast<Tee*>(c);
      {
        std::lock_guard lock(keys_dup_mu);
        keys_dup_job = *j;
        keys_dup_job.queue = keys_dup_job.kind = keys_dup_job.payload = keys_dup_job.last_error =
            keys_dup_job.key = conveyor_str{"", 0};
      }
      t->fn(t->ctx, j);
    };
    conveyor_status st = inner->claim_keys(in(s), queue, kinds, n_kinds, pass, n_pass, token, now,
                                           expires, forward, &tee, out_claimed, err);
    if (st == CONVEYOR_OK && *out_claimed > 0 && ++keys_claim_count % 10 == 0) {
      std::lock_guard lock(keys_dup_mu);
      conveyor_job again = keys_dup_job;
      again.queue = queue;
      on_job(ctx, &again);
      ++*out_claimed;
    }
    return out_status(s, st, err);
  }
  return out_status(s,
                    inner->claim_keys(in(s), queue, kinds, n_kinds, pass, n_pass, token, now,
                                      expires, on_job, ctx, out_claimed, err),
                    err);
}

// Keys reported by list_ready_keys, copied (ready_empty_last reports them
// again in another order).
struct ReadyKeys {
  std::vector<std::pair<std::string, int64_t>> keys;
};
void collect_ready_key(void* ctx, const conveyor_ready_key* k) {
  static_cast<ReadyKeys*>(ctx)->keys.emplace_back(std::string(k->key.data, k->key.len), k->ready);
}

conveyor_status m_list_ready_keys(conveyor_storage* s, conveyor_str queue,
                                  const conveyor_str* after_key, uint32_t limit,
                                  uint32_t count_limit, int64_t now, conveyor_ready_key_fn on_key,
                                  void* ctx, uint32_t* out_listed, conveyor_error* err) {
  Mutant& m = *self(s);
  if (m.is("ready_scheduled")) now += int64_t{7200} * 1'000'000;
  if (m.is("ready_no_count_limit") && count_limit > 0) count_limit = UINT32_MAX;
  if (m.is("ready_ignores_after")) after_key = nullptr;
  if (m.is("ready_after_empty_is_null") && after_key != nullptr && after_key->len == 0)
    after_key = nullptr;
  if (m.is("ready_no_max") && limit > CONVEYOR_LIST_JOBS_MAX) limit = CONVEYOR_LIST_JOBS_MAX;
  if (m.is("ready_empty_last") && on_key != nullptr && out_listed != nullptr) {
    ReadyKeys got;
    conveyor_status st = inner->list_ready_keys(in(s), queue, after_key, limit, count_limit, now,
                                                collect_ready_key, &got, out_listed, err);
    if (st != CONVEYOR_OK) return out_status(s, st, err);
    std::stable_partition(got.keys.begin(), got.keys.end(),
                          [](const auto& k) { return !k.first.empty(); });
    for (const auto& [key, ready] : got.keys) {
      conveyor_ready_key k{};
      k.struct_size = sizeof k;
      k.key = conveyor_str{key.data(), key.size()};
      k.ready = ready;
      on_key(ctx, &k);
    }
    return CONVEYOR_OK;
  }
  return out_status(s,
                    inner->list_ready_keys(in(s), queue, after_key, limit, count_limit, now, on_key,
                                           ctx, out_listed, err),
                    err);
}

// ---- ABI 1.2 and 1.3 (passed through; forget_like_pattern notes the keys) ----

// Every shared key written through the mutant, for forget_like_pattern (the
// ABI has no way to list them). Only that mutant records them.
std::mutex shared_keys_mu;
std::set<std::string> shared_keys;
void note_shared_key(conveyor_storage* s, conveyor_str key) {
  if (!self(s)->is("forget_like_pattern") || key.data == nullptr) return;
  std::lock_guard lock(shared_keys_mu);
  shared_keys.emplace(key.data, key.len);
}

conveyor_status m_swap_shared(conveyor_storage* s, conveyor_str key, int64_t expected,
                              int64_t value, int64_t* out_version, int64_t* out_value,
                              int32_t* out_applied, conveyor_error* err) {
  note_shared_key(s, key);
  return out_status(s,
                    inner->swap_shared_state(in(s), key, expected, value, out_version, out_value,
                                             out_applied, err),
                    err);
}
conveyor_status m_add_shared(conveyor_storage* s, conveyor_str key, int64_t credit, int64_t low,
                             int64_t high, int64_t unit, uint32_t min_count, uint32_t max_count,
                             int64_t* out_version, int64_t* out_value, uint32_t* out_count,
                             conveyor_error* err) {
  note_shared_key(s, key);
  return out_status(s,
                    inner->add_shared_state(in(s), key, credit, low, high, unit, min_count,
                                            max_count, out_version, out_value, out_count, err),
                    err);
}

// ---- ABI 1.5 ----

int64_t wall_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

conveyor_status m_set_key_setting(conveyor_storage* s, const conveyor_key_setting* setting,
                                  int64_t now, conveyor_error* err) {
  Mutant& m = *self(s);
  if (m.is("key_updated_plugin_clock")) now = wall_clock_us();
  if (m.is("key_weight_clamped") && setting != nullptr &&
      (setting->fields & CONVEYOR_KEY_FIELD_WEIGHT) && setting->weight > CONVEYOR_KEY_WEIGHT_MAX) {
    conveyor_key_setting clamped = *setting;
    clamped.weight = CONVEYOR_KEY_WEIGHT_MAX;
    return out_status(s, inner->set_key_setting(in(s), &clamped, now, err), err);
  }
  if (m.is("key_set_replaces") && setting != nullptr &&
      setting->struct_size >= sizeof(conveyor_key_setting)) {
    const uint32_t others = CONVEYOR_KEY_FIELDS_ALL & ~setting->fields;
    int32_t cleared = 0;
    if (others != 0 && setting->fields != 0 && (setting->fields & ~CONVEYOR_KEY_FIELDS_ALL) == 0)
      inner->delete_key_setting(in(s), setting->queue, setting->target, setting->key, others,
                                &cleared, nullptr);
  }
  conveyor_status st = inner->set_key_setting(in(s), setting, now, err);
  if (st == CONVEYOR_OK && m.is("key_set_static_marker")) m.key_sets++;
  return out_status(s, st, err);
}

conveyor_status m_delete_key_setting(conveyor_storage* s, conveyor_str queue, int32_t target,
                                     conveyor_str key, uint32_t fields, int32_t* out_cleared,
                                     conveyor_error* err) {
  Mutant& m = *self(s);
  if (m.is("key_delete_row") && fields != 0 && (fields & ~CONVEYOR_KEY_FIELDS_ALL) == 0)
    fields = CONVEYOR_KEY_FIELDS_ALL;
  conveyor_status st =
      inner->delete_key_setting(in(s), queue, target, key, fields, out_cleared, err);
  if (st == CONVEYOR_OK && out_cleared != nullptr && *out_cleared == 0) {
    if (m.is("key_delete_always_cleared")) *out_cleared = 1;
    if (m.is("key_noop_delete_marks")) {
      // Touches a row of its own and removes it again: nothing stays, but
      // the marker moves.
      static const char kScratch[] = "mutant.scratch";
      conveyor_key_setting touch{};
      touch.struct_size = sizeof touch;
      touch.fields = CONVEYOR_KEY_FIELD_WEIGHT;
      touch.queue = conveyor_str{kScratch, sizeof kScratch - 1};
      touch.target = CONVEYOR_KEY_TARGET_EVERY;
      touch.weight = 1;
      int32_t ignored = 0;
      if (inner->set_key_setting(in(s), &touch, 1, nullptr) == CONVEYOR_OK)
        inner->delete_key_setting(in(s), touch.queue, touch.target, touch.key,
                                  CONVEYOR_KEY_FIELDS_ALL, &ignored, nullptr);
    }
  }
  return out_status(s, st, err);
}

// Settings reported by list_key_settings, copied with their strings
// (key_list_every_first reports them again in another order).
struct KeySettingCopy {
  conveyor_key_setting setting;
  std::string queue, key;
};
void collect_key_setting(void* ctx, const conveyor_key_setting* k) {
  KeySettingCopy c{*k, std::string(k->queue.data, k->queue.len),
                   std::string(k->key.data, k->key.len)};
  static_cast<std::vector<KeySettingCopy>*>(ctx)->push_back(std::move(c));
}

conveyor_status m_list_key_settings(conveyor_storage* s, conveyor_key_setting_fn fn, void* ctx,
                                    conveyor_error* err) {
  if (self(s)->is("key_list_every_first") && fn != nullptr) {
    std::vector<KeySettingCopy> got;
    conveyor_status st = inner->list_key_settings(in(s), collect_key_setting, &got, err);
    if (st != CONVEYOR_OK) return out_status(s, st, err);
    // Within each queue, every key's setting first, then the keys' own.
    std::stable_sort(got.begin(), got.end(), [](const KeySettingCopy& a, const KeySettingCopy& b) {
      if (a.queue != b.queue) return a.queue < b.queue;
      return a.setting.target > b.setting.target;
    });
    for (KeySettingCopy& c : got) {
      c.setting.queue = conveyor_str{c.queue.data(), c.queue.size()};
      c.setting.key = conveyor_str{c.key.data(), c.key.size()};
      fn(ctx, &c.setting);
    }
    return CONVEYOR_OK;
  }
  return out_status(s, inner->list_key_settings(in(s), fn, ctx, err), err);
}

// SQL LIKE as SQLite has it: '%' any run of bytes, '_' any one byte, ASCII
// letters without case, no escape character.
bool like(std::string_view text, std::string_view pattern) {
  if (pattern.empty()) return text.empty();
  if (pattern[0] == '%') {
    for (size_t i = 0; i <= text.size(); ++i)
      if (like(text.substr(i), pattern.substr(1))) return true;
    return false;
  }
  if (text.empty()) return false;
  const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
  if (pattern[0] != '_' && lower(pattern[0]) != lower(text[0])) return false;
  return like(text.substr(1), pattern.substr(1));
}

conveyor_status m_delete_shared_states(conveyor_storage* s, conveyor_str prefix,
                                       int64_t value_below, uint32_t limit, uint32_t* out_deleted,
                                       conveyor_error* err) {
  Mutant& m = *self(s);
  if (m.is("forget_ignores_value")) value_below = INT64_MAX;
  if (m.is("forget_inclusive") && value_below < INT64_MAX) value_below += 1;
  if (m.is("forget_shorter_prefix") && prefix.len > 1) prefix.len -= 1;
  if (m.is("forget_ignores_limit") && limit > 0 && out_deleted != nullptr) {
    conveyor_status st =
        inner->delete_shared_states(in(s), prefix, value_below, UINT32_MAX, out_deleted, err);
    if (st == CONVEYOR_OK) *out_deleted = std::min(*out_deleted, limit);
    return out_status(s, st, err);
  }
  conveyor_status st =
      inner->delete_shared_states(in(s), prefix, value_below, limit, out_deleted, err);
  if (st == CONVEYOR_OK && m.is("forget_like_pattern")) {
    // Also the keys the pattern prefix + '%' matches that do not start with
    // the prefix.
    const std::string_view p(prefix.data, prefix.len);
    const std::string pattern = std::string(p) + "%";
    std::vector<std::string> matched;
    {
      std::lock_guard lock(shared_keys_mu);
      for (const std::string& k : shared_keys)
        if (!std::string_view(k).starts_with(p) && like(k, pattern)) matched.push_back(k);
    }
    for (const std::string& k : matched) {
      if (*out_deleted >= limit) break;
      int64_t version = 0, value = 0;
      int32_t applied = 0;
      const conveyor_str key{k.data(), k.size()};
      if (inner->swap_shared_state(in(s), key, -1, 0, &version, &value, &applied, nullptr) !=
              CONVEYOR_OK ||
          version == 0 || value >= value_below)
        continue;
      uint32_t n = 0;  // the record itself is the first with its own key as prefix
      if (inner->delete_shared_states(in(s), key, value_below, 1, &n, nullptr) == CONVEYOR_OK)
        *out_deleted += n;
    }
  }
  return out_status(s, st, err);
}

// add_shared_states: adds applied one by one through add_shared_state, in
// order, stopping at the first failure (its status and message).
conveyor_status adds_one_by_one(conveyor_storage* s, const conveyor_shared_add* adds, size_t n,
                                conveyor_shared_added* out, conveyor_error* err) {
  for (size_t i = 0; i < n; ++i) {
    const conveyor_shared_add& a = adds[i];
    conveyor_shared_added o{};
    const conveyor_status st =
        inner->add_shared_state(in(s), a.key, a.credit, a.low, a.high, a.unit, a.min_count,
                                a.max_count, &o.version, &o.value, &o.count, err);
    if (st != CONVEYOR_OK) return st;
    out[i] = o;
  }
  return CONVEYOR_OK;
}

// A key's record, read by swap_shared_state (expected_version -1), as an add
// of nothing reports it.
conveyor_status read_added(conveyor_storage* s, conveyor_str key, conveyor_shared_added* out,
                           conveyor_error* err) {
  int32_t applied = 0;
  *out = conveyor_shared_added{};
  return inner->swap_shared_state(in(s), key, -1, 0, &out->version, &out->value, &applied, err);
}

// adds_lost_update: one add as a read, the header's arithmetic, then a swap
// from the version read again just before it (a lost update when another
// caller added in between).
conveyor_status lost_update_add(conveyor_storage* s, const conveyor_shared_add& a,
                                conveyor_shared_added* out, conveyor_error* err) {
  conveyor_shared_added now;
  if (conveyor_status st = read_added(s, a.key, &now, err); st != CONVEYOR_OK) return st;
  const __int128 base = now.value <= a.low
                            ? __int128{a.low}
                            : std::max(__int128{now.value} - a.credit, __int128{a.low});
  const __int128 fits = base > a.high ? 0 : (__int128{a.high} - base) / a.unit;
  const uint32_t count = fits >= a.max_count ? a.max_count : static_cast<uint32_t>(fits);
  if (count == 0 || count < a.min_count) {
    *out = now;
    return CONVEYOR_OK;
  }
  std::this_thread::yield();
  conveyor_shared_added fresh;
  if (conveyor_status st = read_added(s, a.key, &fresh, err); st != CONVEYOR_OK) return st;
  int32_t applied = 0;
  const int64_t value = static_cast<int64_t>(base + __int128{a.unit} * count);
  conveyor_status st = inner->swap_shared_state(in(s), a.key, fresh.version, value, &out->version,
                                                &out->value, &applied, err);
  out->count = applied == 1 ? count : 0;
  out->reserved0 = 0;
  return st;
}

conveyor_status m_add_shared_states(conveyor_storage* s, const conveyor_shared_add* adds, size_t n,
                                    conveyor_shared_added* out, conveyor_error* err) {
  Mutant& m = *self(s);
  if (m.is("adds_zero_invalid") && n == 0) {
    set_error(err, CONVEYOR_E_INVALID, "add_shared_states: no adds");
    return CONVEYOR_E_INVALID;
  }
  const bool valid_arrays = n > 0 && adds != nullptr && out != nullptr;
  bool twice = false;  // a key listed twice
  if (valid_arrays) {
    std::set<std::string_view> seen;
    for (size_t i = 0; i < n && adds[i].key.data != nullptr; ++i)
      twice = !seen.emplace(adds[i].key.data, adds[i].key.len).second || twice;
  }
  if (valid_arrays && twice && m.is("adds_accept_duplicates"))
    return out_status(s, adds_one_by_one(s, adds, n, out, err), err);
  if (valid_arrays && !twice && n <= CONVEYOR_SHARED_ADDS_MAX && m.is("adds_partial_on_invalid")) {
    // The inner call refuses the batch; the adds before the bad one apply
    // anyway, and the refusal (its message) is returned.
    conveyor_status st = inner->add_shared_states(in(s), adds, n, out, err);
    if (st == CONVEYOR_E_INVALID) {
      std::vector<conveyor_shared_added> ignored(n);
      conveyor_error ignored_err{};
      (void)adds_one_by_one(s, adds, n, ignored.data(), &ignored_err);
    }
    return out_status(s, st, err);
  }
  if (valid_arrays && m.is("adds_no_max") && n > CONVEYOR_SHARED_ADDS_MAX) {
    for (size_t at = 0; at < n; at += CONVEYOR_SHARED_ADDS_MAX) {
      const size_t part = std::min<size_t>(CONVEYOR_SHARED_ADDS_MAX, n - at);
      if (conveyor_status st = inner->add_shared_states(in(s), adds + at, part, out + at, err);
          st != CONVEYOR_OK)
        return out_status(s, st, err);
    }
    return CONVEYOR_OK;
  }
  if (valid_arrays && m.is("adds_lost_update") && n <= CONVEYOR_SHARED_ADDS_MAX &&
      std::all_of(adds, adds + n, [](const conveyor_shared_add& a) { return a.unit > 0; })) {
    for (size_t i = 0; i < n; ++i)
      if (conveyor_status st = lost_update_add(s, adds[i], &out[i], err); st != CONVEYOR_OK)
        return out_status(s, st, err);
    return CONVEYOR_OK;
  }
  std::vector<conveyor_shared_add> changed;
  if (valid_arrays && m.is("adds_ignore_min_count")) {
    changed.assign(adds, adds + n);
    for (conveyor_shared_add& a : changed) a.min_count = std::min<uint32_t>(a.min_count, 1);
    adds = changed.data();
  }
  // adds_first_only / adds_drop_last: the inner call gets fewer adds; the
  // others are read and reported as adds of nothing.
  size_t applied = n;
  if (valid_arrays && m.is("adds_first_only")) applied = 1;
  if (valid_arrays && m.is("adds_drop_last")) applied = n - 1;
  conveyor_status st = applied == 0 && n > 0
                           ? CONVEYOR_OK
                           : inner->add_shared_states(in(s), adds, applied, out, err);
  if (st == CONVEYOR_E_INVALID && m.is("adds_message_no_index") && err != nullptr)
    set_error(err, CONVEYOR_E_INVALID, "add_shared_states: an add is invalid");
  if (st != CONVEYOR_OK || !valid_arrays) return out_status(s, st, err);
  for (size_t i = applied; i < n; ++i)
    if (st = read_added(s, adds[i].key, &out[i], err); st != CONVEYOR_OK)
      return out_status(s, st, err);
  if (m.is("adds_swap_results") && n >= 2) std::swap(out[0], out[1]);
  if (m.is("adds_no_version_bump"))
    for (size_t i = 0; i < n; ++i)
      if (out[i].count > 0) out[i].version -= 1;
  return CONVEYOR_OK;
}

conveyor_storage_plugin table;

}  // namespace

extern "C" CONVEYOR_PLUGIN_EXPORT const conveyor_storage_plugin* conveyor_storage_plugin_entry(
    uint32_t host_abi_major, uint32_t host_abi_minor) {
  static std::once_flag once;
  std::call_once(once, [&] {
    const char* path = std::getenv("CONVEYOR_MUTANT_INNER");
    if (path == nullptr) return;
    void* lib = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);  // kept for the process's life
    if (lib == nullptr) return;
    auto entry =
        reinterpret_cast<conveyor_plugin_entry_fn>(::dlsym(lib, CONVEYOR_PLUGIN_ENTRY_SYMBOL));
    if (entry == nullptr) return;
    inner = entry(host_abi_major, host_abi_minor);
    if (inner == nullptr) return;
    table = conveyor_storage_plugin{
        sizeof(conveyor_storage_plugin), CONVEYOR_ABI_MAJOR, CONVEYOR_ABI_MINOR, 0, "mutant",
        "0.0.0", inner->kind, 0,
        inner->capabilities & ~(CONVEYOR_CAP_NOTIFY | CONVEYOR_CAP_NOTIFY_DUE), m_open, m_close,
        m_migrate, m_enqueue, m_claim, m_complete, m_fail, m_extend, m_release, m_rescue, m_cancel,
        m_pause, m_stats, m_list_queues, m_get_job, m_purge, m_set_rate, m_delete_rate,
        m_list_rates, m_marker, nullptr, m_enqueue_v2, m_claim_kinds, m_list_jobs, m_retry_jobs,
        m_delete_jobs, m_job_counts,
        // Only what the wrapped plugin has.
        inner->struct_size >= CONVEYOR_PLUGIN_V1_1_SIZE && inner->rescue_expired_v2 != nullptr
            ? m_rescue_v2
            : nullptr,
        // ABI 1.2 and 1.3: the shared records only where the wrapped plugin
        // has them (delete_shared_states needs them written); the others
        // are not wrapped.
        inner->struct_size >= CONVEYOR_PLUGIN_V1_2_SIZE && inner->swap_shared_state != nullptr
            ? m_swap_shared
            : nullptr,
        nullptr, nullptr,
        inner->struct_size >= CONVEYOR_PLUGIN_V1_3_SIZE && inner->add_shared_state != nullptr
            ? m_add_shared
            : nullptr,
        // ABI 1.4: only what the wrapped plugin has.
        inner->struct_size >= CONVEYOR_PLUGIN_V1_4_SIZE && inner->enqueue_v4 != nullptr
            ? m_enqueue_v4
            : nullptr,
        inner->struct_size >= CONVEYOR_PLUGIN_V1_4_SIZE && inner->claim_keys != nullptr
            ? m_claim_keys
            : nullptr,
        inner->struct_size >= CONVEYOR_PLUGIN_V1_4_SIZE && inner->list_ready_keys != nullptr
            ? m_list_ready_keys
            : nullptr,
        // ABI 1.5: only what the wrapped plugin has.
        inner->struct_size >= CONVEYOR_PLUGIN_V1_5_SIZE && inner->set_key_setting != nullptr
            ? m_set_key_setting
            : nullptr,
        inner->struct_size >= CONVEYOR_PLUGIN_V1_5_SIZE && inner->delete_key_setting != nullptr
            ? m_delete_key_setting
            : nullptr,
        inner->struct_size >= CONVEYOR_PLUGIN_V1_5_SIZE && inner->list_key_settings != nullptr
            ? m_list_key_settings
            : nullptr,
        inner->struct_size >= CONVEYOR_PLUGIN_V1_5_SIZE && inner->delete_shared_states != nullptr
            ? m_delete_shared_states
            : nullptr,
        // add_shared_states also reads records (swap_shared_state) for some bugs.
        inner->struct_size >= CONVEYOR_PLUGIN_V1_5_SIZE && inner->add_shared_states != nullptr &&
                inner->swap_shared_state != nullptr
            ? m_add_shared_states
            : nullptr,
        // ABI 1.6: only what the wrapped plugin has.
        inner->struct_size >= CONVEYOR_PLUGIN_V1_6_SIZE && inner->enqueue_v5 != nullptr
            ? m_enqueue_v5
            : nullptr};
  });
  return inner == nullptr ? nullptr : &table;
}
