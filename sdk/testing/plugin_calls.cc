#include "conveyor/testing/plugin_calls.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

namespace conveyor::plugin_testing {

Opts with_options(Opts base, const Opts& extra) {
  for (const auto& o : extra) {
    auto it = std::find_if(base.begin(), base.end(), [&](auto& e) { return e.first == o.first; });
    if (it != base.end())
      it->second = o.second;
    else
      base.push_back(o);
  }
  return base;
}

std::string s(conveyor_str v) { return v.len == 0 ? std::string() : std::string(v.data, v.len); }

int64_t wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

JobCopy copy_job(const conveyor_job* j) {
  JobCopy c;
  EXPECT_EQ(j->struct_size, sizeof(conveyor_job));
  EXPECT_EQ(j->reserved0, 0);
  c.id = j->id;
  c.state = j->state;
  c.queue = s(j->queue);
  c.kind = s(j->kind);
  c.payload = s(j->payload);
  c.last_error = s(j->last_error);
  c.priority = j->priority;
  c.attempt = j->attempt;
  c.max_attempts = j->max_attempts;
  c.run_at = j->run_at_us;
  c.created_at = j->created_at_us;
  c.finalized_at = j->finalized_at_us;
  c.lease_token = j->lease_token;
  c.lease_expires = j->lease_expires_us;
  return c;
}

std::vector<int64_t> ids_of(const std::vector<JobCopy>& jobs) {
  std::vector<int64_t> ids;
  for (const auto& j : jobs) ids.push_back(j.id);
  return ids;
}

std::vector<conveyor_lease> leases_of(const std::vector<JobCopy>& jobs) {
  std::vector<conveyor_lease> l;
  for (const auto& j : jobs) l.push_back({j.id, j.lease_token});
  return l;
}

namespace {

void collect_job(void* ctx, const conveyor_job* j) {
  static_cast<std::vector<JobCopy>*>(ctx)->push_back(copy_job(j));
}

using LeaseFn = conveyor_status (*)(conveyor_storage*, const conveyor_lease*, size_t, int64_t,
                                    conveyor_status*, conveyor_error*);

// One batch call on leases; -1 marks a result the plugin did not write.
std::vector<conveyor_status> leases_op(LeaseFn fn, conveyor_storage* h,
                                       const std::vector<conveyor_lease>& leases, int64_t t) {
  std::vector<conveyor_status> results(leases.size(), -1);
  conveyor_error err{};
  EXPECT_EQ(fn(h, leases.data(), leases.size(), t, results.data(), &err), CONVEYOR_OK)
      << err.message;
  return results;
}

}  // namespace

PluginCalls::~PluginCalls() { close_all(); }

conveyor_status PluginCalls::try_open(const Opts& opts, conveyor_storage** out,
                                      std::string* message) {
  std::vector<conveyor_option> raw;
  for (const auto& [k, v] : opts) raw.push_back({str(k), str(v)});
  conveyor_error err{};
  conveyor_status st = api_->open(raw.data(), raw.size(), out, &err);
  if (message != nullptr) *message = st == CONVEYOR_OK ? "" : err.message;
  if (st != CONVEYOR_OK) {
    EXPECT_EQ(err.code, st) << "err.code must match the status";
  }
  return st;
}

conveyor_storage* PluginCalls::open_tracked(const Opts& opts, bool migrate) {
  conveyor_storage* h = nullptr;
  std::string msg;
  conveyor_status st = try_open(opts, &h, &msg);
  EXPECT_EQ(st, CONVEYOR_OK) << "open failed: " << msg;
  if (st != CONVEYOR_OK) return nullptr;
  handles_.push_back(h);
  if (migrate) {
    conveyor_error err{};
    EXPECT_EQ(api_->migrate(h, &err), CONVEYOR_OK) << "migrate failed: " << err.message;
  }
  return h;
}

void PluginCalls::close_store(conveyor_storage* h) {
  auto it = std::find(handles_.begin(), handles_.end(), h);
  ASSERT_NE(it, handles_.end());
  handles_.erase(it);
  api_->close(h);
}

void PluginCalls::close_all() {
  for (conveyor_storage* h : handles_) api_->close(h);
  handles_.clear();
}

int64_t PluginCalls::enqueue(conveyor_storage* h, const std::string& queue, int32_t priority,
                             int64_t run_at, int32_t max_attempts, const std::string& payload,
                             const std::string& kind) {
  conveyor_new_job j{str(queue), str(kind), str(payload), priority, max_attempts, run_at};
  int64_t id = 0;
  conveyor_error err{};
  EXPECT_EQ(api_->enqueue(h, &j, 1, &id, &err), CONVEYOR_OK) << err.message;
  return id;
}

std::vector<int64_t> PluginCalls::enqueue_many(conveyor_storage* h, const std::string& queue,
                                               size_t n, int64_t run_at) {
  std::vector<conveyor_new_job> jobs(n, conveyor_new_job{str(queue), conveyor_str{"noop", 4},
                                                         conveyor_str{"{}", 2}, 0, 3, run_at});
  std::vector<int64_t> ids(n);
  conveyor_error err{};
  EXPECT_EQ(api_->enqueue(h, jobs.data(), n, ids.data(), &err), CONVEYOR_OK) << err.message;
  return ids;
}

std::vector<JobCopy> PluginCalls::claim(conveyor_storage* h, const std::string& queue, uint32_t max,
                                        int64_t token, int64_t now, int64_t expires,
                                        conveyor_status expect) {
  std::vector<JobCopy> out;
  uint32_t n = 12345;  // must be overwritten
  conveyor_error err{};
  conveyor_status st =
      api_->claim(h, str(queue), max, token, now, expires, collect_job, &out, &n, &err);
  EXPECT_EQ(st, expect) << err.message;
  if (st == CONVEYOR_OK) {
    EXPECT_EQ(n, out.size()) << "out_claimed must match the callbacks";
  }
  return out;
}

std::vector<conveyor_status> PluginCalls::complete(conveyor_storage* h,
                                                   const std::vector<conveyor_lease>& l,
                                                   int64_t now) {
  return leases_op(api_->complete, h, l, now);
}

std::vector<conveyor_status> PluginCalls::release(conveyor_storage* h,
                                                  const std::vector<conveyor_lease>& l,
                                                  int64_t now) {
  return leases_op(api_->release, h, l, now);
}

std::vector<conveyor_status> PluginCalls::extend(conveyor_storage* h,
                                                 const std::vector<conveyor_lease>& l,
                                                 int64_t expires) {
  return leases_op(api_->extend_leases, h, l, expires);
}

conveyor_status PluginCalls::fail(conveyor_storage* h, conveyor_lease l, const std::string& text,
                                  int64_t retry_at, int64_t now, std::string* msg) {
  conveyor_error err{};
  conveyor_status st = api_->fail(h, l, str(text), retry_at, now, &err);
  if (msg != nullptr) *msg = err.message;
  return st;
}

conveyor_status PluginCalls::get(conveyor_storage* h, int64_t id, int64_t now, JobCopy* out) {
  std::vector<JobCopy> got;
  conveyor_error err{};
  conveyor_status st = api_->get_job(h, id, now, collect_job, &got, &err);
  if (st == CONVEYOR_OK) {
    EXPECT_EQ(got.size(), 1u) << "get_job must call on_job exactly once";
    if (!got.empty() && out != nullptr) *out = got[0];
  } else {
    EXPECT_TRUE(got.empty()) << "no callback on error";
  }
  return st;
}

JobCopy PluginCalls::job(conveyor_storage* h, int64_t id, int64_t now) {
  JobCopy j;
  EXPECT_EQ(get(h, id, now, &j), CONVEYOR_OK) << "job " << id;
  return j;
}

std::vector<StatsCopy> PluginCalls::stats(conveyor_storage* h, int64_t now) {
  std::vector<StatsCopy> out;
  conveyor_error err{};
  EXPECT_EQ(api_->queue_stats(
                h, now,
                [](void* ctx, const conveyor_queue_stats* q) {
                  EXPECT_EQ(q->struct_size, sizeof(conveyor_queue_stats));
                  static_cast<std::vector<StatsCopy>*>(ctx)->push_back(
                      StatsCopy{s(q->queue), q->paused, q->pending, q->scheduled, q->running,
                                q->completed, q->failed, q->cancelled});
                },
                &out, &err),
            CONVEYOR_OK)
      << err.message;
  return out;
}

std::vector<LimitCopy> PluginCalls::limits(conveyor_storage* h) {
  std::vector<LimitCopy> out;
  conveyor_error err{};
  EXPECT_EQ(api_->list_rate_limits(
                h,
                [](void* ctx, const conveyor_rate_limit* l) {
                  EXPECT_EQ(l->struct_size, sizeof(conveyor_rate_limit));
                  static_cast<std::vector<LimitCopy>*>(ctx)->push_back(
                      LimitCopy{s(l->queue), l->rate_per_sec, l->burst, l->updated_at_us});
                },
                &out, &err),
            CONVEYOR_OK)
      << err.message;
  return out;
}

std::vector<std::pair<std::string, int32_t>> PluginCalls::queues(conveyor_storage* h) {
  std::vector<std::pair<std::string, int32_t>> out;
  conveyor_error err{};
  EXPECT_EQ(api_->list_queues(
                h,
                [](void* ctx, conveyor_str q, int32_t paused) {
                  static_cast<std::vector<std::pair<std::string, int32_t>>*>(ctx)->emplace_back(
                      s(q), paused);
                },
                &out, &err),
            CONVEYOR_OK)
      << err.message;
  return out;
}

int64_t PluginCalls::marker(conveyor_storage* h) {
  int64_t m = 0;
  conveyor_error err{};
  EXPECT_EQ(api_->change_marker(h, &m, &err), CONVEYOR_OK) << err.message;
  return m;
}

conveyor_status PluginCalls::pause(conveyor_storage* h, const std::string& q, bool paused) {
  conveyor_error err{};
  conveyor_status st = api_->set_queue_paused(h, str(q), paused ? 1 : 0, 0, &err);
  EXPECT_EQ(st, CONVEYOR_OK) << err.message;
  return st;
}

conveyor_status PluginCalls::wait_notify(conveyor_storage* h, int64_t timeout_us,
                                         std::vector<Notice>* out, std::string* message) {
  conveyor_error err{};
  conveyor_status st = api_->wait_for_notification(
      h, timeout_us,
      [](void* ctx, int32_t kind, conveyor_str queue) {
        static_cast<std::vector<Notice>*>(ctx)->push_back(Notice{kind, s(queue)});
      },
      out, &err);
  if (message != nullptr) *message = st == CONVEYOR_OK ? "" : err.message;
  return st;
}

}  // namespace conveyor::plugin_testing
