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

namespace {

// The binding, checking on every call that a failure's err.code is its status.
class Checked : public host::PluginBinding {
 public:
  Checked(const conveyor_storage_plugin* api, conveyor_storage* h) : PluginBinding(*api, h) {}

 protected:
  void after_call(const char* op, conveyor_status code, const conveyor_error& err,
                  host::Reports*) override {
    if (code != CONVEYOR_OK) {
      EXPECT_EQ(err.code, code) << op << ": err.code must match the status";
    }
  }
};

// Reports that break the ABI's rules for reported structs.
void expect_well_formed(const std::vector<std::string>& problems) {
  for (const std::string& p : problems) ADD_FAILURE() << p;
}

void expect_job_sizes(const std::vector<JobCopy>& jobs) {
  for (const JobCopy& j : jobs) {
    EXPECT_EQ(j.struct_size, sizeof(conveyor_job));
    EXPECT_EQ(j.reserved0, 0);
  }
}

// One batch call on leases; host::kUnwritten marks a result the plugin did not write.
std::vector<conveyor_status> expect_batch(host::Result<std::vector<conveyor_status>>&& r) {
  EXPECT_EQ(r.status.code, CONVEYOR_OK) << r.status.message;
  return std::move(r.value);
}

}  // namespace

JobCopy copy_job(const conveyor_job* j) {
  std::vector<std::string> problems;
  JobCopy c = host::copy_job(j, problems);
  expect_well_formed(problems);
  expect_job_sizes({c});
  return c;
}

std::vector<int64_t> ids_of(const std::vector<JobCopy>& jobs) {
  std::vector<int64_t> ids;
  for (const auto& j : jobs) ids.push_back(j.id);
  return ids;
}

std::vector<conveyor_lease> leases_of(const std::vector<JobCopy>& jobs) {
  std::vector<conveyor_lease> l;
  for (const auto& j : jobs) l.push_back(j.lease());
  return l;
}

PluginCalls::~PluginCalls() { close_all(); }

conveyor_status PluginCalls::try_open(const Opts& opts, conveyor_storage** out,
                                      std::string* message) {
  host::Result<conveyor_storage*> r = Checked(api_, nullptr).open(opts);
  if (message != nullptr) *message = r.status.message;
  if (r.ok()) *out = r.value;
  return r.status.code;
}

