// add_shared_states (ABI 1.5) against a real PostgreSQL
// (CONVEYOR_TEST_PG_DSN), the same tests for both PostgreSQL plugins: this
// file is compiled into each plugin's test binary, which drives that plugin
// through its C ABI table. Each add of a batch does what add_shared_state
// alone would; an add that gets nothing leaves its key alone and the others
// go on; CONVEYOR_SHARED_ADDS_MAX keys go in one call; batches from many
// connections at once, over the same keys in any order (keys whose locks
// collide included), never grant more than a bucket holds and never
// deadlock.
#include "key_settings_test_support.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <map>
#include <mutex>
#include <random>
#include <thread>

namespace conveyor::postgres::test {
namespace {

constexpr int64_t kMax = CONVEYOR_SHARED_ADD_MAX;

std::string shown(const SharedAdded& a) {
  return std::to_string(a.version) + "/" + std::to_string(a.value) + " +" + std::to_string(a.count);
}

class PgSharedAddsTest : public PgTest {
 protected:
  // What a read of key gives: "version/value".
  std::string read(conveyor_storage* h, const std::string& key) {
    host::PluginBinding::Shared r = swap_shared(h, key, -1, 0);
    return std::to_string(r.version) + "/" + std::to_string(r.value);
  }
  SharedAdded add_one(conveyor_storage* h, const KeyedAdd& a) {
    return add_shared(h, a.key, a.credit, a.low, a.high, a.unit, a.min_count, a.max_count);
  }
  // The shared records' sequences in the schema (two per record).
  int64_t record_sequences() {
    return sql("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
               " WHERE n.nspname = '" +
               schema_ + "' AND c.relkind = 'S' AND c.relname LIKE 'shared\\_%'")[0][0]
        .as<int64_t>();
  }
};

TEST_F(PgSharedAddsTest, TheSlotIsFilled) {
  EXPECT_GE(api_->struct_size, CONVEYOR_PLUGIN_V1_5_SIZE);
  EXPECT_NE(api_->add_shared_states, nullptr);
}

// Records in every state an add meets (none yet, at or below low, within
// credit of low, above high, at the extremes), each given adds that take
// all they ask, some, fewer than min_count (nothing) or nothing at all: a
// batch over keys "b:" gives, add for add, what add_shared_state alone
// gives on keys "s:" in the same states, and leaves the same records.
TEST_F(PgSharedAddsTest, EachAddIsWhatItWouldBeAlone) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  struct Case {
    int64_t start;  // < INT64_MIN + 1: no record
    KeyedAdd add;
  };
  constexpr int64_t kNone = INT64_MIN;
  const std::vector<Case> cases = {
      {kNone, {"", 0, 0, 10, 1, 1, 1}},                         // new key, one unit
      {kNone, {"", 0, 0, 10, 3, 1, 5}},                         // new key, 3 of 5 (10 / 3)
      {kNone, {"", 0, 0, 10, 11, 1, 1}},                        // new key, unit above room
      {0, {"", 0, 0, 100, 10, 2, 4}},                           // takes 4
      {95, {"", 0, 0, 100, 10, 1, 4}},                          // nothing: no room
      {95, {"", 20, 0, 100, 10, 1, 4}},                         // credit 20: base 75, takes 2
      {-50, {"", 7, -10, 10, 5, 1, 100}},                       // below low: from low, 4
      {1000, {"", 0, 0, 100, 1, 1, 1}},                         // above high: nothing
      {1000, {"", 950, 0, 100, 1, 1, 1000}},                    // credit down to 50, 50 more
      {40, {"", 0, 0, 100, 20, 4, 5}},                          // 3 fit, min 4: nothing
      {40, {"", kMax, -kMax / 2, kMax / 2, 1, 1, UINT32_MAX}},  // from low, max count
      {kMax, {"", kMax, 0, kMax, kMax, 1, 1}},  // credit back to 0, one unit of 2^62
      {-kMax, {"", 0, -kMax, 0, 1, 1, 3}},      // the least value
  };
  std::vector<KeyedAdd> batch;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string n = std::to_string(i);
    if (c.start != kNone) {
      ASSERT_EQ(swap_shared(h, "b:" + n, 0, c.start).applied, 1);
      ASSERT_EQ(swap_shared(h, "s:" + n, 0, c.start).applied, 1);
    }
    KeyedAdd a = c.add;
    a.key = "b:" + n;
    batch.push_back(a);
  }
  std::vector<SharedAdded> got = add_many(api_, h, batch);
  ASSERT_EQ(got.size(), batch.size());
  int applied = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    KeyedAdd alone = batch[i];
    alone.key = "s:" + batch[i].key.substr(2);
    const SharedAdded want = add_one(h, alone);
    EXPECT_EQ(shown(got[i]), shown(want)) << batch[i].key;
    EXPECT_EQ(read(h, batch[i].key), read(h, alone.key)) << batch[i].key;
    applied += got[i].count > 0 ? 1 : 0;
  }
  EXPECT_GT(applied, 0);
  EXPECT_LT(applied, static_cast<int>(batch.size())) << "some adds get nothing";

  // The same batch again: each from where the first left it, as lone adds.
  got = add_many(api_, h, batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    KeyedAdd alone = batch[i];
    alone.key = "s:" + batch[i].key.substr(2);
    EXPECT_EQ(shown(got[i]), shown(add_one(h, alone))) << batch[i].key;
  }
  EXPECT_TRUE(add_many(api_, h, {}).empty()) << "no adds: nothing to do";
}

