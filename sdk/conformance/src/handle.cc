#include "handle.hpp"

#include "call_context.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <sstream>

namespace conveyor::conformance {
namespace {

constexpr char kPoison = '\x01';
// A value no plugin writes into results: an unwritten slot stays visible.
constexpr conveyor_status kUnwritten = -77;

conveyor_str cstr(std::string_view s) { return conveyor_str{s.data(), s.size()}; }

std::vector<conveyor_new_job> to_c(const std::vector<JobSpec>& jobs) {
  std::vector<conveyor_new_job> out;
  out.reserve(jobs.size());
  for (const JobSpec& j : jobs)
    out.push_back(conveyor_new_job{cstr(j.queue), cstr(j.kind), cstr(j.payload), j.priority,
                                   j.max_attempts, j.run_at_us});
  return out;
}

// Per-lease results (complete, extend_leases, release): "receives per lease
// CONVEYOR_OK or CONVEYOR_E_LEASE_LOST".
void check_results(const char* op, const Status& status,
                   const std::vector<conveyor_status>& results) {
  if (!status.ok()) return;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i] == CONVEYOR_OK || results[i] == CONVEYOR_E_LEASE_LOST) continue;
    ADD_FAILURE() << op << " returned CONVEYOR_OK but results[" << i << "] is "
                  << (results[i] == kUnwritten ? std::string("not written")
                                               : status_name(results[i]))
                  << " (storage_plugin.h: results \"receives per lease CONVEYOR_OK or "
                     "CONVEYOR_E_LEASE_LOST\")";
  }
}

}  // namespace

std::ostream& operator<<(std::ostream& out, const Status& s) {
  out << s.op << " returned " << status_name(s.code);
  if (!s.ok()) out << ": \"" << s.message << "\"";
  return out;
}

void require_ok(const Status& s) {
  if (s.ok()) return;
  std::ostringstream msg;
  msg << s << " where CONVEYOR_OK was required";
  throw CallFailed(msg.str());
}

int64_t next_lease_token() {
  static std::atomic<int64_t> next{1'000'001};
  return next.fetch_add(1);
}

conveyor_error poisoned_error() {
  conveyor_error err;
  err.code = kUnwritten;
  std::memset(err.message, kPoison, sizeof err.message);
  return err;
}

std::string check_error(conveyor_status code, const conveyor_error& err) {
  std::string problems;
  if (err.code != code)
    problems += "err->code is " +
                (err.code == kUnwritten ? std::string("not written") : status_name(err.code)) +
                ", not the returned status (conveyor_error: \"The plugin sets code and message "
                "on failure\"); ";
  const void* nul = std::memchr(err.message, '\0', sizeof err.message);
  if (nul == nullptr) {
    problems += "err->message is not NUL-terminated within CONVEYOR_ERROR_MESSAGE_MAX bytes; ";
  } else if (err.message[0] == '\0') {
    problems += "err->message is empty (say what went wrong and what to fix); ";
  } else if (err.message[0] == kPoison) {
    problems += "err->message was not written; ";
  }
  if (!problems.empty()) problems.resize(problems.size() - 2);
  return problems;
}

Handle::Handle(std::shared_ptr<const Plugin> plugin, conveyor_storage* storage)
    : plugin_(std::move(plugin)), table_(&plugin_->table()), storage_(storage) {}

Handle::~Handle() { table_->close(storage_); }

Status Handle::finish(const char* op, conveyor_status code, const conveyor_error& err,
                      CallContext* ctx) {
  Status s;
  s.op = op;
  s.code = code;
  if (ctx != nullptr) {
    ctx->active.store(false);
    std::lock_guard lock(ctx->mu);
    for (const std::string& p : ctx->problems) ADD_FAILURE() << op << ": " << p;
    ctx->problems.clear();
  }
  if (code < CONVEYOR_OK || code > CONVEYOR_E_UNSUPPORTED)
    ADD_FAILURE() << op << " returned " << code << ", not a conveyor_status defined in "
                  << "storage_plugin.h";
  if (code != CONVEYOR_OK) {
    const void* nul = std::memchr(err.message, '\0', sizeof err.message);
    s.message =
        nul != nullptr ? std::string(err.message) : std::string(err.message, sizeof err.message);
    if (std::string problems = check_error(code, err); !problems.empty())
      ADD_FAILURE() << op << " returned " << status_name(code) << " but " << problems;
  }
  return s;
}

