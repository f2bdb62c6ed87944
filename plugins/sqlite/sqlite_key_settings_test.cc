// Unit tests of the sqlite plugin's ABI 1.5 slots (schema 6): settings of
// keys made at run time (set_key_setting, delete_key_setting,
// list_key_settings; the table key_settings), delete_shared_states and
// add_shared_states, driven through its C ABI table.
#include <conveyor/testing/plugin_calls.hpp>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <latch>
#include <limits>
#include <numeric>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sqlite_storage.hpp"

namespace {

namespace fs = std::filesystem;
using namespace conveyor::plugin_testing;  // NOLINT: the shared test names

constexpr uint32_t kRate = CONVEYOR_KEY_FIELD_RATE;
constexpr uint32_t kWeight = CONVEYOR_KEY_FIELD_WEIGHT;
constexpr uint32_t kBoth = CONVEYOR_KEY_FIELDS_ALL;
constexpr int32_t kOne = CONVEYOR_KEY_TARGET_ONE;
constexpr int32_t kEvery = CONVEYOR_KEY_TARGET_EVERY;

// A key setting as set or as listed.
struct Setting {
  std::string queue;
  int32_t target = kOne;
  std::string key;
  uint32_t fields = 0;
  double rate = 0;
  uint32_t burst = 0;
  int32_t scope = 0;
  uint32_t weight = 0;
  int64_t updated_at = 0;

  bool operator==(const Setting&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Setting& k) {
  std::string key;
  for (const char ch : k.key) {
    const auto b = static_cast<unsigned char>(ch);
    if (b >= 0x20 && b < 0x7f) {
      key += ch;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      key += std::string("\\x") + kHex[b >> 4] + kHex[b & 15];
    }
  }
  return os << "{" << k.queue << ", target " << k.target << ", key \"" << key << "\", fields "
            << k.fields << ", rate " << k.rate << ", burst " << k.burst << ", scope " << k.scope
            << ", weight " << k.weight << ", updated_at " << k.updated_at << "}";
}

void collect_setting(void* ctx, const conveyor_key_setting* k) {
  EXPECT_EQ(k->struct_size, sizeof(conveyor_key_setting));
  static_cast<std::vector<Setting>*>(ctx)->push_back(
      Setting{s(k->queue), k->target, s(k->key), k->fields, k->rate_per_sec, k->burst, k->scope,
              k->weight, k->updated_at_us});
}

// A setting of the rate alone, of the weight alone.
Setting rate_of(std::string queue, int32_t target, std::string key, double rate, uint32_t burst,
                int32_t scope, int64_t at) {
  return Setting{std::move(queue), target, std::move(key), kRate, rate, burst, scope, 0, at};
}
Setting weight_of(std::string queue, int32_t target, std::string key, uint32_t weight, int64_t at) {
  return Setting{std::move(queue), target, std::move(key), kWeight, 0, 0, 0, weight, at};
}

// One add of add_shared_states: the key and add_shared_state's arguments.
struct Add {
  std::string key;
  int64_t credit = 0;
  int64_t low = 0;
  int64_t high = 0;
  int64_t unit = 1;
  uint32_t min_count = 1;
  uint32_t max_count = 1;
};

class SqliteKeySettingsTest : public ::testing::Test, public PluginCalls {
 protected:
  void SetUp() override {
    api_ = conveyor_storage_plugin_entry(CONVEYOR_ABI_MAJOR, CONVEYOR_ABI_MINOR);
    ASSERT_NE(api_, nullptr);
    std::string tmpl =
        (fs::path(::testing::TempDir()) / "conveyor-sqlite-settings-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << "mkdtemp failed";
    dir_ = tmpl;
    db_path_ = (fs::path(dir_) / "jobs.db").string();
  }

  void TearDown() override {
    close_all();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  conveyor_storage* open_store() { return open_tracked({{"path", db_path_}}); }

  // set_key_setting of k (its fields, values and updated_at as now_us).
  conveyor_status try_set(conveyor_storage* h, const Setting& k, std::string* message = nullptr) {
    conveyor_key_setting in{};
    in.struct_size = sizeof(conveyor_key_setting);
    in.fields = k.fields;
    in.queue = str(k.queue);
    in.key = str(k.key);
    in.target = k.target;
    in.scope = k.scope;
    in.rate_per_sec = k.rate;
    in.burst = k.burst;
    in.weight = k.weight;
    in.updated_at_us = -12345;  // input: ignored
    conveyor_error err{};
    const conveyor_status st = api_->set_key_setting(h, &in, k.updated_at, &err);
    if (message != nullptr) *message = err.message;
    return st;
  }
  void set(conveyor_storage* h, const Setting& k) {
    std::string msg;
    EXPECT_EQ(try_set(h, k, &msg), CONVEYOR_OK) << msg << " " << k;
  }

  // delete_key_setting; expects OK and returns out_cleared (-1 on failure).
  int32_t del(conveyor_storage* h, const std::string& queue, int32_t target, const std::string& key,
              uint32_t fields) {
    int32_t cleared = -1;
    conveyor_error err{};
    EXPECT_EQ(api_->delete_key_setting(h, str(queue), target, str(key), fields, &cleared, &err),
              CONVEYOR_OK)
        << err.message;
    return cleared;
  }

  std::vector<Setting> list(conveyor_storage* h) {
    std::vector<Setting> out;
    conveyor_error err{};
    EXPECT_EQ(api_->list_key_settings(h, collect_setting, &out, &err), CONVEYOR_OK) << err.message;
    return out;
  }

  // delete_shared_states; expects OK and returns out_deleted.
  uint32_t forget(conveyor_storage* h, const std::string& prefix, int64_t value_below,
                  uint32_t limit) {
    uint32_t deleted = 12345;
    conveyor_error err{};
    EXPECT_EQ(api_->delete_shared_states(h, str(prefix), value_below, limit, &deleted, &err),
              CONVEYOR_OK)
        << err.message;
    return deleted;
  }
  // Writes key's record (version 1 when new) with value.
  void put(conveyor_storage* h, const std::string& key, int64_t value) {
    const auto cur = swap_shared(h, key, -1, 0);
    ASSERT_EQ(swap_shared(h, key, cur.version, value).applied, 1) << key;
  }
  // The keys of the records, as stored, in key order.
  std::set<std::string> shared_keys() {
    const std::vector<std::string> v = texts("SELECT key FROM shared_state ORDER BY key");
    return std::set<std::string>(v.begin(), v.end());
  }

  // add_shared_states of adds: the status, out as written (out is filled
  // with a marker first) and the error message in *message.
  conveyor_status try_add_many(conveyor_storage* h, const std::vector<Add>& adds,
                               std::vector<conveyor_shared_added>* out,
                               std::string* message = nullptr) {
    std::vector<conveyor_shared_add> in;
    in.reserve(adds.size());
    for (const Add& a : adds)
      in.push_back(conveyor_shared_add{str(a.key), a.credit, a.low, a.high, a.unit, a.min_count,
                                       a.max_count});
    out->assign(adds.size(), conveyor_shared_added{-777, -777, 777, 777});
    conveyor_error err{};
    const conveyor_status st = api_->add_shared_states(
        h, in.empty() ? nullptr : in.data(), in.size(), out->empty() ? nullptr : out->data(), &err);
    if (message != nullptr) *message = err.message;
    return st;
  }
  // add_shared_states of adds; expects OK and returns out.
  std::vector<conveyor_shared_added> add_many(conveyor_storage* h, const std::vector<Add>& adds) {
    std::vector<conveyor_shared_added> out;
    std::string msg;
    EXPECT_EQ(try_add_many(h, adds, &out, &msg), CONVEYOR_OK) << msg;
    for (const conveyor_shared_added& o : out) EXPECT_EQ(o.reserved0, 0u);
    return out;
  }
  // add_shared_state of a alone.
  conveyor::host::PluginBinding::SharedAdded add_one(conveyor_storage* h, const Add& a) {
    return add_shared(h, a.key, a.credit, a.low, a.high, a.unit, a.min_count, a.max_count);
  }

  // Runs sql on db_path_ through a connection of the test's own.
  void exec(const std::string& sql) {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db_path_.c_str(), &raw), SQLITE_OK);
    char* msg = nullptr;
    EXPECT_EQ(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &msg), SQLITE_OK)
        << (msg ? msg : "");
    sqlite3_free(msg);
    sqlite3_close(raw);
  }
  // The first column of sql's rows, as text (bytes kept).
  std::vector<std::string> texts(const std::string& sql) {
    sqlite3* raw = nullptr;
    std::vector<std::string> out;
    EXPECT_EQ(sqlite3_open(db_path_.c_str(), &raw), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(raw, sql.c_str(), -1, &st, nullptr), SQLITE_OK)
        << sqlite3_errmsg(raw);
    while (sqlite3_step(st) == SQLITE_ROW) {
      const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      out.emplace_back(p != nullptr ? p : "", static_cast<size_t>(sqlite3_column_bytes(st, 0)));
    }
    sqlite3_finalize(st);
    sqlite3_close(raw);
    return out;
  }
  // The plan of statement sql, one detail line per entry.
  std::string plan(const char* sql) {
    std::string out;
    sqlite3* raw = nullptr;
    EXPECT_EQ(sqlite3_open(db_path_.c_str(), &raw), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(raw, (std::string("EXPLAIN QUERY PLAN ") + sql).c_str(), -1, &st,
                                 nullptr),
              SQLITE_OK)
        << sqlite3_errmsg(raw);
    while (sqlite3_step(st) == SQLITE_ROW)
      out += reinterpret_cast<const char*>(sqlite3_column_text(st, 3)) + std::string("\n");
    sqlite3_finalize(st);
    sqlite3_close(raw);
    return out;
  }

