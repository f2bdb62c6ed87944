#include "call_context.hpp"

#include <deque>
#include <memory>

namespace conveyor::conformance {
namespace {

struct Registry {
  std::mutex mu;
  std::deque<std::unique_ptr<CallContext>> contexts;
  std::vector<std::string> late;
};

Registry& registry() {
  static Registry* r = new Registry;  // outlives every plugin thread
  return *r;
}

// Runs at the start of every callback: a callback after its call returned is
// recorded, and its data still lands in the (live) context harmlessly.
CallContext& enter(void* ctx) {
  auto& c = *static_cast<CallContext*>(ctx);
  if (!c.active.load()) {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    r.late.push_back(c.op);
  }
  return c;
}

}  // namespace

CallContext& new_call_context(std::string op) {
  Registry& r = registry();
  auto context = std::make_unique<CallContext>(std::move(op));
  CallContext& ref = *context;
  std::lock_guard lock(r.mu);
  // Contexts of earlier tests hold no data any more (their results were moved
  // out), so keeping them costs a few hundred bytes each.
  r.contexts.push_back(std::move(context));
  return ref;
}

std::vector<std::string> take_late_callbacks() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> out;
  out.swap(r.late);
  return out;
}

void CallContext::on_job(void* ctx, const conveyor_job* job) {
  CallContext& c = enter(ctx);
  std::lock_guard lock(c.mu);
  c.jobs.push_back(copy_job(job, c.problems));
}

void CallContext::on_stats(void* ctx, const conveyor_queue_stats* stats) {
  CallContext& c = enter(ctx);
  std::lock_guard lock(c.mu);
  c.stats.push_back(copy_stats(stats, c.problems));
}

void CallContext::on_limit(void* ctx, const conveyor_rate_limit* limit) {
  CallContext& c = enter(ctx);
  std::lock_guard lock(c.mu);
  c.limits.push_back(copy_limit(limit, c.problems));
}

void CallContext::on_queue(void* ctx, conveyor_str queue, int32_t paused) {
  CallContext& c = enter(ctx);
  std::lock_guard lock(c.mu);
  c.queues.push_back(copy_queue(queue, paused, c.problems));
}

void CallContext::on_notify(void* ctx, int32_t kind, conveyor_str queue) {
  CallContext& c = enter(ctx);
  std::lock_guard lock(c.mu);
  if (std::this_thread::get_id() != c.caller) ++c.callbacks_off_caller_thread;
  c.notifications.push_back(copy_notification(kind, queue, c.problems));
}

}  // namespace conveyor::conformance
