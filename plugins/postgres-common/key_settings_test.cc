// ABI 1.5 against a real PostgreSQL (CONVEYOR_TEST_PG_DSN), the same tests
// for both PostgreSQL plugins: this file is compiled into each plugin's test
// binary, which drives that plugin through its C ABI table. Key settings
// merge the fields a set names into one row per (queue, target, key), lose
// them to deletes one field at a time, move the change marker and notify
// like a rate-limit override, and list in byte order; delete_shared_states
// deletes the records under a prefix (byte for byte) whose value is below a
// bound, a limit at a time, and never one a concurrent swap moved up.
#include "key_settings_test_support.hpp"

#include <atomic>
#include <chrono>
#include <climits>
#include <thread>

namespace conveyor::postgres::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr uint32_t kRate = CONVEYOR_KEY_FIELD_RATE;
constexpr uint32_t kWeight = CONVEYOR_KEY_FIELD_WEIGHT;
constexpr int32_t kOne = CONVEYOR_KEY_TARGET_ONE;
constexpr int32_t kEvery = CONVEYOR_KEY_TARGET_EVERY;

class PgKeySettingsTest : public PgTest {
 protected:
  void set(conveyor_storage* h, const Setting& s, int64_t now = 100) {
    set_setting(api_, h, s, now);
  }
  int32_t clear(conveyor_storage* h, const std::string& queue, int32_t target,
                const std::string& key, uint32_t fields) {
    return delete_setting(api_, h, queue, target, key, fields);
  }
  std::vector<Setting> listed(conveyor_storage* h) { return settings(api_, h); }
  uint32_t forget(conveyor_storage* h, const std::string& prefix, int64_t below, uint32_t limit) {
    return delete_shared(api_, h, prefix, below, limit);
  }
  // A shared record of key holding value (version 1).
  void record(conveyor_storage* h, const std::string& key, int64_t value) {
    ASSERT_EQ(swap_shared(h, key, 0, value).applied, 1) << key;
  }
  // What a read of key gives: "version/value".
  std::string read(conveyor_storage* h, const std::string& key) {
    host::PluginBinding::Shared r = swap_shared(h, key, -1, 0);
    return std::to_string(r.version) + "/" + std::to_string(r.value);
  }
  // The shared records' sequences in the schema (two per record).
  int64_t record_sequences() {
    return sql("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
               " WHERE n.nspname = '" +
               schema_ + "' AND c.relkind = 'S' AND c.relname LIKE 'shared\\_%'")[0][0]
        .as<int64_t>();
  }
  // Opens a listening handle and consumes the catch-up it reports first.
  conveyor_storage* open_listener() {
    conveyor_storage* h = open_store();
    if (h == nullptr) return nullptr;
    std::vector<Notice> catch_up;
    std::string msg;
    EXPECT_EQ(wait_notify(h, 1'000'000, &catch_up, &msg), CONVEYOR_OK) << msg;
    return h;
  }
  // Waits up to timeout for notifications on h; returns them.
  std::vector<Notice> collect(conveyor_storage* h, milliseconds timeout) {
    std::vector<Notice> out;
    const auto deadline = steady_clock::now() + timeout;
    while (out.empty() && steady_clock::now() < deadline) {
      std::string msg;
      EXPECT_EQ(wait_notify(h, 100'000, &out, &msg), CONVEYOR_OK) << msg;
    }
    return out;
  }
};

TEST_F(PgKeySettingsTest, EveryV15SlotIsFilled) {
  EXPECT_GE(api_->struct_size, CONVEYOR_PLUGIN_V1_5_SIZE);
  EXPECT_GE(api_->abi_minor, 5u);
  EXPECT_NE(api_->set_key_setting, nullptr);
  EXPECT_NE(api_->delete_key_setting, nullptr);
  EXPECT_NE(api_->list_key_settings, nullptr);
  EXPECT_NE(api_->delete_shared_states, nullptr);
}

// A set stores the fields it names and keeps the others the row has: a rate
// then a weight make one row with both; a new rate replaces the rate only;
// updated_at is the last set's now. Values round-trip exactly, and another
// handle reads the same.
TEST_F(PgKeySettingsTest, SetMergesTheFieldsItNamesIntoOneRow) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  EXPECT_TRUE(listed(h).empty());
  set(h, rate_of("q", "tenant-1", 1.0 / 3.0, 7), 100);
  Setting want = rate_of("q", "tenant-1", 1.0 / 3.0, 7);
  want.updated_at = 100;
  EXPECT_EQ(listed(h), std::vector{want});

  set(h, weight_of("q", "tenant-1", 5), 200);
  want.fields = kRate | kWeight;
  want.weight = 5;
  want.updated_at = 200;
  EXPECT_EQ(listed(h), std::vector{want}) << "one row, both fields";

  set(h, rate_of("q", "tenant-1", 2.5, UINT32_MAX, CONVEYOR_SCOPE_FLEET), 300);
  want.rate = 2.5;
  want.burst = UINT32_MAX;
  want.scope = CONVEYOR_SCOPE_FLEET;
  want.updated_at = 300;
  EXPECT_EQ(listed(h), std::vector{want}) << "the rate replaced, the weight kept";

  Setting both = weight_of("q", "tenant-1", CONVEYOR_KEY_WEIGHT_MAX);
  both.fields = kRate | kWeight;
  both.rate = 0.125;
  both.burst = 1;
  set(h, both, 400);
  both.updated_at = 400;
  EXPECT_EQ(listed(h), std::vector{both}) << "both fields in one set";

  conveyor_storage* other = open_store();
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(listed(other), std::vector{both});
  EXPECT_EQ(sql("SELECT count(*) FROM \"" + schema_ + "\".key_settings")[0][0].as<int>(), 1);
}

// A delete clears the fields it names: the row stays while it has one, and
// goes with the last. Clearing what is not stored reports 0 and changes
// nothing, the marker included.
TEST_F(PgKeySettingsTest, DeleteClearsTheFieldsItNamesAndTheRowWithTheLast) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  set(h, rate_of("q", "k", 4, 2), 10);
  set(h, weight_of("q", "k", 3), 20);