  std::string dir_;
  std::string db_path_;
};

// ---------------------------------------------------------------------------

TEST_F(SqliteKeySettingsTest, TheTableHasEveryAbi15Slot) {
  EXPECT_GE(api_->struct_size, CONVEYOR_PLUGIN_V1_5_SIZE);
  EXPECT_NE(api_->set_key_setting, nullptr);
  EXPECT_NE(api_->delete_key_setting, nullptr);
  EXPECT_NE(api_->list_key_settings, nullptr);
  EXPECT_NE(api_->delete_shared_states, nullptr);
  EXPECT_NE(api_->add_shared_states, nullptr);
}

// A set stores the fields it names and keeps the others; updated_at is the
// last set's time. A field never set reads 0.
TEST_F(SqliteKeySettingsTest, SetMergesTheNamedFieldsAndKeepsTheOthers) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  EXPECT_TRUE(list(h).empty());

  set(h, rate_of("q", kOne, "tenant", 2.5, 10, CONVEYOR_SCOPE_FLEET, 100));
  EXPECT_EQ(
      list(h),
      (std::vector<Setting>{rate_of("q", kOne, "tenant", 2.5, 10, CONVEYOR_SCOPE_FLEET, 100)}));

  set(h, weight_of("q", kOne, "tenant", 7, 200));
  EXPECT_EQ(
      list(h),
      (std::vector<Setting>{{"q", kOne, "tenant", kBoth, 2.5, 10, CONVEYOR_SCOPE_FLEET, 7, 200}}))
      << "the weight is added, the rate kept";

  set(h, rate_of("q", kOne, "tenant", 0.125, 1, CONVEYOR_SCOPE_PROCESS, 300));
  EXPECT_EQ(list(h), (std::vector<Setting>{
                         {"q", kOne, "tenant", kBoth, 0.125, 1, CONVEYOR_SCOPE_PROCESS, 7, 300}}))
      << "the rate, burst and scope are replaced, the weight kept";

  set(h, Setting{"q", kOne, "tenant", kBoth, 9, 3, CONVEYOR_SCOPE_FLEET, 1000, 400});
  EXPECT_EQ(
      list(h),
      (std::vector<Setting>{{"q", kOne, "tenant", kBoth, 9, 3, CONVEYOR_SCOPE_FLEET, 1000, 400}}))
      << "both fields at once";

  // A new row with the weight only: the rate's fields read 0.
  set(h, weight_of("q", kOne, "other", 1, 500));
  const std::vector<Setting> l = list(h);
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0], weight_of("q", kOne, "other", 1, 500));
  EXPECT_EQ(texts("SELECT count(*) FROM key_settings"), (std::vector<std::string>{"2"}))
      << "a set replaces its row, it does not add one";
}