// An add that gets nothing reports the record as it is and changes nothing
// (a new key gets no record, no sequences); the adds before and after it in
// the batch apply.
TEST_F(PgSharedAddsTest, AnAddThatGetsNothingDoesNotStopTheOthers) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(swap_shared(h, "full", 0, 100).applied, 1);
  const int64_t sequences = record_sequences();
  const std::vector<KeyedAdd> batch = {
      {"first", 0, 0, 100, 10, 1, 1},       {"full", 0, 0, 100, 10, 1, 1},  // no room
      {"new-too-big", 0, 0, 5, 10, 1, 1},  // unit above the room: no record made
      {"min-unmet", 0, 0, 100, 10, 20, 30}, {"last", 0, 0, 100, 10, 3, 3},
  };
  std::vector<SharedAdded> got = add_many(api_, h, batch);
  ASSERT_EQ(got.size(), batch.size());
  EXPECT_EQ(shown(got[0]), "1/10 +1");
  EXPECT_EQ(shown(got[1]), "1/100 +0");
  EXPECT_EQ(shown(got[2]), "0/0 +0");
  EXPECT_EQ(shown(got[3]), "0/0 +0");
  EXPECT_EQ(shown(got[4]), "1/30 +3");
  EXPECT_EQ(read(h, "full"), "1/100");
  EXPECT_EQ(read(h, "new-too-big"), "0/0");
  EXPECT_EQ(read(h, "min-unmet"), "0/0");
  EXPECT_EQ(read(h, "last"), "1/30");
  EXPECT_EQ(record_sequences(), sequences + 4) << "records for first and last only";
}

// A batch the plugin refuses changes nothing: more than
// CONVEYOR_SHARED_ADDS_MAX adds, a key twice, a key that is not text.
TEST_F(PgSharedAddsTest, ARefusedBatchChangesNothing) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  std::vector<KeyedAdd> batch;
  for (int i = 0; i <= CONVEYOR_SHARED_ADDS_MAX; ++i)
    batch.push_back({"r:" + std::to_string(i), 0, 0, 10, 1, 1, 1});
  conveyor_status st = CONVEYOR_OK;
  try_add_many(api_, h, batch, &st);
  EXPECT_EQ(st, CONVEYOR_E_INVALID);
  batch.resize(3);
  batch.push_back({"r:1", 0, 0, 10, 1, 1, 1});
  try_add_many(api_, h, batch, &st);
  EXPECT_EQ(st, CONVEYOR_E_INVALID) << "r:1 twice";
  batch.back().key = "r:\xff";
  std::string message;
  try_add_many(api_, h, batch, &st, &message);
  EXPECT_EQ(st, CONVEYOR_E_INVALID);
  EXPECT_NE(message.find("adds[3]"), std::string::npos) << message;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(read(h, "r:" + std::to_string(i)), "0/0");
}