Status Handle::migrate() {
  conveyor_error err = poisoned_error();
  return finish("migrate", table_->migrate(storage_, &err), err, nullptr);
}

Status Handle::enqueue(const std::vector<JobSpec>& jobs, std::vector<int64_t>* ids) {
  std::vector<conveyor_new_job> c = to_c(jobs);
  std::vector<int64_t> out(jobs.size(), 0);
  conveyor_error err = poisoned_error();
  Status s = finish("enqueue",
                    table_->enqueue(storage_, c.empty() ? nullptr : c.data(), c.size(),
                                    out.empty() ? nullptr : out.data(), &err),
                    err, nullptr);
  if (ids != nullptr) *ids = std::move(out);
  return s;
}

Status Handle::claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                     int64_t lease_expires_us, std::vector<JobCopy>* jobs) {
  CallContext& ctx = new_call_context("claim");
  uint32_t claimed = 0xDEADBEEF;
  conveyor_error err = poisoned_error();
  Status s = finish("claim",
                    table_->claim(storage_, cstr(queue), max_jobs, lease_token, now_us,
                                  lease_expires_us, &CallContext::on_job, &ctx, &claimed, &err),
                    err, &ctx);
  std::lock_guard lock(ctx.mu);
  if (s.ok() && claimed != ctx.jobs.size())
    ADD_FAILURE() << "claim set *out_claimed = " << claimed << " but called on_job "
                  << ctx.jobs.size() << " times (storage_plugin.h: \"on_job is called once per "
                  << "claimed job\", \"*out_claimed = number claimed\")";
  if (jobs != nullptr) *jobs = std::move(ctx.jobs);
  ctx.jobs.clear();
  return s;
}

Status Handle::complete(const std::vector<conveyor_lease>& leases, int64_t now_us,
                        std::vector<conveyor_status>* results) {
  std::vector<conveyor_status> out(leases.size(), kUnwritten);
  conveyor_error err = poisoned_error();
  Status s =
      finish("complete",
             table_->complete(storage_, leases.empty() ? nullptr : leases.data(), leases.size(),
                              now_us, out.empty() ? nullptr : out.data(), &err),
             err, nullptr);
  check_results("complete", s, out);
  if (results != nullptr) *results = std::move(out);
  return s;
}

Status Handle::fail(conveyor_lease lease, std::string_view error_text, int64_t retry_at_us,
                    int64_t now_us) {
  conveyor_error err = poisoned_error();
  return finish("fail", table_->fail(storage_, lease, cstr(error_text), retry_at_us, now_us, &err),
                err, nullptr);
}

Status Handle::extend_leases(const std::vector<conveyor_lease>& leases, int64_t lease_expires_us,
                             std::vector<conveyor_status>* results) {
  std::vector<conveyor_status> out(leases.size(), kUnwritten);
  conveyor_error err = poisoned_error();
  Status s = finish(
      "extend_leases",
      table_->extend_leases(storage_, leases.empty() ? nullptr : leases.data(), leases.size(),
                            lease_expires_us, out.empty() ? nullptr : out.data(), &err),
      err, nullptr);
  check_results("extend_leases", s, out);
  if (results != nullptr) *results = std::move(out);
  return s;
}

Status Handle::release(const std::vector<conveyor_lease>& leases, int64_t now_us,
                       std::vector<conveyor_status>* results) {
  std::vector<conveyor_status> out(leases.size(), kUnwritten);
  conveyor_error err = poisoned_error();
  Status s =
      finish("release",
             table_->release(storage_, leases.empty() ? nullptr : leases.data(), leases.size(),
                             now_us, out.empty() ? nullptr : out.data(), &err),
             err, nullptr);
  check_results("release", s, out);
  if (results != nullptr) *results = std::move(out);
  return s;
}

Status Handle::rescue_expired(int64_t now_us, uint32_t max_jobs, uint32_t* rescued) {
  uint32_t out = 0xDEADBEEF;
  conveyor_error err = poisoned_error();
  Status s = finish("rescue_expired",
                    table_->rescue_expired(storage_, now_us, max_jobs, &out, &err), err, nullptr);
  if (rescued != nullptr) *rescued = out;
  return s;
}