// delete_key_setting clears the fields named; the row goes when no field is
// left; clearing what is not stored returns 0 and changes nothing.
TEST_F(SqliteKeySettingsTest, DeleteClearsOneFieldOrTheWholeRowAndIsIdempotent) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  set(h, Setting{"q", kOne, "a", kBoth, 4, 8, CONVEYOR_SCOPE_FLEET, 3, 100});
  set(h, Setting{"q", kOne, "b", kBoth, 4, 8, CONVEYOR_SCOPE_FLEET, 3, 100});

  EXPECT_EQ(del(h, "q", kOne, "a", kWeight), 1);
  EXPECT_EQ(list(h),
            (std::vector<Setting>{rate_of("q", kOne, "a", 4, 8, CONVEYOR_SCOPE_FLEET, 100),
                                  {"q", kOne, "b", kBoth, 4, 8, CONVEYOR_SCOPE_FLEET, 3, 100}}))
      << "the rate stays, updated_at too";
  EXPECT_EQ(texts("SELECT weight FROM key_settings WHERE key = 'a'"),
            (std::vector<std::string>{"0"}))
      << "a cleared field is stored as 0";
  EXPECT_EQ(del(h, "q", kOne, "a", kWeight), 0) << "the weight is gone already";
  EXPECT_EQ(del(h, "q", kOne, "a", kRate), 1);
  EXPECT_EQ(texts("SELECT count(*) FROM key_settings WHERE key = 'a'"),
            (std::vector<std::string>{"0"}))
      << "no field left: the row is deleted";
  EXPECT_EQ(del(h, "q", kOne, "a", kRate), 0);
  EXPECT_EQ(del(h, "q", kOne, "a", kBoth), 0);

  // Both fields at once; then the rate of a row that has the weight only.
  EXPECT_EQ(del(h, "q", kOne, "b", kBoth), 1);
  EXPECT_TRUE(list(h).empty());
  set(h, weight_of("q", kOne, "c", 5, 200));
  EXPECT_EQ(del(h, "q", kOne, "c", kRate), 0) << "the rate was never set";
  EXPECT_EQ(list(h), (std::vector<Setting>{weight_of("q", kOne, "c", 5, 200)}));
  EXPECT_EQ(del(h, "q", kOne, "c", kBoth), 1) << "one of the fields named was set";
  EXPECT_TRUE(list(h).empty());
  EXPECT_EQ(del(h, "never", kOne, "seen", kBoth), 0);
  EXPECT_EQ(del(h, "never", kEvery, "", kBoth), 0);
}

