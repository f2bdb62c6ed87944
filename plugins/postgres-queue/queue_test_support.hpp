// What the postgres-queue plugin's tests share (besides pg_test_support).
#pragma once

#include "pg_test_support.hpp"

#include <conveyor/storage_plugin.h>

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>

namespace conveyor::pgqueue::test {

using postgres::test::JobCopy;
using postgres::test::leases_of;
using postgres::test::wall_us;

inline constexpr int64_t kSecond = 1'000'000;
inline constexpr int64_t kHour = 3600 * kSecond;

// Per queue: paused, pending, scheduled, running, completed, failed, cancelled.
using Counts = std::map<std::string, std::array<int64_t, 7>>;

inline std::array<int64_t, 7> counts_of(const conveyor_queue_stats& s) {
  return {s.paused, s.pending, s.scheduled, s.running, s.completed, s.failed, s.cancelled};
}

// What job_counts (ABI 1.1) reports at now, queues with nothing left out
// (storage_plugin.h: they "may be reported with zeros or left out").
inline Counts job_counts(const conveyor_storage_plugin* api, conveyor_storage* h, int64_t now) {
  Counts out;
  conveyor_error err{};
  const conveyor_status st = api->job_counts(
      h, now,
      [](void* ctx, const conveyor_queue_stats* s) {
        const std::array<int64_t, 7> c = counts_of(*s);
        if (c != std::array<int64_t, 7>{})
          (*static_cast<Counts*>(ctx))[std::string(s->queue.data, s->queue.len)] = c;
      },
      &out, &err);
  EXPECT_EQ(st, CONVEYOR_OK) << err.message;
  return out;
}

// The same from queue_stats, which counts the entries themselves.
inline Counts queue_stats(const conveyor_storage_plugin* api, conveyor_storage* h, int64_t now) {
  Counts out;
  conveyor_error err{};
  const conveyor_status st = api->queue_stats(
      h, now,
      [](void* ctx, const conveyor_queue_stats* s) {
        (*static_cast<Counts*>(ctx))[std::string(s->queue.data, s->queue.len)] = counts_of(*s);
      },
      &out, &err);
  EXPECT_EQ(st, CONVEYOR_OK) << err.message;
  return out;
}

}  // namespace conveyor::pgqueue::test
