// QueueReport: what `conveyor queues`, the API and the dashboard show for a
// queue: counts from storage, the effective limit and its source, and the
// process's own counters when an engine is running.
#pragma once

#include <conveyor/job.hpp>
#include <conveyor/rate_limit.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace conveyor {

// Pending jobs of one kind that no consumer of this process serves.
struct KindCount {
  std::string kind;
  int64_t pending = 0;
  bool operator==(const KindCount&) const = default;
};

struct QueueReport {
  QueueStats stats;
  EffectiveLimit limit;
  uint64_t throttled = 0;  // this process's conveyor_ratelimit_throttled_total
  // Seconds since the oldest pending job became ready, as of the report; 0
  // when none is pending or the storage plugin (ABI 1.0) does not say.
  double oldest_pending_age_seconds = 0;
  // Kinds of jobs ready longer than [engine] unknown_kind_grace_s that no
  // consumer here serves, sorted by kind, counted among the first
  // UnservedKinds::kScanLimit such jobs of the queue (empty without an engine).
  std::vector<KindCount> unserved_kinds;
  // While limit.source is kBackoff: when the hold ends (wall clock, us).
  int64_t backoff_until_us = 0;
  // While limit.source is kBackoff: the answer that set the hold (its
  // status and the start of its body, or a worker's error text).
  std::string backoff_reason;
};

}  // namespace conveyor