// Every change moves the change marker, as a queue's override does (and
// another handle is notified RATE_LIMITS); a delete that clears nothing, a
// listing and a refused call do not.
TEST_F(SqliteKeySettingsTest, TheMarkerMovesOnEveryChangeOnly) {
  conveyor_storage* h = open_store();
  conveyor_storage* waiter = open_store();
  ASSERT_NE(h, nullptr);
  ASSERT_NE(waiter, nullptr);
  using Seen = std::set<std::pair<int32_t, std::string>>;
  const auto next = [&](int64_t timeout_us = 10'000'000) {
    std::vector<Notice> notes;
    std::string msg;
    EXPECT_EQ(wait_notify(waiter, timeout_us, &notes, &msg), CONVEYOR_OK) << msg;
    Seen seen;
    for (const Notice& n : notes) seen.emplace(n.kind, n.queue);
    return seen;
  };
  EXPECT_EQ(next(20'000), Seen{}) << "the first look learns the state";
  const Seen limits_changed{{CONVEYOR_NOTIFY_RATE_LIMITS, ""}};

  const int64_t m0 = marker(h);
  set(h, rate_of("q", kOne, "k", 1, 1, CONVEYOR_SCOPE_PROCESS, 10));
  const int64_t m1 = marker(h);
  EXPECT_NE(m1, m0) << "a new setting";
  EXPECT_EQ(marker(waiter), m1) << "one marker for every handle on the file";
  EXPECT_EQ(next(), limits_changed);

  set(h, rate_of("q", kOne, "k", 1, 1, CONVEYOR_SCOPE_PROCESS, 20));
  const int64_t m2 = marker(h);
  EXPECT_NE(m2, m1) << "a set of the same values (a new updated_at)";
  EXPECT_EQ(next(), limits_changed);

  set(h, weight_of("q", kEvery, "", 2, 30));
  const int64_t m3 = marker(h);
  EXPECT_NE(m3, m2);
  EXPECT_EQ(next(), limits_changed);

  EXPECT_EQ(del(h, "q", kOne, "k", kWeight), 0);
  EXPECT_EQ(del(h, "q", kOne, "missing", kBoth), 0);
  EXPECT_EQ(list(h).size(), 2u);
  std::string msg;
  EXPECT_EQ(try_set(h, weight_of("q", kOne, "k", 0, 40), &msg), CONVEYOR_E_INVALID) << msg;
  EXPECT_EQ(marker(h), m3) << "nothing changed";
  EXPECT_EQ(next(100'000), Seen{}) << "nothing changed";

  EXPECT_EQ(del(h, "q", kEvery, "", kWeight), 1);
  const int64_t m4 = marker(h);
  EXPECT_NE(m4, m3) << "a delete that removed a row";
  EXPECT_EQ(next(), limits_changed);
  set(h, weight_of("q", kOne, "k", 3, 50));
  const int64_t m5 = marker(h);
  EXPECT_EQ(del(h, "q", kOne, "k", kWeight), 1);
  EXPECT_NE(marker(h), m5) << "a delete that cleared a field and kept the row";
  EXPECT_EQ(list(h).size(), 1u);
}

// list_key_settings: queue order, then target (ONE before EVERY), then key,
// all bytewise (memcmp: upper case before lower, a prefix before its
// extensions, 0xff last, a NUL byte kept).
TEST_F(SqliteKeySettingsTest, ListIsInQueueTargetKeyOrderBytewise) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::string nul("a\0b", 3);
  const std::string longest(CONVEYOR_JOB_KEY_MAX, '\xff');
  const std::vector<std::pair<std::string, std::string>> in = {
      {"b", "x"}, {"a", "\xc3\xa9"}, {"a", "ab"}, {"a", longest}, {"a", "a"},   {"B", "x"},
      {"a", nul}, {"a", "Z"},        {"a", ""},   {"a", "\xff"},  {"a b", "x"}, {"a", "a\x01"},
  };
  int64_t at = 1;
  for (const auto& [queue, key] : in) set(h, weight_of(queue, kOne, key, 1, at++));
  set(h, rate_of("a", kEvery, "", 1, 1, CONVEYOR_SCOPE_PROCESS, at++));
  set(h, rate_of("B", kEvery, "", 1, 1, CONVEYOR_SCOPE_PROCESS, at++));

  std::vector<std::pair<std::string, std::string>> got;
  std::vector<int32_t> targets;
  for (const Setting& k : list(h)) {
    got.emplace_back(k.queue, k.key);
    targets.push_back(k.target);
  }
  const std::vector<std::pair<std::string, std::string>> want = {
      {"B", "x"},         // 'B' < 'a'
      {"B", ""},          // EVERY after the queue's ONE rows
      {"a", ""},          // the empty key first
      {"a", "Z"},         // upper case before lower
      {"a", "a"},         // a prefix before its extensions
      {"a", nul},         // "a\0b": a NUL byte kept, before "a\x01"
      {"a", "a\x01"},     //
      {"a", "ab"},        //
      {"a", "\xc3\xa9"},  // bytes, not code points or locale order
      {"a", "\xff"},      //
      {"a", longest},     // 0xff 0xff ...
      {"a", ""},          // EVERY
      {"a b", "x"},       // ' ' after the end of "a"
      {"b", "x"},         //
  };
  EXPECT_EQ(got, want);
  EXPECT_EQ(targets, (std::vector<int32_t>{kOne, kEvery, kOne, kOne, kOne, kOne, kOne, kOne, kOne,
                                           kOne, kOne, kEvery, kOne, kOne}));
}

// The empty key's own setting (TARGET_ONE, key "") and the queue's every-key
// setting (TARGET_EVERY) are two settings: each is set, listed and cleared
// on its own.
TEST_F(SqliteKeySettingsTest, TheEmptyKeyAndEveryKeyAreDistinct) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  set(h, rate_of("q", kOne, "", 1, 2, CONVEYOR_SCOPE_PROCESS, 10));
  set(h, rate_of("q", kEvery, "", 3, 4, CONVEYOR_SCOPE_FLEET, 20));
  EXPECT_EQ(list(h),
            (std::vector<Setting>{rate_of("q", kOne, "", 1, 2, CONVEYOR_SCOPE_PROCESS, 10),
                                  rate_of("q", kEvery, "", 3, 4, CONVEYOR_SCOPE_FLEET, 20)}));
  EXPECT_EQ(del(h, "q", kEvery, "", kRate), 1);
  EXPECT_EQ(list(h),
            (std::vector<Setting>{rate_of("q", kOne, "", 1, 2, CONVEYOR_SCOPE_PROCESS, 10)}))
      << "the empty key's own setting stays";
  EXPECT_EQ(del(h, "q", kEvery, "", kRate), 0);
  set(h, weight_of("q", kEvery, "", 9, 30));
  EXPECT_EQ(del(h, "q", kOne, "", kBoth), 1);
  EXPECT_EQ(list(h), (std::vector<Setting>{weight_of("q", kEvery, "", 9, 30)}))
      << "the every-key setting stays";
  // Other queues are other settings too.
  set(h, weight_of("r", kEvery, "", 2, 40));
  EXPECT_EQ(del(h, "q", kEvery, "", kWeight), 1);
  EXPECT_EQ(list(h), (std::vector<Setting>{weight_of("r", kEvery, "", 2, 40)}));
}

// What the adapter refuses stores nothing.
TEST_F(SqliteKeySettingsTest, RefusedCallsStoreNothing) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  set(h, weight_of("q", kOne, "k", 4, 10));
  const int64_t m = marker(h);
  const std::vector<Setting> before = list(h);
  const std::string too_long(CONVEYOR_JOB_KEY_MAX + 1, 'k');
  for (const Setting& bad : {
           Setting{"q", kOne, "k", 0, 1, 1, 0, 1, 20},                        // no field
           Setting{"q", kOne, "k", 4, 1, 1, 0, 1, 20},                        // an unknown field
           Setting{"", kOne, "k", kWeight, 0, 0, 0, 1, 20},                   // no queue
           Setting{"q", 2, "k", kWeight, 0, 0, 0, 1, 20},                     // an unknown target
           Setting{"q", kEvery, "k", kWeight, 0, 0, 0, 1, 20},                // EVERY with a key
           Setting{"q", kOne, too_long, kWeight, 0, 0, 0, 1, 20},             // a long key
           rate_of("q", kOne, "k", 0, 1, CONVEYOR_SCOPE_PROCESS, 20),         // rate 0
           rate_of("q", kOne, "k", -1, 1, CONVEYOR_SCOPE_PROCESS, 20),        // rate < 0
           rate_of("q", kOne, "k", INFINITY, 1, CONVEYOR_SCOPE_PROCESS, 20),  // not finite
           rate_of("q", kOne, "k", 1, 0, CONVEYOR_SCOPE_PROCESS, 20),         // burst 0
           rate_of("q", kOne, "k", 1, 1, 2, 20),                              // an unknown scope
           weight_of("q", kOne, "k", 0, 20),                                  // weight 0
           weight_of("q", kOne, "k", CONVEYOR_KEY_WEIGHT_MAX + 1, 20),        // weight too big
       }) {
    std::string msg;
    EXPECT_EQ(try_set(h, bad, &msg), CONVEYOR_E_INVALID) << bad;
  }
  conveyor_error err{};
  int32_t cleared = 0;
  EXPECT_EQ(api_->set_key_setting(h, nullptr, 0, &err), CONVEYOR_E_INVALID);
  EXPECT_EQ(api_->delete_key_setting(h, str("q"), kOne, str("k"), kWeight, nullptr, &err),
            CONVEYOR_E_INVALID);
  EXPECT_EQ(api_->delete_key_setting(h, str("q"), kOne, str("k"), 0, &cleared, &err),
            CONVEYOR_E_INVALID);
  EXPECT_EQ(api_->delete_key_setting(h, str(""), kOne, str("k"), kWeight, &cleared, &err),
            CONVEYOR_E_INVALID);
  EXPECT_EQ(list(h), before);
  EXPECT_EQ(marker(h), m);
}

// Settings are durable: they survive closing every handle, and a new handle
// reads them (and the marker) as they were.
TEST_F(SqliteKeySettingsTest, SettingsSurviveCloseAndReopen) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::string odd("t\xc3\xa9nant\0/1", 10);
  set(h, Setting{"q", kOne, odd, kBoth, 0.5, 3, CONVEYOR_SCOPE_FLEET, 250, 111});
  set(h, rate_of("q", kEvery, "", 100, 50, CONVEYOR_SCOPE_PROCESS, 222));
  set(h, weight_of("q", kOne, "gone", 2, 333));
  EXPECT_EQ(del(h, "q", kOne, "gone", kWeight), 1);
  const std::vector<Setting> before = list(h);
  ASSERT_EQ(before.size(), 2u);
  const int64_t m = marker(h);
  close_store(h);

  conveyor_storage* again = open_store();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(list(again), before);
  EXPECT_EQ(list(again)[0].key, odd);
  EXPECT_EQ(marker(again), m);
  EXPECT_EQ(del(again, "q", kOne, odd, kRate), 1);
  EXPECT_EQ(list(again)[0], weight_of("q", kOne, odd, 250, 111));
}

