// QueueReport: what `conveyor queues`, the API and the dashboard show for a
// queue: counts from storage, the effective limit and its source, and the
// process's own counters when an engine is running.
#pragma once

#include <conveyor/config.hpp>
#include <conveyor/job.hpp>
#include <conveyor/rate_limit.hpp>

#include <cstdint>
#include <optional>
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

// One key of a queue, as `conveyor keys`, ListKeys and the dashboard's Keys
// panel show it (Engine::keys).
struct KeyReport {
  std::string key;
  // Ready jobs of the key as storage counts them (all processes), each key
  // counted up to kKeyReadyCountCap; ready_capped: at least that many.
  int64_t ready = 0;
  bool ready_capped = false;
  // Jobs of the key this process runs now (local handlers and its remote
  // workers), and whether the key's bucket was empty at its last turn. Only
  // from a running engine (KeysReport::live); otherwise 0 and false.
  uint32_t running = 0;
  bool throttled = false;
  // The key's rate limit now and where it comes from (kOverride: its own,
  // kEveryKeyOverride: the queue's for every key, kQueueConfig:
  // key_rate_limit, kDisabled: the kill switch, kNone), and its weight.
  std::optional<RateLimit> limit;
  LimitSource limit_source = LimitSource::kNone;
  uint32_t weight = 1;
};

// The keys of one queue (Engine::keys).
struct KeysReport {
  std::string queue;
  // Busiest first (most ready, then most running, then bytewise by key), at
  // most the limit asked.
  std::vector<KeyReport> keys;
  // Keys with ready jobs (storage) or running here, before the limit.
  uint64_t total_keys = 0;
  // Whether every key with ready jobs was read: false when the queue has
  // more than kKeysScanMax of them (then the first ones in bytewise order).
  bool complete = true;
  // Whether running and throttled come from a running engine in this
  // process; false (an engine not started, as in `conveyor keys` without
  // --server): they are unknown.
  bool live = false;
  // The per-key limits ([queues.NAME] key_rate_limit, or the run-time limit
  // for every key, which replaces it; key_max_workers), and their source:
  // kEveryKeyOverride for the run-time one, kQueueConfig when either is set
  // in the config, else kNone.
  std::optional<RateLimit> key_rate_limit;
  std::optional<uint32_t> key_max_workers;
  LimitSource limit_source = LimitSource::kNone;
  Fairness fairness = Fairness::kFair;
};

// Engine::keys: the most keys asked for at once, each key's ready count's
// cap, and the most keys with ready jobs read for one report.
inline constexpr uint32_t kKeysMax = 1000;
inline constexpr uint32_t kKeyReadyCountCap = 10000;
inline constexpr uint32_t kKeysScanMax = 100000;

}  // namespace conveyor