// CONVEYOR_SHARED_ADDS_MAX (1,000) keys in one call, half of them with
// records already: every add applies from its own record, and a second
// batch over the same keys goes on from there.
TEST_F(PgSharedAddsTest, AThousandKeysInOneBatch) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  static_assert(CONVEYOR_SHARED_ADDS_MAX == 1000);
  const std::string s = "\"" + schema_ + "\"";
  sql("SELECT " + s + ".shared_key_create('k:' || lpad(i::text, 4, '0'), 3, i) " +
      "FROM generate_series(0, 998, 2) AS i");
  std::vector<KeyedAdd> batch;
  for (int i = 0; i < 1000; ++i) {
    const std::string n = std::to_string(i);
    batch.push_back({"k:" + std::string(4 - n.size(), '0') + n, 0, 0, 2000, 1, 1, 7});
  }
  std::reverse(batch.begin(), batch.end());  // not in key order
  std::vector<SharedAdded> got = add_many(api_, h, batch);
  ASSERT_EQ(got.size(), 1000u);
  for (size_t j = 0; j < got.size(); ++j) {
    const int i = 999 - static_cast<int>(j);
    const bool existed = i % 2 == 0;
    EXPECT_EQ(shown(got[j]), existed ? "4/" + std::to_string(i + 7) + " +7" : "1/7 +7")
        << batch[j].key;
  }
  got = add_many(api_, h, batch);
  ASSERT_EQ(got.size(), 1000u);
  for (size_t j = 0; j < got.size(); ++j) {
    const int i = 999 - static_cast<int>(j);
    const bool existed = i % 2 == 0;
    EXPECT_EQ(shown(got[j]), existed ? "5/" + std::to_string(i + 14) + " +7" : "2/14 +7")
        << batch[j].key;
  }
  EXPECT_EQ(sql("SELECT count(*) FROM " + s + ".shared_keys")[0][0].as<int>(), 1000);
}