// A database of schema 5 (ABI 1.4) upgrades on open: it gains the table
// key_settings, empty, and keeps its jobs, overrides, shared records and
// marker; migrate again is a no-op.
TEST_F(SqliteKeySettingsTest, UpgradeFromSchema5GainsKeySettingsAndKeepsEverything) {
  ASSERT_GE(conveyor::sqlite::kSchemaVersion, 6);
  {
    std::string sql;
    for (int v = 0; v < 5; ++v) sql += conveyor::sqlite::schema_steps()[v];
    sql +=
        "PRAGMA user_version = 5;"
        "INSERT INTO queues (name, paused, next_pos, end_pos) VALUES ('q', 1, 1048578, 2097152);"
        "INSERT INTO jobs (pos, id, queue, kind, payload, priority, state, attempt, max_attempts,"
        " run_at, created_at, finalized_at, lease_token, lease_expires, cost, key) VALUES"
        " (1048576, 1, 'q', 'k', 'one', 0, 1, 0, 3, 10, 10, 0, 0, 0, 2, 'tenant'),"
        " (1048577, 2, 'q', 'k', 'two', 0, 4, 1, 3, 10, 10, 20, 0, 0, 1, '');"
        "INSERT INTO job_counts (queue, state, n) VALUES ('q', 4, 1);"
        "UPDATE meta SET value = 2 WHERE key = 'last_job_id';"
        "UPDATE meta SET value = 2 WHERE key = 'next_block';"
        "UPDATE meta SET value = 41 WHERE key = 'change_marker';"
        "INSERT INTO rate_limits (queue, rate, burst, updated_at, scope)"
        " VALUES ('q', 2.5, 4, 7, 1);"
        "INSERT INTO shared_state (key, version, value) VALUES ('kb:q:tenant', 3, 99);";
    exec(sql);
  }
  conveyor_storage* h = open_store();  // migrates 5 -> 6 (and on to the current version)
  ASSERT_NE(h, nullptr);
  conveyor_error err{};
  ASSERT_EQ(api_->migrate(h, &err), CONVEYOR_OK) << "again: " << err.message;
  EXPECT_EQ(texts("PRAGMA user_version"),
            (std::vector<std::string>{std::to_string(conveyor::sqlite::kSchemaVersion)}));
  EXPECT_EQ(texts("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'key_settings'"),
            (std::vector<std::string>{"key_settings"}));
  EXPECT_TRUE(list(h).empty());

  // Everything kept.
  EXPECT_EQ(marker(h), 41);
  JobCopy one;
  ASSERT_EQ(get(h, 1, 100, &one), CONVEYOR_OK);
  EXPECT_EQ(one.payload, "one");
  EXPECT_EQ(one.cost, 2);
  JobCopy two;
  ASSERT_EQ(get(h, 2, 100, &two), CONVEYOR_OK);
  EXPECT_EQ(two.state, CONVEYOR_JOB_COMPLETED);
  EXPECT_EQ(texts("SELECT key FROM jobs WHERE id = 1"), (std::vector<std::string>{"tenant"}));
  const std::vector<LimitCopy> l = limits(h);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].rate, 2.5);
  EXPECT_EQ(l[0].burst, 4u);
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_FLEET);
  const auto rec = swap_shared(h, "kb:q:tenant", -1, 0);
  EXPECT_EQ(rec.version, 3);
  EXPECT_EQ(rec.value, 99);
  const std::vector<std::pair<std::string, int32_t>> qs = queues(h);
  ASSERT_EQ(qs.size(), 1u);
  EXPECT_EQ(qs[0].second, 1) << "still paused";
  EXPECT_EQ(enqueue(h, "q"), 3) << "ids continue";

  // The new calls work on it.
  set(h, weight_of("q", kOne, "tenant", 5, 500));
  EXPECT_EQ(list(h), (std::vector<Setting>{weight_of("q", kOne, "tenant", 5, 500)}));
  EXPECT_GT(marker(h), 41);
  EXPECT_EQ(forget(h, "kb:q:", 100, 10), 1u);
  EXPECT_TRUE(shared_keys().empty());
}

// ---- delete_shared_states -------------------------------------------------

// A record is deleted when its key starts with the prefix, byte for byte:
// not when it only shares a shorter prefix, nor when the prefix's % and _
// would match as LIKE wildcards or LIKE would ignore case; a prefix equal to
// the whole key matches.
TEST_F(SqliteKeySettingsTest, DeleteSharedStatesMatchesThePrefixExactly) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::string nul("k_b%:\0z", 7);
  const std::set<std::string> match = {"k_b%:", "k_b%:1", "k_b%:\xff\xff", nul, "k_b%:%", "k_b%:_"};
  const std::set<std::string> other = {
      "k_b%",     // shorter: shares a shorter prefix only
      "k_b",      //
      "kxb%:1",   // _ as LIKE's any character
      "k_bzz:1",  // % as LIKE's any string
      "k_b%%:1",  //
      "K_B%:1",   // LIKE ignores ASCII case
      "k_b%;",    // the byte after ':' (the range's upper bound)
      "k_b%9",    // the byte before ':'
      "j",        //
      "l",        //
  };
  for (const std::string& k : match) put(h, k, 5);
  for (const std::string& k : other) put(h, k, 5);
  EXPECT_EQ(forget(h, "k_b%:", 10, 100), match.size());
  EXPECT_EQ(shared_keys(), other);
  for (const std::string& k : match) {
    const auto r = swap_shared(h, k, -1, 0);
    EXPECT_EQ(r.version, 0) << "a deleted record reads as never written";
    EXPECT_EQ(r.value, 0);
  }
  EXPECT_EQ(forget(h, "k_b%:", 10, 100), 0u) << "nothing left";
  EXPECT_EQ(forget(h, "K", 10, 100), 1u) << "K_B%:1 only";
  EXPECT_EQ(forget(h, "k_b%", 10, 100), 4u) << "k_b%, k_b%%:1, k_b%; and k_b%9";
  EXPECT_EQ(shared_keys(), (std::set<std::string>{"j", "k_b", "k_bzz:1", "kxb%:1", "l"}));
}