  int64_t m = marker(h);
  EXPECT_EQ(clear(h, "q", kOne, "k", kWeight), 1);
  EXPECT_NE(marker(h), m);
  Setting want = rate_of("q", "k", 4, 2);
  want.updated_at = 20;
  EXPECT_EQ(listed(h), std::vector{want}) << "the weight cleared, reported as 0";

  m = marker(h);
  EXPECT_EQ(clear(h, "q", kOne, "k", kWeight), 0) << "the weight is gone already";
  EXPECT_EQ(marker(h), m) << "a delete that clears nothing changes nothing";
  EXPECT_EQ(listed(h), std::vector{want});

  EXPECT_EQ(clear(h, "q", kOne, "k", kRate), 1);
  EXPECT_TRUE(listed(h).empty()) << "the row went with its last field";
  EXPECT_EQ(sql("SELECT count(*) FROM \"" + schema_ + "\".key_settings")[0][0].as<int>(), 0);
  m = marker(h);
  EXPECT_EQ(clear(h, "q", kOne, "k", kRate | kWeight), 0);
  EXPECT_EQ(clear(h, "nowhere", kEvery, "", kRate), 0);
  EXPECT_EQ(marker(h), m);

  // Both fields in one delete; a delete naming more than is stored.
  set(h, rate_of("q", "k", 4, 2), 30);
  set(h, weight_of("q", "k", 3), 40);
  EXPECT_EQ(clear(h, "q", kOne, "k", kRate | kWeight), 1);
  EXPECT_TRUE(listed(h).empty());
  set(h, weight_of("q", "k", 3), 50);
  EXPECT_EQ(clear(h, "q", kOne, "k", kRate | kWeight), 1) << "the weight was set";
  EXPECT_TRUE(listed(h).empty());
}