Status Handle::cancel(int64_t job_id, int64_t now_us) {
  conveyor_error err = poisoned_error();
  return finish("cancel", table_->cancel(storage_, job_id, now_us, &err), err, nullptr);
}

Status Handle::set_queue_paused(std::string_view queue, bool paused, int64_t now_us) {
  conveyor_error err = poisoned_error();
  return finish("set_queue_paused",
                table_->set_queue_paused(storage_, cstr(queue), paused ? 1 : 0, now_us, &err), err,
                nullptr);
}

Status Handle::queue_stats(int64_t now_us, std::vector<StatsCopy>* stats) {
  CallContext& ctx = new_call_context("queue_stats");
  conveyor_error err = poisoned_error();
  Status s =
      finish("queue_stats",
             table_->queue_stats(storage_, now_us, &CallContext::on_stats, &ctx, &err), err, &ctx);
  std::lock_guard lock(ctx.mu);
  if (stats != nullptr) *stats = std::move(ctx.stats);
  ctx.stats.clear();
  return s;
}

Status Handle::list_queues(std::vector<QueueCopy>* queues) {
  CallContext& ctx = new_call_context("list_queues");
  conveyor_error err = poisoned_error();
  Status s = finish("list_queues",
                    table_->list_queues(storage_, &CallContext::on_queue, &ctx, &err), err, &ctx);
  std::lock_guard lock(ctx.mu);
  if (queues != nullptr) *queues = std::move(ctx.queues);
  ctx.queues.clear();
  return s;
}

Status Handle::get_job(int64_t job_id, int64_t now_us, std::optional<JobCopy>* job) {
  CallContext& ctx = new_call_context("get_job");
  conveyor_error err = poisoned_error();
  Status s =
      finish("get_job", table_->get_job(storage_, job_id, now_us, &CallContext::on_job, &ctx, &err),
             err, &ctx);
  std::lock_guard lock(ctx.mu);
  if (s.ok() && ctx.jobs.size() != 1)
    ADD_FAILURE() << "get_job(" << job_id << ") returned CONVEYOR_OK but called on_job "
                  << ctx.jobs.size() << " times (storage_plugin.h: \"Reports one job through "
                  << "on_job\")";
  if (s.ok() && ctx.jobs.size() == 1 && ctx.jobs[0].id != job_id)
    ADD_FAILURE() << "get_job(" << job_id << ") reported job " << ctx.jobs[0].id;
  if (job != nullptr) {
    job->reset();
    if (s.ok() && !ctx.jobs.empty()) *job = std::move(ctx.jobs.front());
  }
  ctx.jobs.clear();
  return s;
}

Status Handle::purge_finished(int64_t finalized_before_us, uint32_t max_jobs, uint64_t* deleted) {
  uint64_t out = 0xDEADBEEF;
  conveyor_error err = poisoned_error();
  Status s = finish("purge_finished",
                    table_->purge_finished(storage_, finalized_before_us, max_jobs, &out, &err),
                    err, nullptr);
  if (deleted != nullptr) *deleted = out;
  return s;
}

Status Handle::set_rate_limit(std::string_view queue, double rate_per_sec, uint32_t burst,
                              int64_t now_us) {
  conveyor_error err = poisoned_error();
  return finish("set_rate_limit",
                table_->set_rate_limit(storage_, cstr(queue), rate_per_sec, burst, now_us, &err),
                err, nullptr);
}

Status Handle::delete_rate_limit(std::string_view queue) {
  conveyor_error err = poisoned_error();
  return finish("delete_rate_limit", table_->delete_rate_limit(storage_, cstr(queue), &err), err,
                nullptr);
}

Status Handle::list_rate_limits(std::vector<LimitCopy>* limits) {
  CallContext& ctx = new_call_context("list_rate_limits");
  conveyor_error err = poisoned_error();
  Status s =
      finish("list_rate_limits",
             table_->list_rate_limits(storage_, &CallContext::on_limit, &ctx, &err), err, &ctx);
  std::lock_guard lock(ctx.mu);
  if (limits != nullptr) *limits = std::move(ctx.limits);
  ctx.limits.clear();
  return s;
}

Status Handle::change_marker(int64_t* marker) {
  int64_t out = 0;
  conveyor_error err = poisoned_error();
  Status s = finish("change_marker", table_->change_marker(storage_, &out, &err), err, nullptr);
  if (marker != nullptr) *marker = out;
  return s;
}