// Prefixes ending in 0xff bytes have their successor further up (or none):
// the range still holds exactly the keys that start with the prefix.
TEST_F(SqliteKeySettingsTest, DeleteSharedStatesHandlesPrefixesEndingInHighBytes) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::string longest(CONVEYOR_SHARED_KEY_MAX, '\xff');
  for (const std::string& k :
       {std::string("a"), std::string("a\xfe"), std::string("a\xff"), std::string("a\xff\x01"),
        std::string("a\xff\xff"), std::string("b"), std::string("\xfe\xff"), std::string("\xff"),
        std::string("\xff\x00", 2), std::string("\xff\xff"), longest})
    put(h, k, 1);
  EXPECT_EQ(forget(h, "a\xff", 2, 100), 3u);
  EXPECT_EQ(shared_keys(),
            (std::set<std::string>{"a", "a\xfe", "b", "\xfe\xff", "\xff",
                                   std::string("\xff\x00", 2), "\xff\xff", longest}));
  EXPECT_EQ(forget(h, "\xff\xff", 2, 100), 2u) << "\\xff\\xff and the longest key";
  EXPECT_EQ(shared_keys(), (std::set<std::string>{"a", "a\xfe", "b", "\xfe\xff", "\xff",
                                                  std::string("\xff\x00", 2)}));
  EXPECT_EQ(forget(h, longest, 2, 100), 0u);
  EXPECT_EQ(forget(h, "\xff", 2, 100), 2u);
  EXPECT_EQ(shared_keys(), (std::set<std::string>{"a", "a\xfe", "b", "\xfe\xff"}));
}

// Only records whose value is below value_below (strictly), and at most
// limit of them a call: fewer than limit means none is left.
TEST_F(SqliteKeySettingsTest, DeleteSharedStatesTakesValuesStrictlyBelowUpToLimit) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  put(h, "p:min", kMin);
  put(h, "p:neg", -5);
  put(h, "p:9", 9);
  put(h, "p:10", 10);
  put(h, "p:11", 11);
  put(h, "p:max", kMax);
  put(h, "q:0", 0);  // another prefix
  EXPECT_EQ(forget(h, "p:", kMin, 100), 0u) << "nothing is below the least value";
  EXPECT_EQ(forget(h, "p:", 10, 100), 3u) << "min, -5, 9: not 10";
  EXPECT_EQ(shared_keys(), (std::set<std::string>{"p:10", "p:11", "p:max", "q:0"}));
  EXPECT_EQ(forget(h, "p:", 11, 100), 1u);
  EXPECT_EQ(forget(h, "p:", kMax, 100), 1u);
  EXPECT_EQ(shared_keys(), (std::set<std::string>{"p:max", "q:0"}));

  // limit.
  for (int i = 0; i < 5; ++i) put(h, "r:" + std::to_string(i), 100 + i);
  put(h, "r:high", 1000);
  EXPECT_EQ(forget(h, "r:", 200, 2), 2u);
  EXPECT_EQ(forget(h, "r:", 200, 2), 2u);
  EXPECT_EQ(forget(h, "r:", 200, 2), 1u) << "fewer than limit: no more";
  EXPECT_EQ(forget(h, "r:", 200, 2), 0u);
  EXPECT_EQ(shared_keys(), (std::set<std::string>{"p:max", "q:0", "r:high"}));

  // A deleted record starts again from (0, 0): a swap expecting version 0
  // applies.
  put(h, "s:k", 3);
  EXPECT_EQ(forget(h, "s:", 4, 1), 1u);
  const auto r = swap_shared(h, "s:k", 0, 42);
  EXPECT_EQ(r.applied, 1);
  EXPECT_EQ(r.version, 1);
  EXPECT_EQ(r.value, 42);

  conveyor_error err{};
  uint32_t deleted = 0;
  EXPECT_EQ(api_->delete_shared_states(h, str(""), 10, 1, &deleted, &err), CONVEYOR_E_INVALID);
  EXPECT_EQ(api_->delete_shared_states(h, str("r:"), 10, 0, &deleted, &err), CONVEYOR_E_INVALID);
  EXPECT_EQ(api_->delete_shared_states(h, str("r:"), 10, 1, nullptr, &err), CONVEYOR_E_INVALID);
  const std::string too_long(CONVEYOR_SHARED_KEY_MAX + 1, 'p');
  EXPECT_EQ(api_->delete_shared_states(h, str(too_long), kMax, 1, &deleted, &err),
            CONVEYOR_E_INVALID);
  EXPECT_EQ(shared_keys(), (std::set<std::string>{"p:max", "q:0", "r:high", "s:k"}));
}

// The statement reads the prefix's range of the primary key, not the table.
TEST_F(SqliteKeySettingsTest, DeleteSharedStatesReadsThePrefixRangeOnly) {
  ASSERT_NE(open_store(), nullptr);
  const std::string p = plan(conveyor::sqlite::sql::kDeleteSharedStates.text);
  EXPECT_NE(p.find("SEARCH shared_state USING PRIMARY KEY (key>? AND key<?)"), std::string::npos)
      << p;
  EXPECT_EQ(p.find("SCAN shared_state"), std::string::npos) << p;
  EXPECT_EQ(p.find("TEMP B-TREE"), std::string::npos) << "no sort:\n" << p;
}

// A swap racing a deletion on another handle: either the swap moved the
// record to a value not below first (it is not deleted), or the deletion
// came first (the swap, expecting the old version, does not apply and the
// record stays deleted). Never both, never neither.
TEST_F(SqliteKeySettingsTest, DeleteSharedStatesIsAtomicAgainstConcurrentSwaps) {
  conveyor_storage* swapper = open_store();
  conveyor_storage* deleter = open_store();
  ASSERT_NE(swapper, nullptr);
  ASSERT_NE(deleter, nullptr);
  int deletions = 0;
  int swaps = 0;
  for (int round = 0; round < 100; ++round) {
    const std::string key = "race:" + std::to_string(round);
    put(swapper, key, 1);  // version 1, below 10
    int32_t applied = -1;
    uint32_t deleted = 12345;
    const auto swap = [&] { applied = swap_shared(swapper, key, 1, 50).applied; };
    const auto remove = [&] { deleted = forget(deleter, "race:", 10, 10); };
    // Each starts first in half the rounds, so that both orders happen.
    std::thread t1(round % 2 == 0 ? std::function<void()>(swap) : std::function<void()>(remove));
    std::thread t2(round % 2 == 0 ? std::function<void()>(remove) : std::function<void()>(swap));
    t1.join();
    t2.join();
    ASSERT_EQ(applied + static_cast<int32_t>(deleted), 1)
        << "round " << round << ": applied " << applied << ", deleted " << deleted;
    const auto r = swap_shared(swapper, key, -1, 0);
    if (applied == 1) {
      ++swaps;
      EXPECT_EQ(r.version, 2);
      EXPECT_EQ(r.value, 50);
    } else {
      ++deletions;
      EXPECT_EQ(r.version, 0);
      EXPECT_EQ(r.value, 0);
    }
  }
  EXPECT_EQ(swaps + deletions, 100);
}

