// The ABI 1.4 calls (job keys: enqueue_v4, claim_keys, list_ready_keys) as
// the PostgreSQL plugins' tests make them: one call each through the
// plugin's C table, what it reported copied out. Shared by both plugins'
// tests (job_keys_test.cc runs in each plugin's test binary).
#pragma once

#include "pg_test_support.hpp"

#include <conveyor/storage_plugin.h>
#include <conveyor/testing/plugin_calls.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace conveyor::postgres::test {

// One job for enqueue_v4.
struct KeyedJob {
  std::string queue;
  std::string key;
  std::string kind = "k";
  int32_t priority = 0;
  int64_t run_at = 0;
  int32_t cost = 1;
};

// enqueue_v4 of jobs at now; the ids into *ids, the error's message into
// *message (both may be null). Returns the status.
inline conveyor_status try_enqueue_keyed(const conveyor_storage_plugin* api, conveyor_storage* h,
                                         const std::vector<KeyedJob>& jobs, int64_t now,
                                         std::vector<int64_t>* ids = nullptr,
                                         std::string* message = nullptr) {
  std::vector<conveyor_new_job_v3> v;
  v.reserve(jobs.size());
  for (const KeyedJob& j : jobs)
    v.push_back(conveyor_new_job_v3{
        conveyor_new_job_v2{
            conveyor_new_job{str(j.queue), str(j.kind), str("{}"), j.priority, 3, j.run_at}, j.cost,
            0},
        str(j.key)});
  std::vector<int64_t> out(jobs.size(), 0);
  conveyor_error err{};
  const conveyor_status st = api->enqueue_v4(h, v.data(), v.size(), now, out.data(), &err);
  if (st != CONVEYOR_OK) {
    EXPECT_EQ(err.code, st);
  }
  if (ids != nullptr) *ids = out;
  if (message != nullptr) *message = st == CONVEYOR_OK ? "" : err.message;
  return st;
}

// enqueue_v4 that expects CONVEYOR_OK; returns the ids.
inline std::vector<int64_t> enqueue_keyed(const conveyor_storage_plugin* api, conveyor_storage* h,
                                          const std::vector<KeyedJob>& jobs, int64_t now) {
  std::vector<int64_t> ids;
  std::string message;
  EXPECT_EQ(try_enqueue_keyed(api, h, jobs, now, &ids, &message), CONVEYOR_OK) << message;
  return ids;
}

// What one claim_keys call did.
struct KeyClaimResult {
  conveyor_status status = CONVEYOR_OK;
  std::vector<JobCopy> jobs;  // in the order reported
  std::string message;
};

// One claim_keys call of (key, max_jobs) pairs; expects out_claimed to equal
// the jobs reported, and none reported on an error.
inline KeyClaimResult claim_keys(const conveyor_storage_plugin* api, conveyor_storage* h,
                                 const std::string& queue,
                                 const std::vector<std::pair<std::string, uint32_t>>& keys,
                                 const std::vector<std::string>& kinds, int64_t token, int64_t now,
                                 int64_t expires) {
  std::vector<conveyor_key_claim> k;
  for (const auto& [key, n] : keys) k.push_back(conveyor_key_claim{str(key), n, 0});
  std::vector<conveyor_str> kk;
  for (const std::string& kind : kinds) kk.push_back(str(kind));
  KeyClaimResult out;
  uint32_t claimed = 12345;
  conveyor_error err{};
  out.status = api->claim_keys(
      h, str(queue), kk.empty() ? nullptr : kk.data(), kk.size(), k.empty() ? nullptr : k.data(),
      k.size(), token, now, expires,
      [](void* ctx, const conveyor_job* j) {
        static_cast<std::vector<JobCopy>*>(ctx)->push_back(plugin_testing::copy_job(j));
      },
      &out.jobs, &claimed, &err);
  if (out.status == CONVEYOR_OK) {
    EXPECT_EQ(claimed, out.jobs.size());
  } else {
    EXPECT_EQ(err.code, out.status);
    EXPECT_TRUE(out.jobs.empty()) << "a failed claim_keys reports nothing";
    out.message = err.message;
  }
  return out;
}

// What one list_ready_keys call reported: (key, ready) in call order.
struct ReadyKeysResult {
  conveyor_status status = CONVEYOR_OK;
  std::vector<std::pair<std::string, int64_t>> keys;
  std::string message;
};

inline ReadyKeysResult ready_keys(const conveyor_storage_plugin* api, conveyor_storage* h,
                                  const std::string& queue, const std::optional<std::string>& after,
                                  uint32_t limit, uint32_t count_limit, int64_t now) {
  ReadyKeysResult out;
  conveyor_str a{};
  if (after) a = str(*after);
  uint32_t listed = 12345;
  conveyor_error err{};
  out.status = api->list_ready_keys(
      h, str(queue), after ? &a : nullptr, limit, count_limit, now,
      [](void* ctx, const conveyor_ready_key* k) {
        EXPECT_EQ(k->struct_size, sizeof(conveyor_ready_key));
        EXPECT_EQ(k->reserved0, 0u);
        static_cast<std::vector<std::pair<std::string, int64_t>>*>(ctx)->emplace_back(s(k->key),
                                                                                      k->ready);
      },
      &out.keys, &listed, &err);
  if (out.status == CONVEYOR_OK) {
    EXPECT_EQ(listed, out.keys.size());
  } else {
    EXPECT_EQ(err.code, out.status);
    EXPECT_TRUE(out.keys.empty()) << "a failed list_ready_keys reports nothing";
    out.message = err.message;
  }
  return out;
}

using ReadyKeys = std::vector<std::pair<std::string, int64_t>>;

}  // namespace conveyor::postgres::test