// Batches of 1,000 new keys from six connections at once all apply: each
// transaction holds a page of them locked (the server's lock table is
// shared; 6,000 new keys in six transactions at once do not fit a default
// one: "out of shared memory").
TEST_F(PgSharedAddsTest, ConcurrentBatchesOfAThousandNewKeysFitTheLockTable) {
  constexpr int kThreads = 6;
  std::vector<conveyor_storage*> handles;
  for (int t = 0; t < kThreads; ++t) {
    handles.push_back(open_store());
    ASSERT_NE(handles.back(), nullptr);
  }
  std::vector<std::vector<SharedAdded>> got(kThreads);
  std::vector<conveyor_status> status(kThreads, CONVEYOR_OK);
  std::vector<std::string> messages(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<KeyedAdd> batch;
      for (int i = 0; i < 1000; ++i)
        batch.push_back({"t" + std::to_string(t) + ":" + std::to_string(i), 0, 0, 10, 1, 1, 2});
      ++ready;
      while (ready.load() < kThreads) std::this_thread::yield();
      got[static_cast<size_t>(t)] =
          try_add_many(api_, handles[static_cast<size_t>(t)], batch,
                       &status[static_cast<size_t>(t)], &messages[static_cast<size_t>(t)]);
    });
  for (std::thread& th : threads) th.join();
  for (size_t t = 0; t < kThreads; ++t) {
    EXPECT_EQ(status[t], CONVEYOR_OK) << messages[t];
    ASSERT_EQ(got[t].size(), 1000u);
    for (const SharedAdded& a : got[t]) EXPECT_EQ(shown(a), "1/2 +2");
  }
  EXPECT_EQ(sql("SELECT count(*) FROM \"" + schema_ + "\".shared_keys")[0][0].as<int>(),
            kThreads * 1000);
  // Gone again a page at a time (dropping the schema drops every sequence
  // in one transaction).
  EXPECT_EQ(delete_shared(api_, handles[0], "t", 100, 10'000), kThreads * 1000u);
}

// Threads with a handle each (connections of their own) take from the same
// buckets at once: batches of random keys in random order (among them keys
// that share a lock, in one batch and across batches), and lone adds. Every
// call succeeds (no deadlock is detected, none is waited out), each bucket
// grants exactly what it holds, no more, and its record counts every add
// that applied.
TEST_F(PgSharedAddsTest, ConcurrentBatchesNeverOverGrantAndNeverDeadlock) {
  conveyor_storage* first = open_store();
  ASSERT_NE(first, nullptr);
  const std::string s = "\"" + schema_ + "\"";
  // Two pairs of keys whose locks are one (their hashes collide: about 18
  // pairs among 400,000 keys; the hash takes the schema's name, so each
  // test finds its own).
  std::vector<std::string> keys;
  for (const auto& row : sql("SELECT min(k), max(k) FROM (SELECT 'c:' || i AS k FROM "
                             "generate_series(1, 400000) AS i) AS c GROUP BY hashtext('" +
                             s + "' || k) HAVING count(*) = 2 LIMIT 2")) {
    keys.emplace_back(row[0].c_str());
    keys.emplace_back(row[1].c_str());
  }
  EXPECT_GE(keys.size(), 2u) << "no colliding keys found";
  for (int i = 0; keys.size() < 40; ++i) keys.push_back("bucket:" + std::to_string(i));

  constexpr int64_t kHigh = 300;  // each bucket's tokens (credit 0: no refill)
  constexpr int kThreads = 6;
  std::vector<conveyor_storage*> handles = {first};
  for (int t = 1; t < kThreads; ++t) {
    handles.push_back(open_store());
    ASSERT_NE(handles.back(), nullptr);
  }
  std::mutex mu;
  std::map<std::string, int64_t> granted, applied;
  std::atomic<int> failures{0};
  std::atomic<bool> stop{false};
  std::vector<std::string> messages;
  auto run = [&](int t) {
    std::mt19937 rng(static_cast<uint32_t>(t) * 7919u + 1);
    std::map<std::string, int64_t> my_granted, my_applied;
    int empty_rounds = 0;
    while (!stop.load() && empty_rounds < 3) {
      std::vector<std::string> pick = keys;
      std::shuffle(pick.begin(), pick.end(), rng);
      pick.resize(1 + rng() % pick.size());
      std::vector<KeyedAdd> batch;
      for (const std::string& k : pick)
        batch.push_back({k, 0, 0, kHigh, 1, 1, static_cast<uint32_t>(1 + rng() % 4)});
      std::vector<SharedAdded> got;
      conveyor_status st = CONVEYOR_OK;
      std::string message;
      if (t == kThreads - 1 && rng() % 2 == 0) {  // lone adds too
        for (const KeyedAdd& a : batch) {
          host::PluginBinding b(*api_, handles[static_cast<size_t>(t)]);
          auto r =
              b.add_shared_state(a.key, a.credit, a.low, a.high, a.unit, a.min_count, a.max_count);
          if (!r.ok()) {
            st = r.status.code;
            message = r.status.message;
            break;
          }
          got.push_back(r.value);
        }
      } else {
        got = try_add_many(api_, handles[static_cast<size_t>(t)], batch, &st, &message);
      }
      if (st != CONVEYOR_OK) {
        ++failures;
        std::lock_guard lock(mu);
        messages.push_back(message);
        break;
      }
      int64_t round = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        my_granted[batch[i].key] += got[i].count;
        my_applied[batch[i].key] += got[i].count > 0 ? 1 : 0;
        round += got[i].count;
      }
      empty_rounds = round == 0 ? empty_rounds + 1 : 0;
    }
    std::lock_guard lock(mu);
    for (const auto& [k, n] : my_granted) granted[k] += n;
    for (const auto& [k, n] : my_applied) applied[k] += n;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(run, t);
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0) << (messages.empty() ? "" : messages[0]);

  // Whatever is left, then every bucket is empty.
  std::vector<KeyedAdd> rest;
  for (const std::string& k : keys) rest.push_back({k, 0, 0, kHigh, 1, 1, UINT32_MAX});
  std::vector<SharedAdded> last = add_many(api_, first, rest);
  ASSERT_EQ(last.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& k = keys[i];
    EXPECT_EQ(granted[k] + last[i].count, kHigh) << k << ": granted exactly what it holds";
    EXPECT_EQ(last[i].value, kHigh) << k;
    EXPECT_EQ(last[i].version, applied[k] + (last[i].count > 0 ? 1 : 0))
        << k << ": one version per add that applied";
  }
}

}  // namespace
}  // namespace conveyor::postgres::test