// ---- add_shared_states ----------------------------------------------------

// Each add of a batch does what add_shared_state does alone: the same
// count, version and value, on records in the same states (never written,
// value below low, above low with credit, count capped by max_count, below
// min_count, base above high, negative values, the largest magnitudes).
// Twice, so that the second batch starts from the records the first left.
TEST_F(SqliteKeySettingsTest, AddSharedStatesDoesWhatEachAddDoesAlone) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  constexpr int64_t kAddMax = CONVEYOR_SHARED_ADD_MAX;
  constexpr uint32_t kCountMax = std::numeric_limits<uint32_t>::max();
  struct Case {
    std::optional<int64_t> start;  // the record's value before (none: never written)
    Add add;                       // key: a suffix
  };
  const std::vector<Case> cases = {
      {std::nullopt, {"fresh", 0, 100, 110, 2, 1, 10}},  // 5 units from low
      {50, {"below-low", 0, 100, 105, 1, 1, 3}},         // base low, capped at 3
      {200, {"credit", 30, 100, 250, 10, 1, 100}},       // base 170: 8
      {200, {"above-high", 0, 100, 150, 1, 1, 5}},       // base above high: nothing
      {200, {"under-min", 0, 100, 215, 10, 2, 5}},       // 1 fits, min 2: nothing
      {std::nullopt, {"fresh-none", 0, 7, 7, 1, 1, 1}},  // 0 fits: nothing, no record
      {-50, {"negative", 5, -100, 0, 7, 1, 100}},        // base -55: 7
      {std::nullopt, {"huge", 0, 0, kAddMax, 1, 1, kCountMax}},
      {-kAddMax, {"huge-unit", kAddMax, -kAddMax, 0, kAddMax, 1, 1}},
      {3, {"exact", 0, 0, 10, 7, 1, 1}},  // 3 + 7 == high
  };
  std::vector<Add> batch;
  for (const Case& c : cases) {
    for (const char* side : {"batch:", "alone:"})
      if (c.start) put(h, side + c.add.key, *c.start);
    Add a = c.add;
    a.key = "batch:" + c.add.key;
    batch.push_back(a);
  }
  for (int round = 0; round < 2; ++round) {
    const std::vector<conveyor_shared_added> got = add_many(h, batch);
    ASSERT_EQ(got.size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      Add a = cases[i].add;
      a.key = "alone:" + cases[i].add.key;
      const auto want = add_one(h, a);
      EXPECT_EQ(got[i].count, want.count) << "round " << round << ": " << a.key;
      EXPECT_EQ(got[i].version, want.version) << "round " << round << ": " << a.key;
      EXPECT_EQ(got[i].value, want.value) << "round " << round << ": " << a.key;
      const auto rec = swap_shared(h, batch[i].key, -1, 0);
      EXPECT_EQ(rec.version, got[i].version) << "as stored: " << batch[i].key;
      EXPECT_EQ(rec.value, got[i].value) << "as stored: " << batch[i].key;
    }
  }
  // The expected ones, spelled out for the first cases of round one (the
  // records now hold round two's results).
  EXPECT_EQ(swap_shared(h, "batch:fresh", -1, 0).value, 110);
  EXPECT_EQ(swap_shared(h, "batch:credit", -1, 0).value, 250);
  EXPECT_EQ(swap_shared(h, "batch:above-high", -1, 0).version, 1) << "never moved";
  EXPECT_EQ(swap_shared(h, "batch:under-min", -1, 0).version, 1) << "never moved";
  EXPECT_EQ(shared_keys().count("batch:fresh-none"), 0u) << "an add that gets nothing writes none";
  // n == 0 is a no-op.
  EXPECT_TRUE(add_many(h, {}).empty());
}

// An add that gets nothing leaves its record as it was and does not stop
// the adds before or after it in the batch.
TEST_F(SqliteKeySettingsTest, AddSharedStatesAnAddThatGetsNothingStopsNoOther) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  put(h, "full", 100);  // version 1
  const std::vector<Add> adds = {
      {"first", 0, 0, 10, 1, 1, 4},
      {"full", 0, 0, 100, 1, 1, 4},  // value 100 == high: nothing fits
      {"wants-too-many", 0, 0, 10, 1, 11, 20},
      {"last", 5, 0, 10, 2, 1, 2},
  };
  const std::vector<conveyor_shared_added> got = add_many(h, adds);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].count, 4u);
  EXPECT_EQ(got[0].version, 1);
  EXPECT_EQ(got[0].value, 4);
  EXPECT_EQ(got[1].count, 0u);
  EXPECT_EQ(got[1].version, 1) << "the record as it is: unchanged";
  EXPECT_EQ(got[1].value, 100);
  EXPECT_EQ(got[2].count, 0u);
  EXPECT_EQ(got[2].version, 0) << "never written, and still not";
  EXPECT_EQ(got[2].value, 0);
  EXPECT_EQ(got[3].count, 2u);
  EXPECT_EQ(got[3].version, 1);
  EXPECT_EQ(got[3].value, 4);
  EXPECT_EQ(shared_keys(), (std::set<std::string>{"first", "full", "last"}));
  const auto full = swap_shared(h, "full", -1, 0);
  EXPECT_EQ(full.version, 1);
  EXPECT_EQ(full.value, 100);

  // A batch where every add gets nothing changes nothing at all.
  const std::vector<conveyor_shared_added> none =
      add_many(h, {{"full", 0, 0, 100, 1, 1, 1}, {"first", 0, 0, 4, 1, 1, 1}});
  ASSERT_EQ(none.size(), 2u);
  EXPECT_EQ(none[0].count + none[1].count, 0u);
  EXPECT_EQ(none[1].version, 1);
  EXPECT_EQ(none[1].value, 4);
  EXPECT_EQ(shared_keys(), (std::set<std::string>{"first", "full", "last"}));
}