// Every set, and every delete that clears something, moves the change
// marker and sends RATE_LIMITS for the queue, as a rate-limit override does;
// a delete that clears nothing sends nothing.
TEST_F(PgKeySettingsTest, ChangesMoveTheMarkerAndNotifyTheQueue) {
  conveyor_storage* listener = open_listener();
  conveyor_storage* admin = open_store();
  ASSERT_NE(listener, nullptr);
  ASSERT_NE(admin, nullptr);

  const int64_t m0 = marker(admin);
  set(admin, every_key("email", 5, 1));
  const int64_t m1 = marker(listener);
  EXPECT_NE(m1, m0) << "a set moves the marker, seen by another handle";
  std::vector<Notice> got = collect(listener, milliseconds(3000));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].kind, CONVEYOR_NOTIFY_RATE_LIMITS);
  EXPECT_EQ(got[0].queue, "email");

  set(admin, weight_of("sms", "", 2));
  const int64_t m2 = marker(listener);
  EXPECT_NE(m2, m1);
  got = collect(listener, milliseconds(3000));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].kind, CONVEYOR_NOTIFY_RATE_LIMITS);
  EXPECT_EQ(got[0].queue, "sms");

  EXPECT_EQ(clear(admin, "email", kEvery, "", kRate), 1);
  const int64_t m3 = marker(listener);
  EXPECT_NE(m3, m2);
  got = collect(listener, milliseconds(3000));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].kind, CONVEYOR_NOTIFY_RATE_LIMITS);
  EXPECT_EQ(got[0].queue, "email");

  EXPECT_EQ(clear(admin, "email", kEvery, "", kRate), 0);
  EXPECT_EQ(clear(admin, "sms", kOne, "", kRate), 0) << "a weight only: no rate to clear";
  EXPECT_EQ(marker(listener), m3);
  got.clear();
  std::string msg;
  EXPECT_EQ(wait_notify(listener, 500'000, &got, &msg), CONVEYOR_OK) << msg;
  EXPECT_TRUE(got.empty()) << "deletes that cleared nothing sent " << got.size();
}

// list_key_settings: queue (bytewise), then target ONE before EVERY, then
// key (bytewise), whatever the order of the sets.
TEST_F(PgKeySettingsTest, ListIsInQueueTargetKeyOrderBytewise) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::string e_acute = "\xc3\xa9", del = "\x7f";
  set(h, weight_of("b", "a", 1));
  set(h, every_key("b", 1, 1));
  set(h, weight_of("b", e_acute, 1));
  set(h, weight_of("b", "Z", 1));
  set(h, weight_of("b", del, 1));
  set(h, weight_of("b", "", 1));
  set(h, weight_of("b", "a b", 1));
  set(h, weight_of("a", "z", 1));
  set(h, weight_of("B", "z", 1));
  set(h, weight_of("a-", "a", 1));
  std::vector<std::pair<std::string, std::string>> order;
  for (const Setting& s : listed(h))
    order.emplace_back(s.queue + (s.target == kEvery ? "/EVERY" : "/ONE"), s.key);
  const std::vector<std::pair<std::string, std::string>> want = {
      {"B/ONE", "z"}, {"a/ONE", "z"},   {"a-/ONE", "a"}, {"b/ONE", ""},      {"b/ONE", "Z"},
      {"b/ONE", "a"}, {"b/ONE", "a b"}, {"b/ONE", del},  {"b/ONE", e_acute}, {"b/EVERY", ""}};
  EXPECT_EQ(order, want);
}