conveyor_storage* PluginCalls::open_tracked(const Opts& opts, bool migrate) {
  conveyor_storage* h = nullptr;
  std::string msg;
  conveyor_status st = try_open(opts, &h, &msg);
  EXPECT_EQ(st, CONVEYOR_OK) << "open failed: " << msg;
  if (st != CONVEYOR_OK) return nullptr;
  handles_.push_back(h);
  if (migrate) {
    host::Status m = Checked(api_, h).migrate();
    EXPECT_EQ(m.code, CONVEYOR_OK) << "migrate failed: " << m.message;
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
  host::Result<std::vector<int64_t>> r = Checked(api_, h).enqueue({&j, 1});
  EXPECT_EQ(r.status.code, CONVEYOR_OK) << r.status.message;
  return r.value.at(0);
}

std::vector<int64_t> PluginCalls::enqueue_many(conveyor_storage* h, const std::string& queue,
                                               size_t n, int64_t run_at) {
  std::vector<conveyor_new_job> jobs(n, conveyor_new_job{str(queue), conveyor_str{"noop", 4},
                                                         conveyor_str{"{}", 2}, 0, 3, run_at});
  host::Result<std::vector<int64_t>> r = Checked(api_, h).enqueue(jobs);
  EXPECT_EQ(r.status.code, CONVEYOR_OK) << r.status.message;
  return std::move(r.value);
}

std::vector<JobCopy> PluginCalls::claim(conveyor_storage* h, const std::string& queue, uint32_t max,
                                        int64_t token, int64_t now, int64_t expires,
                                        conveyor_status expect) {
  auto r = Checked(api_, h).claim(queue, max, token, now, expires);
  EXPECT_EQ(r.status.code, expect) << r.status.message;
  if (r.ok()) {
    EXPECT_EQ(r.value.out_claimed, r.value.jobs.size()) << "out_claimed must match the callbacks";
  }
  expect_well_formed(r.problems);
  expect_job_sizes(r.value.jobs);
  return std::move(r.value.jobs);
}

std::vector<conveyor_status> PluginCalls::complete(conveyor_storage* h,
                                                   const std::vector<conveyor_lease>& l,
                                                   int64_t now) {
  return expect_batch(Checked(api_, h).complete(l, now));
}

std::vector<conveyor_status> PluginCalls::release(conveyor_storage* h,
                                                  const std::vector<conveyor_lease>& l,
                                                  int64_t now) {
  return expect_batch(Checked(api_, h).release(l, now));
}

std::vector<conveyor_status> PluginCalls::extend(conveyor_storage* h,
                                                 const std::vector<conveyor_lease>& l,
                                                 int64_t expires) {
  return expect_batch(Checked(api_, h).extend_leases(l, expires));
}

conveyor_status PluginCalls::fail(conveyor_storage* h, conveyor_lease l, const std::string& text,
                                  int64_t retry_at, int64_t now, std::string* msg) {
  host::Status st = Checked(api_, h).fail(l, text, retry_at, now);
  if (msg != nullptr) *msg = st.message;
  return st.code;
}

conveyor_status PluginCalls::get(conveyor_storage* h, int64_t id, int64_t now, JobCopy* out) {
  auto r = Checked(api_, h).get_job(id, now);
  expect_well_formed(r.problems);
  expect_job_sizes(r.value);
  if (r.ok()) {
    EXPECT_EQ(r.value.size(), 1u) << "get_job must call on_job exactly once";
    if (!r.value.empty() && out != nullptr) *out = std::move(r.value[0]);
  } else {
    EXPECT_TRUE(r.value.empty()) << "no callback on error";
  }
  return r.status.code;
}

JobCopy PluginCalls::job(conveyor_storage* h, int64_t id, int64_t now) {
  JobCopy j;
  EXPECT_EQ(get(h, id, now, &j), CONVEYOR_OK) << "job " << id;
  return j;
}

std::vector<StatsCopy> PluginCalls::stats(conveyor_storage* h, int64_t now) {
  auto r = Checked(api_, h).queue_stats(now);
  EXPECT_EQ(r.status.code, CONVEYOR_OK) << r.status.message;
  expect_well_formed(r.problems);
  for (const StatsCopy& q : r.value) EXPECT_EQ(q.struct_size, sizeof(conveyor_queue_stats));
  return std::move(r.value);
}

std::vector<LimitCopy> PluginCalls::limits(conveyor_storage* h) {
  auto r = Checked(api_, h).list_rate_limits();
  EXPECT_EQ(r.status.code, CONVEYOR_OK) << r.status.message;
  expect_well_formed(r.problems);
  std::vector<LimitCopy> out;
  for (host::LimitCopy& l : r.value) {
    EXPECT_EQ(l.struct_size, sizeof(conveyor_rate_limit));
    out.push_back(LimitCopy{std::move(l.queue), l.rate_per_sec, l.burst, l.updated_at_us, l.scope});
  }
  return out;
}

std::vector<std::pair<std::string, int32_t>> PluginCalls::queues(conveyor_storage* h) {
  auto r = Checked(api_, h).list_queues();
  EXPECT_EQ(r.status.code, CONVEYOR_OK) << r.status.message;
  expect_well_formed(r.problems);
  std::vector<std::pair<std::string, int32_t>> out;
  for (host::QueueCopy& q : r.value) out.emplace_back(std::move(q.queue), q.paused);
  return out;
}

int64_t PluginCalls::marker(conveyor_storage* h) {
  auto r = Checked(api_, h).change_marker();
  EXPECT_EQ(r.status.code, CONVEYOR_OK) << r.status.message;
  return r.value;
}

host::PluginBinding::Shared PluginCalls::swap_shared(conveyor_storage* h, const std::string& key,
                                                     int64_t expected, int64_t new_value) {
  auto r = Checked(api_, h).swap_shared_state(key, expected, new_value);
  EXPECT_EQ(r.status.code, CONVEYOR_OK) << r.status.message;
  return r.value;
}

host::PluginBinding::SharedAdded PluginCalls::add_shared(conveyor_storage* h,
                                                         const std::string& key, int64_t credit,
                                                         int64_t low, int64_t high, int64_t unit,
                                                         uint32_t min_count, uint32_t max_count) {
  auto r = Checked(api_, h).add_shared_state(key, credit, low, high, unit, min_count, max_count);
  EXPECT_EQ(r.status.code, CONVEYOR_OK) << r.status.message;
  return r.value;
}

conveyor_status PluginCalls::pause(conveyor_storage* h, const std::string& q, bool paused) {
  host::Status st = Checked(api_, h).set_queue_paused(q, paused, 0);
  EXPECT_EQ(st.code, CONVEYOR_OK) << st.message;
  return st.code;
}

conveyor_status PluginCalls::wait_notify(conveyor_storage* h, int64_t timeout_us,
                                         std::vector<Notice>* out, std::string* message) {
  auto r = Checked(api_, h).wait_for_notification(timeout_us);
  expect_well_formed(r.problems);
  for (Notice& n : r.value) out->push_back(std::move(n));
  if (message != nullptr) *message = r.status.message;
  return r.status.code;
}

}  // namespace conveyor::plugin_testing