// CONVEYOR_SHARED_ADDS_MAX keys in one call, each with its own arguments;
// then one more than that, a repeated key and a refused add are
// CONVEYOR_E_INVALID and change nothing.
TEST_F(SqliteKeySettingsTest, AddSharedStatesTakesAThousandKeys) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  static_assert(CONVEYOR_SHARED_ADDS_MAX == 1000);
  constexpr size_t kN = CONVEYOR_SHARED_ADDS_MAX;
  std::vector<Add> adds;
  for (size_t i = 0; i < kN; ++i) {
    // Key i may take up to i % 7 + 1 units of 3 from low 1000 + i.
    const auto n = static_cast<int64_t>(i);
    adds.push_back(
        Add{"bucket:" + std::to_string(i), 0, 1000 + n, 1000 + n + 3 * (n % 7 + 1), 3, 1, 100});
  }
  const std::vector<conveyor_shared_added> got = add_many(h, adds);
  ASSERT_EQ(got.size(), kN);
  for (size_t i = 0; i < kN; ++i) {
    const auto n = static_cast<int64_t>(i);
    EXPECT_EQ(got[i].count, static_cast<uint32_t>(i % 7 + 1)) << i;
    EXPECT_EQ(got[i].version, 1) << i;
    EXPECT_EQ(got[i].value, 1000 + n + 3 * (n % 7 + 1)) << i;
  }
  EXPECT_EQ(shared_keys().size(), kN);
  EXPECT_EQ(swap_shared(h, "bucket:999", -1, 0).value, 1000 + 999 + 3 * (999 % 7 + 1));

  // Again with 100 units of credit each: every bucket takes what the credit
  // gave back (base = value - 100), version 2.
  for (Add& a : adds) a.credit = 100;
  const std::vector<conveyor_shared_added> again = add_many(h, adds);
  ASSERT_EQ(again.size(), kN);
  for (size_t i = 0; i < kN; ++i) {
    const auto n = static_cast<int64_t>(i);
    const int64_t base = std::max<int64_t>(got[i].value - 100, 1000 + n);
    const int64_t fits = (adds[i].high - base) / 3;
    EXPECT_EQ(again[i].count, static_cast<uint32_t>(fits)) << i;
    EXPECT_EQ(again[i].version, fits > 0 ? 2 : 1) << i;
    EXPECT_EQ(again[i].value, fits > 0 ? base + 3 * fits : got[i].value) << i;
  }

  // Refused batches change nothing.
  const auto before = texts("SELECT key || ':' || version || ':' || value FROM shared_state");
  std::vector<conveyor_shared_added> out;
  std::vector<Add> too_many = adds;
  too_many.push_back(Add{"bucket:extra", 0, 0, 10, 1, 1, 1});
  EXPECT_EQ(try_add_many(h, too_many, &out), CONVEYOR_E_INVALID);
  std::vector<Add> twice(adds.begin(), adds.begin() + 10);
  twice.push_back(adds[3]);
  EXPECT_EQ(try_add_many(h, twice, &out), CONVEYOR_E_INVALID);
  std::vector<Add> bad(adds.begin(), adds.begin() + 10);
  bad[7].unit = 0;
  std::string msg;
  EXPECT_EQ(try_add_many(h, bad, &out, &msg), CONVEYOR_E_INVALID);
  EXPECT_NE(msg.find("adds[7]"), std::string::npos) << msg;
  EXPECT_EQ(texts("SELECT key || ':' || version || ':' || value FROM shared_state"), before);
}

// Two handles on one file, each in its own thread, send batches of adds on
// the same keys (in different orders): no key ever grants more than its
// bound allows. With credit 0 and a fixed low, a key's value only grows
// from low and its counts add up to (value - low) / unit exactly, at most
// (high - low) / unit; its version is the number of adds that got
// something. Each side alone asks for less than a key's room and both
// together for more: every key ends used up, by adds of both sides.
TEST_F(SqliteKeySettingsTest, AddSharedStatesConcurrentBatchesNeverOverGrant) {
  conveyor_storage* a = open_store();
  conveyor_storage* b = open_store();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  constexpr int kKeys = 24;
  constexpr int kRounds = 120;
  // Even keys: 1..3 units of 1, room for 500 (a side asks for at most
  // 360). Odd keys: exactly 2 units of 1, room for 301, of which 300 can be
  // granted (a side asks for 240).
  const auto add_of = [](int k) {
    Add x{"fleet:" + std::to_string(k), 0, 1000, 1500, 1, 1, 3};
    if (k % 2 == 1) {
      x.high = 1301;
      x.min_count = 2;
      x.max_count = 2;
    }
    return x;
  };
  struct Tally {
    std::vector<uint64_t> granted = std::vector<uint64_t>(kKeys, 0);
    std::vector<int64_t> applied = std::vector<int64_t>(kKeys, 0);
  };
  Tally ta;
  Tally tb;
  std::latch start(2);
  const auto run = [&](conveyor_storage* h, Tally* t, bool reversed) {
    start.arrive_and_wait();
    for (int r = 0; r < kRounds; ++r) {
      std::vector<int> order(kKeys);
      std::iota(order.begin(), order.end(), 0);
      // Each round a different rotation, one side reversed: the two sides'
      // batches list the keys in different orders.
      std::rotate(order.begin(), order.begin() + (r * 5) % kKeys, order.end());
      if (reversed) std::reverse(order.begin(), order.end());
      std::vector<Add> adds;
      for (const int k : order) adds.push_back(add_of(k));
      std::vector<conveyor_shared_added> out;
      std::string msg;
      const conveyor_status st = try_add_many(h, adds, &out, &msg);
      EXPECT_EQ(st, CONVEYOR_OK) << msg;
      if (st != CONVEYOR_OK) return;
      for (size_t i = 0; i < order.size(); ++i) {
        t->granted[order[i]] += out[i].count;
        if (out[i].count > 0) ++t->applied[order[i]];
      }
    }
  };
  std::thread ta_thread(run, a, &ta, false);
  std::thread tb_thread(run, b, &tb, true);
  ta_thread.join();
  tb_thread.join();
  for (int k = 0; k < kKeys; ++k) {
    const Add x = add_of(k);
    const uint64_t granted = ta.granted[k] + tb.granted[k];
    const auto room = static_cast<uint64_t>((x.high - x.low) / x.unit);
    EXPECT_LE(granted, room) << x.key << ": over-granted";
    // Every add before the key is used up gets a whole add's units or what
    // is left, and the two sides ask for more than the room: used up to the
    // last whole add.
    EXPECT_EQ(granted, k % 2 == 0 ? 500u : 300u) << x.key;
    const auto rec = swap_shared(a, x.key, -1, 0);
    EXPECT_EQ(rec.value, x.low + static_cast<int64_t>(granted)) << x.key;
    EXPECT_EQ(rec.version, ta.applied[k] + tb.applied[k]) << x.key;
    // Neither side alone could use the key up, so the other had some too.
    EXPECT_GT(ta.applied[k], 0) << x.key;
    EXPECT_GT(tb.applied[k], 0) << x.key;
  }
}

}  // namespace
