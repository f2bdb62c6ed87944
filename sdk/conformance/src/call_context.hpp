// What the suite hands a plugin as a callback's ctx. Each call gets its own
// context, kept alive until the process ends: storage_plugin.h allows
// callbacks only during the call, and a plugin that calls back later must be
// caught (counted as a late callback) rather than scribble over a dead stack
// frame. Callbacks may arrive on any thread, so the context locks.
#pragma once

#include "reported.hpp"

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace conveyor::conformance {

struct CallContext {
  explicit CallContext(std::string op_name)
      : op(std::move(op_name)), caller(std::this_thread::get_id()) {}

  const std::string op;
  const std::thread::id caller;
  std::atomic<bool> active{true};  // false once the call returned

  std::mutex mu;  // guards everything below
  std::vector<std::string> problems;
  std::vector<JobCopy> jobs;
  std::vector<StatsCopy> stats;
  std::vector<LimitCopy> limits;
  std::vector<QueueCopy> queues;
  std::vector<NotificationCopy> notifications;
  int callbacks_off_caller_thread = 0;

  // C callbacks with ctx = CallContext*.
  static void on_job(void* ctx, const conveyor_job* job);
  static void on_stats(void* ctx, const conveyor_queue_stats* stats);
  static void on_limit(void* ctx, const conveyor_rate_limit* limit);
  static void on_queue(void* ctx, conveyor_str queue, int32_t paused);
  static void on_notify(void* ctx, int32_t kind, conveyor_str queue);
};

// A new context that is never freed (see above).
CallContext& new_call_context(std::string op);

// The operations whose callbacks arrived after their call had returned, since
// the last time this was called; clears the list.
std::vector<std::string> take_late_callbacks();

}  // namespace conveyor::conformance