// The empty key (jobs enqueued without a key) is a key: its setting is not
// every key's, and each is set and deleted alone.
TEST_F(PgKeySettingsTest, TheEmptyKeyAndEveryKeyAreDifferentSettings) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  set(h, rate_of("q", "", 1, 1), 10);
  set(h, every_key("q", 9, 9), 20);
  set(h, weight_of("q", "", 4), 30);
  std::vector<Setting> got = listed(h);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].target, kOne);
  EXPECT_EQ(got[0].key, "");
  EXPECT_EQ(got[0].fields, kRate | kWeight);
  EXPECT_EQ(got[0].rate, 1);
  EXPECT_EQ(got[0].weight, 4u);
  EXPECT_EQ(got[1].target, kEvery);
  EXPECT_EQ(got[1].key, "");
  EXPECT_EQ(got[1].fields, kRate);
  EXPECT_EQ(got[1].rate, 9);
  EXPECT_EQ(got[1].weight, 0u);

  EXPECT_EQ(clear(h, "q", kEvery, "", kRate | kWeight), 1);
  got = listed(h);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].target, kOne) << "the empty key's setting stays";
  EXPECT_EQ(clear(h, "q", kEvery, "", kRate), 0);
  EXPECT_EQ(clear(h, "q", kOne, "", kRate), 1);
  EXPECT_EQ(listed(h).at(0).fields, kWeight);
}

// What cannot be stored is refused and stores nothing: a key or queue that
// is not text, and what the adapter checks (EVERY with a key, no fields).
TEST_F(PgKeySettingsTest, SettingsThatCannotBeStoredAreRefused) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const int64_t m = marker(h);
  std::string message;
  EXPECT_EQ(try_set_setting(api_, h, weight_of("q", std::string("a\0b", 3), 1), 1, &message),
            CONVEYOR_E_INVALID);
  EXPECT_NE(message.find("key"), std::string::npos) << message;
  EXPECT_EQ(try_set_setting(api_, h, weight_of("q", "\xff", 1), 1), CONVEYOR_E_INVALID);
  EXPECT_EQ(try_set_setting(api_, h, weight_of("q\xc3", "k", 1), 1), CONVEYOR_E_INVALID);
  Setting every = every_key("q", 1, 1);
  every.key = "k";
  EXPECT_EQ(try_set_setting(api_, h, every, 1), CONVEYOR_E_INVALID);
  Setting none = weight_of("q", "k", 1);
  none.fields = 0;
  EXPECT_EQ(try_set_setting(api_, h, none, 1), CONVEYOR_E_INVALID);
  int32_t cleared = 7;
  conveyor_error err{};
  EXPECT_EQ(api_->delete_key_setting(h, str("q"), kOne, str("\xff"), kRate, &cleared, &err),
            CONVEYOR_E_INVALID);
  EXPECT_TRUE(listed(h).empty());
  EXPECT_EQ(marker(h), m);
}

// delete_shared_states compares keys with the prefix byte for byte: LIKE's
// wildcards are plain bytes, a key shorter than the prefix or sharing only
// part of it stays, and a prefix may end inside a character.
TEST_F(PgKeySettingsTest, DeleteSharedStatesMatchesThePrefixByteForByte) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::vector<std::string> kept = {
      "ratelimit.key",   "ratelimit.kex:a", "ratelimit.kez:a",
      "ratelimit%key:a", "ratelimit_key:a", "ratelimitXkey:a",
      "Ratelimit.key:a", "ratelimit.ke",    "ratelimit.bucket:q"};
  const std::vector<std::string> gone = {"ratelimit.key:a", "ratelimit.key:b/=x", "ratelimit.key:%",
                                         "ratelimit.key:_", "ratelimit.key:\xc3\xa9"};
  for (const std::string& k : kept) record(h, k, 0);
  for (const std::string& k : gone) record(h, k, 0);
  const int64_t sequences = record_sequences();
  EXPECT_EQ(forget(h, "ratelimit.key:", 1, 100), gone.size());
  for (const std::string& k : gone) EXPECT_EQ(read(h, k), "0/0") << k;
  for (const std::string& k : kept) EXPECT_EQ(read(h, k), "1/0") << k;
  EXPECT_EQ(record_sequences(), sequences - 2 * static_cast<int64_t>(gone.size()))
      << "a deleted record's sequences are dropped";

  // Wildcards in the prefix match themselves only.
  for (const std::string k : {"a%1", "ab1", "a_1", "ab2", "a\\1"}) record(h, k, 0);
  EXPECT_EQ(forget(h, "a%", 1, 100), 1u);
  EXPECT_EQ(read(h, "ab1"), "1/0");
  EXPECT_EQ(forget(h, "a_", 1, 100), 1u);
  EXPECT_EQ(read(h, "ab2"), "1/0");
  EXPECT_EQ(forget(h, "a\\", 1, 100), 1u);
  EXPECT_EQ(read(h, "ab1"), "1/0");

  // A prefix ending inside a character: its bytes, not its characters.
  for (const std::string k : {"x\xc3\xa9", "x\xc3\xaa", "x\xc4\x80", "xe"}) record(h, k, 0);
  EXPECT_EQ(forget(h, "x\xc3\xa9", 1, 100), 1u);
  EXPECT_EQ(forget(h, "x\xc3", 1, 100), 1u) << "x\xc3\xaa";
  EXPECT_EQ(read(h, "x\xc4\x80"), "1/0");
  EXPECT_EQ(read(h, "xe"), "1/0");
  EXPECT_EQ(forget(h, "\xff", 1, 100), 0u) << "no key starts with a byte UTF-8 never has";
  EXPECT_EQ(forget(h, std::string("x\0", 2), 1, 100), 0u);
  EXPECT_EQ(forget(h, "x", 1, 100), 2u);
}