Status Handle::wait_for_notification(int64_t timeout_us, std::vector<NotificationCopy>* notes) {
  if (table_->wait_for_notification == nullptr)
    throw CallFailed("wait_for_notification is NULL in the plugin's table");
  CallContext& ctx = new_call_context("wait_for_notification");
  conveyor_error err = poisoned_error();
  Status s = finish(
      "wait_for_notification",
      table_->wait_for_notification(storage_, timeout_us, &CallContext::on_notify, &ctx, &err), err,
      &ctx);
  std::lock_guard lock(ctx.mu);
  if (ctx.callbacks_off_caller_thread > 0)
    ADD_FAILURE() << "wait_for_notification called on_notify " << ctx.callbacks_off_caller_thread
                  << " time(s) on another thread (storage_plugin.h: \"calling on_notify for each "
                  << "on the calling thread\")";
  if (notes != nullptr) *notes = std::move(ctx.notifications);
  ctx.notifications.clear();
  return s;
}

// ---- must succeed ----

int64_t Handle::add(const JobSpec& job) { return add_all({job}).at(0); }

std::vector<int64_t> Handle::add_all(const std::vector<JobSpec>& jobs) {
  std::vector<int64_t> ids;
  require_ok(enqueue(jobs, &ids));
  return ids;
}

std::vector<JobCopy> Handle::claim_jobs(std::string_view queue, uint32_t max_jobs, int64_t now_us) {
  std::vector<JobCopy> jobs;
  require_ok(claim(queue, max_jobs, next_lease_token(), now_us, now_us + kLease, &jobs));
  return jobs;
}

JobCopy Handle::claim_one(std::string_view queue, int64_t now_us) {
  std::vector<JobCopy> jobs = claim_jobs(queue, 1, now_us);
  if (jobs.size() != 1)
    throw CallFailed("claim(queue '" + std::string(queue) + "', max_jobs 1) claimed " +
                     std::to_string(jobs.size()) + " jobs where one ready job was expected");
  return jobs[0];
}

JobCopy Handle::job(int64_t job_id, int64_t now_us) {
  std::optional<JobCopy> j;
  require_ok(get_job(job_id, now_us, &j));
  if (!j) throw CallFailed("get_job(" + std::to_string(job_id) + ") reported no job");
  return *j;
}

std::vector<conveyor_status> Handle::complete_all(const std::vector<conveyor_lease>& leases,
                                                  int64_t now_us) {
  std::vector<conveyor_status> results;
  require_ok(complete(leases, now_us, &results));
  return results;
}

void Handle::complete_one(conveyor_lease lease, int64_t now_us) {
  std::vector<conveyor_status> r = complete_all({lease}, now_us);
  if (r.at(0) != CONVEYOR_OK)
    throw CallFailed("complete of job " + std::to_string(lease.job_id) +
                     " under its current "
                     "lease gave " +
                     status_name(r[0]) + " where CONVEYOR_OK was required");
}

uint32_t Handle::rescue(int64_t now_us, uint32_t max_jobs) {
  uint32_t n = 0;
  require_ok(rescue_expired(now_us, max_jobs, &n));
  return n;
}

void Handle::pause(std::string_view queue, bool paused, int64_t now_us) {
  require_ok(set_queue_paused(queue, paused, now_us));
}

std::vector<StatsCopy> Handle::stats(int64_t now_us) {
  std::vector<StatsCopy> s;
  require_ok(queue_stats(now_us, &s));
  return s;
}

std::optional<StatsCopy> Handle::stats_of(std::string_view queue, int64_t now_us) {
  for (StatsCopy& s : stats(now_us))
    if (s.queue == queue) return s;
  return std::nullopt;
}

std::vector<QueueCopy> Handle::queues() {
  std::vector<QueueCopy> q;
  require_ok(list_queues(&q));
  return q;
}

std::vector<LimitCopy> Handle::limits() {
  std::vector<LimitCopy> l;
  require_ok(list_rate_limits(&l));
  return l;
}

int64_t Handle::marker() {
  int64_t m = 0;
  require_ok(change_marker(&m));
  return m;
}

uint64_t Handle::purge(int64_t finalized_before_us, uint32_t max_jobs) {
  uint64_t n = 0;
  require_ok(purge_finished(finalized_before_us, max_jobs, &n));
  return n;
}

}  // namespace conveyor::conformance
