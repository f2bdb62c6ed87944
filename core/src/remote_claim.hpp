// RemoteClaim: one waiting claim of a remote worker (the worker API's Claim
// long-poll), as the dispatcher serves it. The dispatcher grants it jobs
// exactly as it claims for the engine's own handlers: the queue's token
// bucket, its max_workers permits (remote jobs hold one each until they are
// settled or their lease expires), the same refund of unused tokens, the
// same throttled counter; the kinds filter (claim_kinds) keeps the engine's
// handlers and each worker to their own kinds.
//
// Lifetime: shared by the submitter and the dispatcher. state goes from
// kWaiting to kDone (granted jobs or an empty answer: deliver runs once) or
// to kCancelled (the submitter gave up: deliver never runs, and jobs claimed
// for it in the race are given back unspent).
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/job.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace conveyor {

struct QueueRunner;

struct RemoteClaim {
  enum State : uint8_t { kWaiting, kDone, kCancelled };

  struct Source {
    std::string queue;
    uint32_t weight = 1;       // >= 1: the chance of being tried first
    uint32_t max_workers = 1;  // the queue's, for a queue the dispatcher adds
  };
  std::vector<Source> queues;      // distinct, at least one
  std::vector<std::string> kinds;  // sorted, unique, at least one
  uint32_t max_jobs = 1;
  SteadyTime deadline{};  // answered empty then, if nothing was granted
  std::chrono::microseconds lease{};

  // The answer, once: the jobs (leased, state running) and the runner they
  // came from, or none and null. Runs on the dispatcher thread (or on the
  // thread of Dispatcher::submit_remote/close_remote); must not block.
  std::function<void(QueueRunner*, std::vector<Job>&&)> deliver;

  std::atomic<uint8_t> state{kWaiting};

  // Gives up (the client went away). True when the claim was still waiting:
  // deliver will not run.
  bool cancel() {
    uint8_t waiting = kWaiting;
    return state.compare_exchange_strong(waiting, kCancelled, std::memory_order_acq_rel);
  }
  // Takes the claim for answering. True for the one caller that may deliver.
  bool take() {
    uint8_t waiting = kWaiting;
    return state.compare_exchange_strong(waiting, kDone, std::memory_order_acq_rel);
  }
  bool waiting() const { return state.load(std::memory_order_acquire) == kWaiting; }
};

}  // namespace conveyor