// Only values strictly below value_below go; a deleted record reads as
// never written, and is written again from version 0.
TEST_F(PgKeySettingsTest, DeleteSharedStatesDeletesOnlyValuesBelowTheBound) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  record(h, "v:a", 99);
  record(h, "v:b", 100);
  record(h, "v:c", 101);
  record(h, "v:d", -5);
  record(h, "v:e", INT64_MIN);
  record(h, "v:f", INT64_MAX);
  EXPECT_EQ(forget(h, "v:", INT64_MIN, 100), 0u) << "nothing is below the least value";
  EXPECT_EQ(forget(h, "v:", 100, 100), 3u);
  EXPECT_EQ(read(h, "v:a"), "0/0");
  EXPECT_EQ(read(h, "v:b"), "1/100") << "value_below is strict";
  EXPECT_EQ(read(h, "v:c"), "1/101");
  EXPECT_EQ(read(h, "v:d"), "0/0");
  EXPECT_EQ(read(h, "v:e"), "0/0");
  EXPECT_EQ(read(h, "v:f"), "1/" + std::to_string(INT64_MAX));
  EXPECT_EQ(forget(h, "v:", 100, 100), 0u);
  EXPECT_EQ(swap_shared(h, "v:a", 1, 5).applied, 0) << "the record starts over";
  EXPECT_EQ(swap_shared(h, "v:a", 0, 5).applied, 1);
  EXPECT_EQ(read(h, "v:a"), "1/5");
  host::PluginBinding::SharedAdded added = add_shared(h, "v:d", 0, 0, 1000, 100, 1, 2);
  EXPECT_EQ(added.version, 1) << "an add on a deleted record starts from (0, 0)";
  EXPECT_EQ(added.value, 200);
}

// limit bounds each call; fewer than limit means no more records match.
// Prefixes with more records than one statement reads (256) are read in
// pages: every record is reached, and the count is exact.
TEST_F(PgKeySettingsTest, DeleteSharedStatesStopsAtTheLimit) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  for (int i = 0; i < 5; ++i) record(h, "l:" + std::to_string(i), i);
  EXPECT_EQ(forget(h, "l:", 100, 2), 2u);
  EXPECT_EQ(read(h, "l:0"), "0/0") << "in key order";
  EXPECT_EQ(read(h, "l:1"), "0/0");
  EXPECT_EQ(forget(h, "l:", 100, 2), 2u);
  EXPECT_EQ(forget(h, "l:", 100, 2), 1u);
  EXPECT_EQ(forget(h, "l:", 100, 2), 0u);

  // 600 records, every third one in use (value 500), straight into the
  // schema (kSharedStateInPlace's function makes a record as a swap does).
  const std::string s = "\"" + schema_ + "\"";
  sql("SELECT " + s + ".shared_key_create('p:' || lpad(i::text, 4, '0'), 1, " +
      "CASE WHEN i % 3 = 0 THEN 500 ELSE 5 END) FROM generate_series(1, 600) AS i");
  EXPECT_EQ(forget(h, "p:", 100, 1000), 400u);
  EXPECT_EQ(forget(h, "p:", 100, 1000), 0u);
  EXPECT_EQ(sql("SELECT count(*) FROM " + s + ".shared_keys WHERE key LIKE 'p:%'")[0][0].as<int>(),
            200);
  EXPECT_EQ(read(h, "p:0003"), "1/500");
  EXPECT_EQ(read(h, "p:0004"), "0/0");

  sql("SELECT " + s + ".shared_key_create('r:' || lpad(i::text, 4, '0'), 1, 5) " +
      "FROM generate_series(1, 600) AS i");
  EXPECT_EQ(forget(h, "r:", 100, 300), 300u);
  EXPECT_EQ(forget(h, "r:", 100, 299), 299u);
  EXPECT_EQ(forget(h, "r:", 100, 300), 1u);
  EXPECT_EQ(read(h, "r:0600"), "0/0");
}

