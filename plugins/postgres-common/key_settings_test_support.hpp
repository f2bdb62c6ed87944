// The ABI 1.5 calls (set_key_setting, delete_key_setting, list_key_settings,
// delete_shared_states, add_shared_states) as the PostgreSQL plugins' tests
// make them: one call
// each through the plugin's C table, what it reported copied out. Shared by
// both plugins' tests (key_settings_test.cc runs in each plugin's test
// binary; each plugin's migration test uses them too).
#pragma once

#include "pg_test_support.hpp"

#include <conveyor/storage_plugin.h>
#include <conveyor/host/plugin_binding.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace conveyor::postgres::test {

// One key setting: what set_key_setting takes and list_key_settings reports
// (fields not in fields are 0).
struct Setting {
  std::string queue;
  int32_t target = CONVEYOR_KEY_TARGET_ONE;
  std::string key;
  uint32_t fields = 0;
  double rate = 0;
  uint32_t burst = 0;
  int32_t scope = 0;
  uint32_t weight = 0;
  int64_t updated_at = 0;  // listed only
  bool operator==(const Setting&) const = default;
};

inline void PrintTo(const Setting& s, std::ostream* os) {
  *os << "{" << s.queue << ", " << (s.target == CONVEYOR_KEY_TARGET_ONE ? "ONE" : "EVERY") << ", \""
      << s.key << "\", fields " << s.fields << ", rate " << s.rate << ", burst " << s.burst
      << ", scope " << s.scope << ", weight " << s.weight << ", at " << s.updated_at << "}";
}

// A key's own rate limit (CONVEYOR_KEY_FIELD_RATE only).
inline Setting rate_of(const std::string& queue, const std::string& key, double rate,
                       uint32_t burst, int32_t scope = CONVEYOR_SCOPE_PROCESS) {
  return Setting{queue, CONVEYOR_KEY_TARGET_ONE, key, CONVEYOR_KEY_FIELD_RATE, rate, burst, scope};
}
// Every key's rate limit in queue.
inline Setting every_key(const std::string& queue, double rate, uint32_t burst,
                         int32_t scope = CONVEYOR_SCOPE_PROCESS) {
  return Setting{queue, CONVEYOR_KEY_TARGET_EVERY, "", CONVEYOR_KEY_FIELD_RATE, rate, burst, scope};
}
// A key's weight (CONVEYOR_KEY_FIELD_WEIGHT only).
inline Setting weight_of(const std::string& queue, const std::string& key, uint32_t weight) {
  Setting s{queue, CONVEYOR_KEY_TARGET_ONE, key, CONVEYOR_KEY_FIELD_WEIGHT};
  s.weight = weight;
  return s;
}

// set_key_setting of s at now; the error's message into *message. Returns
// the status.
inline conveyor_status try_set_setting(const conveyor_storage_plugin* api, conveyor_storage* h,
                                       const Setting& s, int64_t now,
                                       std::string* message = nullptr) {
  conveyor_key_setting k{};
  k.struct_size = sizeof k;
  k.fields = s.fields;
  k.queue = str(s.queue);
  k.key = str(s.key);
  k.target = s.target;
  k.scope = s.scope;
  k.rate_per_sec = s.rate;
  k.burst = s.burst;
  k.weight = s.weight;
  conveyor_error err{};
  const conveyor_status st = api->set_key_setting(h, &k, now, &err);
  if (st != CONVEYOR_OK) {
    EXPECT_EQ(err.code, st);
  }
  if (message != nullptr) *message = st == CONVEYOR_OK ? "" : err.message;
  return st;
}

// set_key_setting that expects CONVEYOR_OK.
inline void set_setting(const conveyor_storage_plugin* api, conveyor_storage* h, const Setting& s,
                        int64_t now) {
  std::string message;
  EXPECT_EQ(try_set_setting(api, h, s, now, &message), CONVEYOR_OK) << message;
}

// delete_key_setting that expects CONVEYOR_OK; returns *out_cleared.
inline int32_t delete_setting(const conveyor_storage_plugin* api, conveyor_storage* h,
                              const std::string& queue, int32_t target, const std::string& key,
                              uint32_t fields) {
  int32_t cleared = 12345;
  conveyor_error err{};
  EXPECT_EQ(api->delete_key_setting(h, str(queue), target, str(key), fields, &cleared, &err),
            CONVEYOR_OK)
      << err.message;
  return cleared;
}

// list_key_settings that expects CONVEYOR_OK; the settings in the order
// reported, each checked against the header's rules for a listed setting.
inline std::vector<Setting> settings(const conveyor_storage_plugin* api, conveyor_storage* h) {
  std::vector<Setting> out;
  conveyor_error err{};
  EXPECT_EQ(api->list_key_settings(
                h,
                [](void* ctx, const conveyor_key_setting* k) {
                  EXPECT_EQ(k->struct_size, sizeof(conveyor_key_setting));
                  EXPECT_NE(k->fields, 0u);
                  EXPECT_EQ(k->fields & ~CONVEYOR_KEY_FIELDS_ALL, 0u);
                  static_cast<std::vector<Setting>*>(ctx)->push_back(
                      Setting{s(k->queue), k->target, s(k->key), k->fields, k->rate_per_sec,
                              k->burst, k->scope, k->weight, k->updated_at_us});
                },
                &out, &err),
            CONVEYOR_OK)
      << err.message;
  return out;
}

// delete_shared_states that expects CONVEYOR_OK; returns *out_deleted.
inline uint32_t delete_shared(const conveyor_storage_plugin* api, conveyor_storage* h,
                              const std::string& prefix, int64_t value_below, uint32_t limit) {
  uint32_t deleted = 12345;
  conveyor_error err{};
  EXPECT_EQ(api->delete_shared_states(h, str(prefix), value_below, limit, &deleted, &err),
            CONVEYOR_OK)
      << err.message;
  return deleted;
}

// One add of add_shared_states, and what one reported.
using KeyedAdd = host::PluginBinding::KeyedAdd;
using SharedAdded = host::PluginBinding::SharedAdded;

// add_shared_states of adds; per add, what it reported (status in *status,
// the message in *message).
inline std::vector<SharedAdded> try_add_many(const conveyor_storage_plugin* api,
                                             conveyor_storage* h, std::span<const KeyedAdd> adds,
                                             conveyor_status* status,
                                             std::string* message = nullptr) {
  host::PluginBinding b(*api, h);
  host::Result<std::vector<SharedAdded>> r = b.add_shared_states(adds);
  *status = r.status.code;
  if (message != nullptr) *message = r.status.message;
  return r.value;
}

// add_shared_states that expects CONVEYOR_OK.
inline std::vector<SharedAdded> add_many(const conveyor_storage_plugin* api, conveyor_storage* h,
                                         std::span<const KeyedAdd> adds) {
  conveyor_status st = CONVEYOR_OK;
  std::string message;
  std::vector<SharedAdded> out = try_add_many(api, h, adds, &st, &message);
  EXPECT_EQ(st, CONVEYOR_OK) << message;
  return out;
}

}  // namespace conveyor::postgres::test