// A record whose key another session has locked (a swap halfway) is left,
// and goes once the lock is gone.
TEST_F(PgKeySettingsTest, DeleteSharedStatesLeavesARecordBeingSwapped) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  record(h, "busy:a", 1);
  record(h, "busy:b", 1);
  {
    pqxx::connection c(dsn_);
    pqxx::work tx(c);
    // The lock swap_shared_state takes (kSharedStateInPlace).
    tx.exec("SELECT pg_advisory_xact_lock(1399349618, hashtext('\"" + schema_ +
            "\"' || 'busy:a'))");
    EXPECT_EQ(forget(h, "busy:", 100, 10), 1u);
    EXPECT_EQ(read(h, "busy:b"), "0/0");
    tx.commit();
  }
  EXPECT_EQ(read(h, "busy:a"), "1/1");
  EXPECT_EQ(forget(h, "busy:", 100, 10), 1u);
  EXPECT_EQ(read(h, "busy:a"), "0/0");
}

// Swaps move records from below the bound to above it while deletes run
// (the swaps from the last key back, the deletes from the first on, so they
// meet on keys both want): a swap that applied kept its record (it reads as
// written), and every swap that did not apply found its record deleted
// first. Two deleting handles at once delete each record once.
TEST_F(PgKeySettingsTest, DeleteSharedStatesNeverDeletesARecordASwapMovedUp) {
  conveyor_storage* swapper = open_store();
  conveyor_storage* sweeper = open_store();
  conveyor_storage* sweeper2 = open_store();
  ASSERT_NE(swapper, nullptr);
  ASSERT_NE(sweeper, nullptr);
  ASSERT_NE(sweeper2, nullptr);
  constexpr int kKeys = 200;
  auto key = [](int i) {
    const std::string n = std::to_string(i);
    return "race:" + std::string(3 - n.size(), '0') + n;
  };
  for (int i = 0; i < kKeys; ++i) record(swapper, key(i), 10);

  std::vector<int32_t> applied(kKeys, -1);
  std::atomic<bool> done{false};
  std::atomic<uint32_t> deleted{0};
  auto sweep = [&](conveyor_storage* h) {
    while (!done.load()) deleted += forget(h, "race:", 100, 3);
  };
  std::thread a(sweep, sweeper), b(sweep, sweeper2);
  for (int i = kKeys - 1; i >= 0; --i) applied[i] = swap_shared(swapper, key(i), 1, 1000).applied;
  done = true;
  a.join();
  b.join();
  deleted += forget(sweeper, "race:", 100, 1000);

  uint32_t not_applied = 0;
  for (int i = 0; i < kKeys; ++i) {
    if (applied[i] == 1) {
      EXPECT_EQ(read(swapper, key(i)), "2/1000") << key(i) << ": an applied swap was deleted";
    } else {
      ++not_applied;
      EXPECT_EQ(read(swapper, key(i)), "0/0") << key(i);
    }
  }
  EXPECT_EQ(deleted.load(), not_applied);
}

}  // namespace
}  // namespace conveyor::postgres::test
