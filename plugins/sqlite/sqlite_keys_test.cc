// Unit tests of the sqlite plugin's job keys (ABI 1.4: enqueue_v4,
// claim_keys, list_ready_keys; schema 5), driven through its C ABI table.
// Jobs are copied straight out of conveyor_job here, key included.
#include <conveyor/testing/plugin_calls.hpp>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sqlite_storage.hpp"

namespace {

namespace fs = std::filesystem;
using namespace conveyor::plugin_testing;  // NOLINT: the shared test names

// What the tests read of a reported job.
struct KeyedJob {
  int64_t id = 0;
  int32_t state = 0;
  std::string queue;
  std::string kind;
  std::string key;
  int32_t priority = 0;
  int32_t attempt = 0;
  int64_t run_at = 0;
  int64_t lease_token = 0;
  int64_t lease_expires = 0;
};

void collect_job(void* ctx, const conveyor_job* j) {
  auto* out = static_cast<std::vector<KeyedJob>*>(ctx);
  EXPECT_EQ(j->struct_size, sizeof(conveyor_job)) << "the 1.4 conveyor_job, key covered";
  out->push_back(KeyedJob{j->id, j->state, s(j->queue), s(j->kind), s(j->key), j->priority,
                          j->attempt, j->run_at_us, j->lease_token, j->lease_expires_us});
}

std::vector<int64_t> ids(const std::vector<KeyedJob>& jobs) {
  std::vector<int64_t> out;
  for (const KeyedJob& j : jobs) out.push_back(j.id);
  return out;
}

using ReadyKeys = std::vector<std::pair<std::string, int64_t>>;

void collect_key(void* ctx, const conveyor_ready_key* k) {
  EXPECT_EQ(k->struct_size, sizeof(conveyor_ready_key));
  EXPECT_EQ(k->reserved0, 0u);
  static_cast<ReadyKeys*>(ctx)->emplace_back(s(k->key), k->ready);
}

// One job to enqueue with enqueue_v4.
struct NewJob {
  std::string queue;
  std::string key;
  std::string kind = "k";
  int32_t priority = 0;
  int64_t run_at = 0;
  int32_t cost = 1;
};

class SqliteKeysTest : public ::testing::Test, public PluginCalls {
 protected:
  void SetUp() override {
    api_ = conveyor_storage_plugin_entry(CONVEYOR_ABI_MAJOR, CONVEYOR_ABI_MINOR);
    ASSERT_NE(api_, nullptr);
    std::string tmpl = (fs::path(::testing::TempDir()) / "conveyor-sqlite-keys-XXXXXX").string();
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

  // enqueue_v4 of jobs in one call; returns the status and the ids.
  conveyor_status try_enqueue(conveyor_storage* h, const std::vector<NewJob>& jobs,
                              std::vector<int64_t>* out) {
    std::vector<conveyor_new_job_v3> v;
    for (const NewJob& j : jobs)
      v.push_back(conveyor_new_job_v3{
          conveyor_new_job_v2{
              conveyor_new_job{str(j.queue), str(j.kind), str("{}"), j.priority, 3, j.run_at},
              j.cost, 0},
          str(j.key)});
    std::vector<int64_t> got(jobs.size(), 0);
    conveyor_error err{};
    const conveyor_status st = api_->enqueue_v4(h, v.data(), v.size(), 1000, got.data(), &err);
    if (out != nullptr) *out = got;
    return st;
  }
  std::vector<int64_t> enqueue_keyed(conveyor_storage* h, const std::vector<NewJob>& jobs) {
    std::vector<int64_t> out;
    EXPECT_EQ(try_enqueue(h, jobs, &out), CONVEYOR_OK);
    return out;
  }
  int64_t enqueue_one(conveyor_storage* h, const NewJob& job) {
    return enqueue_keyed(h, std::vector<NewJob>{job}).at(0);
  }

  // One claim_keys call: status into *status (expected OK when null), the
  // jobs reported returned; out_claimed must equal the number reported.
  std::vector<KeyedJob> claim_keys(conveyor_storage* h, const std::string& queue,
                                   const std::vector<std::pair<std::string, uint32_t>>& keys,
                                   const std::vector<std::string>& kinds = {}, int64_t token = 7,
                                   int64_t now = 100, conveyor_status* status = nullptr) {
    std::vector<conveyor_key_claim> k;
    for (const auto& [key, max] : keys) k.push_back(conveyor_key_claim{str(key), max, 0});
    std::vector<conveyor_str> kd;
    for (const std::string& kind : kinds) kd.push_back(str(kind));
    std::vector<KeyedJob> out;
    uint32_t claimed = 12345;
    conveyor_error err{};
    const conveyor_status st = api_->claim_keys(
        h, str(queue), kd.empty() ? nullptr : kd.data(), kd.size(), k.empty() ? nullptr : k.data(),
        k.size(), token, now, now + 1000, collect_job, &out, &claimed, &err);
    if (status != nullptr) {
      *status = st;
    } else {
      EXPECT_EQ(st, CONVEYOR_OK) << err.message;
    }
    if (st == CONVEYOR_OK) {
      EXPECT_EQ(claimed, out.size());
    } else {
      EXPECT_TRUE(out.empty()) << "a failed claim_keys reports nothing";
    }
    return out;
  }

  // One list_ready_keys call; expects OK and out_listed == keys reported.
  ReadyKeys ready_keys(conveyor_storage* h, const std::string& queue,
                       std::optional<std::string> after, uint32_t limit, uint32_t count_limit,
                       int64_t now = 100) {
    ReadyKeys out;
    uint32_t listed = 12345;
    conveyor_error err{};
    conveyor_str a = after ? str(*after) : conveyor_str{};
    EXPECT_EQ(api_->list_ready_keys(h, str(queue), after ? &a : nullptr, limit, count_limit, now,
                                    collect_key, &out, &listed, &err),
              CONVEYOR_OK)
        << err.message;
    EXPECT_EQ(listed, out.size());
    return out;
  }
  conveyor_status try_ready_keys(conveyor_storage* h, const std::string& queue,
                                 const conveyor_str* after, uint32_t limit, uint32_t count_limit) {
    ReadyKeys out;
    uint32_t listed = 0;
    conveyor_error err{};
    const conveyor_status st = api_->list_ready_keys(h, str(queue), after, limit, count_limit, 100,
                                                     collect_key, &out, &listed, &err);
    EXPECT_TRUE(st == CONVEYOR_OK || out.empty()) << "a failed listing reports nothing";
    return st;
  }

  KeyedJob get_keyed(conveyor_storage* h, int64_t id, int64_t now = 100) {
    std::vector<KeyedJob> out;
    conveyor_error err{};
    EXPECT_EQ(api_->get_job(h, id, now, collect_job, &out, &err), CONVEYOR_OK) << err.message;
    return out.empty() ? KeyedJob{} : out.front();
  }

  // Every job of a queue through list_jobs (every state), in id order.
  std::vector<KeyedJob> list_all(conveyor_storage* h, const std::string& queue, int64_t now) {
    std::vector<KeyedJob> out;
    uint32_t listed = 0;
    conveyor_error err{};
    EXPECT_EQ(api_->list_jobs(h, str(queue), nullptr, 0, conveyor_str{}, 0, 1000, now, collect_job,
                              &out, &listed, &err),
              CONVEYOR_OK)
        << err.message;
    return out;
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
  // The first column of sql's rows, as text.
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

TEST_F(SqliteKeysTest, TheTableHasEveryKeySlot) {
  EXPECT_GE(api_->struct_size, CONVEYOR_PLUGIN_V1_4_SIZE);
  EXPECT_NE(api_->enqueue_v4, nullptr);
  EXPECT_NE(api_->claim_keys, nullptr);
  EXPECT_NE(api_->list_ready_keys, nullptr);
}

// The key goes in with enqueue_v4 and comes back out of every call that
// reports jobs; jobs enqueued any other way have the empty key.
TEST_F(SqliteKeysTest, KeyRoundTripsThroughEveryCallThatReportsJobs) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::string longest(CONVEYOR_JOB_KEY_MAX, 'x');
  const std::string odd("t\xc3\xa9nant\0/1", 10);  // UTF-8 with a NUL in it
  const int64_t a = enqueue_one(h, {"q", "tenant-a"});
  const int64_t b = enqueue_one(h, {"q", odd, "other"});
  const int64_t c = enqueue_one(h, {"q", longest, "k", 0, /*run_at=*/500});
  const int64_t plain = enqueue(h, "q");  // 1.0 enqueue
  EXPECT_EQ(get_keyed(h, a).key, "tenant-a");
  EXPECT_EQ(get_keyed(h, b).key, odd);
  EXPECT_EQ(get_keyed(h, c).key, longest);
  EXPECT_EQ(get_keyed(h, c).state, CONVEYOR_JOB_SCHEDULED);
  EXPECT_EQ(get_keyed(h, plain).key, "");

  // list_jobs: available and scheduled.
  std::vector<KeyedJob> listed = list_all(h, "q", 100);
  ASSERT_EQ(ids(listed), (std::vector<int64_t>{a, b, c, plain}));
  EXPECT_EQ(listed[0].key, "tenant-a");
  EXPECT_EQ(listed[1].key, odd);
  EXPECT_EQ(listed[2].key, longest);
  EXPECT_EQ(listed[3].key, "");

  // claim_kinds, claim, claim_keys: each reports the key.
  std::vector<KeyedJob> by_kind;
  uint32_t n = 0;
  conveyor_error err{};
  conveyor_str other = str("other");
  ASSERT_EQ(
      api_->claim_kinds(h, str("q"), &other, 1, 10, 3, 100, 200, collect_job, &by_kind, &n, &err),
      CONVEYOR_OK)
      << err.message;
  ASSERT_EQ(ids(by_kind), (std::vector<int64_t>{b}));
  EXPECT_EQ(by_kind[0].key, odd);
  std::vector<KeyedJob> claimed;
  ASSERT_EQ(api_->claim(h, str("q"), 1, 4, 100, 200, collect_job, &claimed, &n, &err), CONVEYOR_OK)
      << err.message;
  ASSERT_EQ(ids(claimed), (std::vector<int64_t>{a}));
  EXPECT_EQ(claimed[0].key, "tenant-a");
  std::vector<KeyedJob> keyed = claim_keys(h, "q", {{longest, 5}, {"", 5}}, {}, 5, 600);
  ASSERT_EQ(keyed.size(), 2u);
  for (const KeyedJob& j : keyed) EXPECT_EQ(j.key, j.id == c ? longest : "") << j.id;

  // list_jobs: running, then final.
  listed = list_all(h, "q", 600);
  ASSERT_EQ(listed.size(), 4u);
  for (const KeyedJob& j : listed) EXPECT_EQ(j.state, CONVEYOR_JOB_RUNNING) << j.id;
  EXPECT_EQ(listed[1].key, odd) << "a running job's key";
  EXPECT_EQ(complete(h, {{a, 4}}, 700), (std::vector<conveyor_status>{CONVEYOR_OK}));
  listed = list_all(h, "q", 700);
  ASSERT_EQ(listed[0].state, CONVEYOR_JOB_COMPLETED);
  EXPECT_EQ(listed[0].key, "tenant-a") << "a final job's key";

  // rescue_expired_v2: b's lease (expires 200) and the others (1600) expire.
  std::vector<KeyedJob> rescued;
  ASSERT_EQ(api_->rescue_expired_v2(h, 5000, 10, collect_job, &rescued, &n, &err), CONVEYOR_OK)
      << err.message;
  ASSERT_EQ(ids(rescued), (std::vector<int64_t>{b, c, plain}));
  EXPECT_EQ(rescued[0].key, odd);
  EXPECT_EQ(rescued[1].key, longest);
  EXPECT_EQ(rescued[2].key, "");
}

TEST_F(SqliteKeysTest, EnqueueKeyedRefusesALongKeyAndEnqueuesNothing) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  std::vector<int64_t> out;
  EXPECT_EQ(
      try_enqueue(h, {{"q", "fine"}, {"q", std::string(CONVEYOR_JOB_KEY_MAX + 1, 'x')}}, &out),
      CONVEYOR_E_INVALID);
  EXPECT_EQ(try_enqueue(h, {{"q", "fine"}, {"q", "bad cost", "k", 0, 0, /*cost=*/0}}, &out),
            CONVEYOR_E_INVALID);
  EXPECT_TRUE(ready_keys(h, "q", std::nullopt, 10, 10).empty()) << "nothing was enqueued";
  EXPECT_TRUE(list_all(h, "q", 100).empty());
  const std::vector<int64_t> two = enqueue_keyed(h, {{"q", "k1", "k", 0, 0, 4}, {"q", "k2"}});
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1], two[0] + 1);
}

// Per listed key, the first max_jobs ready jobs in claim order (priority,
// run_at, id) among that key's jobs; keys not listed are not touched.
TEST_F(SqliteKeysTest, ClaimKeysTakesEachKeysFirstReadyJobsInClaimOrder) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  // Key a, in enqueue order: claim order is a3, a1, a4, a0, (a2 scheduled).
  const std::vector<int64_t> a = enqueue_keyed(h, {{"q", "a", "k", 5, 10},
                                                   {"q", "a", "k", 1, 20},
                                                   {"q", "a", "k", 0, 500},
                                                   {"q", "a", "k", 1, 10},
                                                   {"q", "a", "k", 1, 20}});
  // b has two ready jobs; c is not listed; "" (the empty key) is a key too.
  const std::vector<int64_t> b = enqueue_keyed(h, {{"q", "b", "k", 9, 0}, {"q", "b", "k", 9, 0}});
  const std::vector<int64_t> c = enqueue_keyed(h, {{"q", "c", "k", -5, 0}, {"q", "c"}});
  const int64_t empty = enqueue(h, "q", -9);
  const int64_t elsewhere = enqueue_one(h, {"other", "a", "k", -9, 0});

  std::vector<KeyedJob> got =
      claim_keys(h, "q", {{"a", 3}, {"b", 5}, {"zzz", 4}, {"", 0}}, {}, /*token=*/11, 100);
  std::vector<int64_t> a_got, b_got;
  for (const KeyedJob& j : got) {
    EXPECT_EQ(j.state, CONVEYOR_JOB_RUNNING);
    EXPECT_EQ(j.queue, "q");
    EXPECT_EQ(j.attempt, 1);
    EXPECT_EQ(j.lease_token, 11);
    EXPECT_EQ(j.lease_expires, 1100);
    (j.key == "a" ? a_got : b_got).push_back(j.id);
    EXPECT_TRUE(j.key == "a" || j.key == "b") << j.key;
  }
  EXPECT_EQ(a_got, (std::vector<int64_t>{a[3], a[1], a[4]})) << "a's first three in claim order";
  EXPECT_EQ(b_got, b) << "b has two, gives two";
  // The claim is stored: running under the lease.
  const KeyedJob stored = get_keyed(h, a[3]);
  EXPECT_EQ(stored.state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(stored.lease_token, 11);
  EXPECT_EQ(stored.attempt, 1);
  // Untouched: a's rest, c (ahead of every listed job in claim order), the
  // empty key (listed with 0), the same key in another queue.
  for (int64_t id : {a[0], a[2], c[0], c[1], empty, elsewhere}) {
    const KeyedJob j = get_keyed(h, id, 600);
    EXPECT_TRUE(j.state == CONVEYOR_JOB_AVAILABLE || j.state == CONVEYOR_JOB_SCHEDULED) << id;
    EXPECT_EQ(j.attempt, 0) << id;
    EXPECT_EQ(j.lease_token, 0) << id;
  }
  // The rest of a, once a2 is due; nothing more of b.
  got = claim_keys(h, "q", {{"a", 10}, {"b", 10}}, {}, 12, 600);
  EXPECT_EQ(ids(got), (std::vector<int64_t>{a[2], a[0]}));
  EXPECT_TRUE(claim_keys(h, "q", {{"a", 10}, {"b", 10}}, {}, 13, 600).empty());
  // The completed and the released come back as claim does it.
  EXPECT_EQ(complete(h, {{a[3], 11}}, 700), (std::vector<conveyor_status>{CONVEYOR_OK}));
  EXPECT_EQ(release(h, {{a[1], 11}}, 700), (std::vector<conveyor_status>{CONVEYOR_OK}));
  got = claim_keys(h, "q", {{"a", 10}}, {}, 14, 800);
  ASSERT_EQ(ids(got), (std::vector<int64_t>{a[1]}));
  EXPECT_EQ(got[0].attempt, 1) << "release gave the attempt back";
}

// Keys that take one job each are read kKeySlots to a statement: a claim of
// more keys than two statements hold takes each key's first ready job in
// claim order, and only that, whatever statement its key falls in, next to
// keys that take more (read alone). Keys with bytes JSON or SQL text would
// mangle (a NUL, a quote, invalid UTF-8) are matched exactly.
TEST_F(SqliteKeysTest, ClaimKeysOfMoreKeysThanAStatementHoldsTakesEachKeysFirst) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  namespace sql = conveyor::sqlite::sql;
  const size_t n = 2 * sql::kKeySlots + 7;
  std::vector<std::string> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back("k" + std::to_string(1000 + i));
  keys[3] = std::string("nul\0byte", 8);
  keys[70] = "it's \"quoted\"";
  keys[130] = "\xff\xfe not utf-8";
  // Per key: a job enqueued first that claims later (priority 5), then its
  // first in claim order (priority 1), then one not due yet (priority 0).
  std::vector<int64_t> first(n), second(n);
  for (size_t i = 0; i < n; ++i) {
    const std::vector<int64_t> got = enqueue_keyed(
        h, {{"q", keys[i], "k", 5, 10}, {"q", keys[i], "k", 1, 10}, {"q", keys[i], "k", 0, 500}});
    second[i] = got[0];
    first[i] = got[1];
  }
  const int64_t elsewhere = enqueue_one(h, {"other", keys[0], "k", -9, 0});
  // Every key asks one job but key 5 (two) and the last (none).
  std::vector<std::pair<std::string, uint32_t>> ask;
  for (size_t i = 0; i < n; ++i) ask.emplace_back(keys[i], i == 5 ? 2 : i + 1 == n ? 0 : 1);
  const std::vector<KeyedJob> got = claim_keys(h, "q", ask, {}, /*token=*/21, 100);
  std::map<std::string, std::vector<int64_t>> per_key;
  for (const KeyedJob& j : got) {
    EXPECT_EQ(j.state, CONVEYOR_JOB_RUNNING);
    EXPECT_EQ(j.lease_token, 21);
    per_key[j.key].push_back(j.id);
  }
  ASSERT_EQ(per_key.size(), n - 1) << "every key that asked, and no other";
  for (size_t i = 0; i + 1 < n; ++i) {
    const std::vector<int64_t> want =
        i == 5 ? std::vector<int64_t>{first[i], second[i]} : std::vector<int64_t>{first[i]};
    EXPECT_EQ(per_key[keys[i]], want) << "key " << i;
  }
  EXPECT_EQ(get_keyed(h, second[0]).state, CONVEYOR_JOB_AVAILABLE) << "one job asked, one taken";
  EXPECT_EQ(get_keyed(h, first[n - 1]).state, CONVEYOR_JOB_AVAILABLE) << "asked for none";
  EXPECT_EQ(get_keyed(h, elsewhere).state, CONVEYOR_JOB_AVAILABLE) << "another queue's job";
}

// A kind filter restricts each key's jobs exactly as claim_kinds restricts
// the queue's: other kinds stay AVAILABLE and do not block the key.
TEST_F(SqliteKeysTest, ClaimKeysHonoursTheKindFilter) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::vector<int64_t> a = enqueue_keyed(
      h, {{"q", "a", "x"}, {"q", "a", "y"}, {"q", "a", "x"}, {"q", "a", "z"}, {"q", "a", "y"}});
  const std::vector<int64_t> b = enqueue_keyed(h, {{"q", "b", "x"}, {"q", "b", "z"}});
  // The kinds twice over: as a set.
  std::vector<KeyedJob> got = claim_keys(h, "q", {{"a", 2}, {"b", 5}}, {"z", "y", "y"});
  const std::vector<int64_t> got_ids = ids(got);
  EXPECT_EQ(std::set<int64_t>(got_ids.begin(), got_ids.end()),
            (std::set<int64_t>{a[1], a[3], b[1]}));
  for (const KeyedJob& j : got) EXPECT_NE(j.kind, "x");
  // claim_kinds would have taken the same of key a's jobs had they been alone.
  for (int64_t id : {a[0], a[2], a[4], b[0]})
    EXPECT_EQ(get_keyed(h, id).state, CONVEYOR_JOB_AVAILABLE) << id;
  got = claim_keys(h, "q", {{"a", 5}}, {"x"});
  EXPECT_EQ(ids(got), (std::vector<int64_t>{a[0], a[2]}));
  got = claim_keys(h, "q", {{"a", 5}, {"b", 5}}, {"nope"});
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(get_keyed(h, a[4]).state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(get_keyed(h, b[0]).state, CONVEYOR_JOB_AVAILABLE);
}

TEST_F(SqliteKeysTest, ClaimKeysOnAPausedQueueClaimsNothing) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const int64_t id = enqueue_one(h, {"q", "a"});
  ASSERT_EQ(pause(h, "q", true), CONVEYOR_OK);
  EXPECT_TRUE(claim_keys(h, "q", {{"a", 5}}).empty());
  EXPECT_EQ(ready_keys(h, "q", std::nullopt, 10, 10), (ReadyKeys{{"a", 1}}))
      << "a paused queue's keys are listed";
  ASSERT_EQ(pause(h, "q", false), CONVEYOR_OK);
  EXPECT_EQ(ids(claim_keys(h, "q", {{"a", 5}})), (std::vector<int64_t>{id}));
}

TEST_F(SqliteKeysTest, ClaimKeysRefusesBadArgumentsAndClaimsNothing) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const int64_t id = enqueue_one(h, {"q", "a"});
  conveyor_status st = CONVEYOR_OK;
  claim_keys(h, "q", {{"a", 1}, {"b", 1}, {"a", 1}}, {}, 7, 100, &st);
  EXPECT_EQ(st, CONVEYOR_E_INVALID) << "the same key twice";
  claim_keys(h, "q", {{"a", 1}}, {}, /*token=*/0, 100, &st);
  EXPECT_EQ(st, CONVEYOR_E_INVALID) << "lease token 0";
  claim_keys(h, "q", {{"a", 1}}, {""}, 7, 100, &st);
  EXPECT_EQ(st, CONVEYOR_E_INVALID) << "an empty kind";
  claim_keys(h, "q", {{"a", 1}, {std::string(CONVEYOR_JOB_KEY_MAX + 1, 'a'), 1}}, {}, 7, 100, &st);
  EXPECT_EQ(st, CONVEYOR_E_INVALID) << "a key too long";
  claim_keys(h, "", {{"a", 1}}, {}, 7, 100, &st);
  EXPECT_EQ(st, CONVEYOR_E_INVALID) << "an empty queue name";
  EXPECT_TRUE(claim_keys(h, "q", {}).empty()) << "no keys: nothing, OK";
  EXPECT_EQ(get_keyed(h, id).state, CONVEYOR_JOB_AVAILABLE);
}

// Keys in bytewise order (the empty key first, a prefix before its
// extensions, a NUL byte included), page by page after the last one.
TEST_F(SqliteKeysTest, ListReadyKeysPagesInBytewiseOrder) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::vector<std::string> keys = {
      "b",        "a",     "", std::string("a\0", 2), std::string("a\0b", 3), "ab", "B",
      "\xc3\xa9", "a\x7f", "~"};
  for (const std::string& k : keys) enqueue_one(h, {"q", k});
  std::vector<std::string> sorted = keys;
  std::sort(sorted.begin(), sorted.end());  // std::string: bytewise, as memcmp
  for (uint32_t page : {1u, 3u, 10u, 1000u}) {
    std::vector<std::string> seen;
    std::optional<std::string> after;
    for (int round = 0; round < 20; ++round) {
      const ReadyKeys got = ready_keys(h, "q", after, page, 5);
      for (const auto& [k, n] : got) {
        seen.push_back(k);
        EXPECT_EQ(n, 1) << "one ready job";
      }
      if (got.size() < page) break;
      after = got.back().first;
    }
    EXPECT_EQ(seen, sorted) << "page " << page;
  }
  // After the empty key: every other key. After a key no job has: the next.
  ReadyKeys got = ready_keys(h, "q", std::string(), 100, 5);
  ASSERT_EQ(got.size(), keys.size() - 1);
  EXPECT_EQ(got.front().first, sorted[1]);
  got = ready_keys(h, "q", std::string("aa"), 2, 5);
  EXPECT_EQ(got, (ReadyKeys{{"ab", 1}, {"a\x7f", 1}}));
  EXPECT_TRUE(ready_keys(h, "q", sorted.back(), 10, 5).empty()) << "after the last key";
  EXPECT_TRUE(ready_keys(h, "unknown", std::nullopt, 10, 5).empty()) << "an unknown queue";
}

// ready = min(the key's ready jobs, count_limit); keys whose jobs are all
// scheduled, running or final are not listed, and do not use up the limit.
TEST_F(SqliteKeysTest, ListReadyKeysCountsReadyJobsOnly) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  std::vector<NewJob> jobs;
  for (int i = 0; i < 5; ++i) jobs.push_back({"q", "a"});
  jobs.push_back({"q", "b", "k", 0, /*run_at=*/0});
  for (int i = 0; i < 3; ++i) jobs.push_back({"q", "b", "k", -1, /*run_at=*/500});
  jobs.push_back({"q", "c", "k", 0, /*run_at=*/500});  // scheduled only
  jobs.push_back({"q", "d"});                          // claimed below: running only
  jobs.push_back({"q", "e"});                          // completed below
  jobs.push_back({"q", "f", "k", 0, 50});
  jobs.push_back({"other", "g"});  // another queue
  const std::vector<int64_t> id = enqueue_keyed(h, jobs);
  const std::vector<KeyedJob> d = claim_keys(h, "q", {{"d", 1}, {"e", 1}}, {}, 3, 100);
  ASSERT_EQ(d.size(), 2u);
  for (const KeyedJob& j : d) {
    if (j.key == "e") {
      EXPECT_EQ(complete(h, {{j.id, 3}}, 100)[0], CONVEYOR_OK);
    }
  }
  EXPECT_EQ(ready_keys(h, "q", std::nullopt, 10, 3, 100),
            (ReadyKeys{{"a", 3}, {"b", 1}, {"f", 1}}));
  EXPECT_EQ(ready_keys(h, "q", std::nullopt, 10, 1000, 100),
            (ReadyKeys{{"a", 5}, {"b", 1}, {"f", 1}}));
  EXPECT_EQ(ready_keys(h, "q", std::string("a"), 2, 1, 100), (ReadyKeys{{"b", 1}, {"f", 1}}))
      << "c (scheduled only) is skipped and does not count against the limit";
  EXPECT_EQ(ready_keys(h, "q", std::nullopt, 10, 1000, 40), (ReadyKeys{{"a", 5}, {"b", 1}}))
      << "f is not due before 50";
  EXPECT_EQ(ready_keys(h, "q", std::nullopt, 10, 1000, 500),
            (ReadyKeys{{"a", 5}, {"b", 4}, {"c", 1}, {"f", 1}}))
      << "at 500 the scheduled jobs are ready";
  // A cancelled job leaves its key.
  conveyor_error err{};
  ASSERT_EQ(api_->cancel(h, id[12], 100, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(ready_keys(h, "q", std::nullopt, 10, 1000, 100), (ReadyKeys{{"a", 5}, {"b", 1}}));
}

TEST_F(SqliteKeysTest, ListReadyKeysRefusesBadArguments) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  enqueue_one(h, {"q", "a"});
  const std::string too_long(CONVEYOR_JOB_KEY_MAX + 1, 'a');
  const conveyor_str long_key = str(too_long);
  EXPECT_EQ(try_ready_keys(h, "", nullptr, 10, 10), CONVEYOR_E_INVALID);
  EXPECT_EQ(try_ready_keys(h, "q", nullptr, 0, 10), CONVEYOR_E_INVALID);
  EXPECT_EQ(try_ready_keys(h, "q", nullptr, CONVEYOR_LIST_JOBS_MAX + 1, 10), CONVEYOR_E_INVALID);
  EXPECT_EQ(try_ready_keys(h, "q", nullptr, 10, 0), CONVEYOR_E_INVALID);
  EXPECT_EQ(try_ready_keys(h, "q", &long_key, 10, 10), CONVEYOR_E_INVALID);
  EXPECT_EQ(try_ready_keys(h, "q", nullptr, CONVEYOR_LIST_JOBS_MAX, 1), CONVEYOR_OK);
}

// A database of schema 4 (ABI 1.3) upgrades on open: every job stays, with
// the empty key, and is claimed and listed under it; migrate again is a
// no-op.
TEST_F(SqliteKeysTest, UpgradeFromSchema4KeepsJobsWithTheEmptyKey) {
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db_path_.c_str(), &raw), SQLITE_OK);
    std::string sql;
    for (int v = 0; v < 4; ++v) sql += conveyor::sqlite::schema_steps()[v];
    sql +=
        "PRAGMA user_version = 4;"
        "INSERT INTO queues (name, paused, next_pos, end_pos) VALUES ('q', 0, 1048580, 2097152);"
        "INSERT INTO jobs (pos, id, queue, kind, payload, priority, state, attempt, max_attempts,"
        " run_at, created_at, finalized_at, lease_token, lease_expires) VALUES"
        " (1048576, 1, 'q', 'k', 'one', 0, 1, 0, 3, 10, 10, 0, 0, 0),"
        " (1048577, 2, 'q', 'k', 'two', 0, 3, 1, 3, 10, 10, 0, 77, 5000),"
        " (1048578, 3, 'q', 'k', 'three', 0, 4, 1, 3, 10, 10, 20, 0, 0),"
        " (1048579, 4, 'q', 'k', 'four', 0, 1, 0, 3, 900, 10, 0, 0, 0);"
        "INSERT INTO job_counts (queue, state, n) VALUES ('q', 4, 1);"
        "UPDATE meta SET value = 4 WHERE key = 'last_job_id';"
        "UPDATE meta SET value = 2 WHERE key = 'next_block';";
    char* msg = nullptr;
    ASSERT_EQ(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &msg), SQLITE_OK)
        << (msg ? msg : "");
    sqlite3_close(raw);
  }
  conveyor_storage* h = open_store();  // migrates 4 -> 6
  ASSERT_NE(h, nullptr);
  conveyor_error err{};
  ASSERT_EQ(api_->migrate(h, &err), CONVEYOR_OK) << "again: " << err.message;
  EXPECT_EQ(texts("PRAGMA user_version"),
            (std::vector<std::string>{std::to_string(conveyor::sqlite::kSchemaVersion)}));
  EXPECT_EQ(texts("SELECT name FROM sqlite_master WHERE type = 'index' AND name = 'jobs_key'"),
            (std::vector<std::string>{"jobs_key"}));
  EXPECT_EQ(texts("SELECT group_concat(id) FROM jobs INDEXED BY jobs_key"
                  " WHERE queue = 'q' AND state = 1"),
            (std::vector<std::string>{"1,4"}))
      << "the index holds the available jobs kept";
  const std::vector<KeyedJob> all = list_all(h, "q", 100);
  ASSERT_EQ(ids(all), (std::vector<int64_t>{1, 2, 3, 4})) << "every job is kept";
  for (const KeyedJob& j : all) EXPECT_EQ(j.key, "") << j.id;
  EXPECT_EQ(all[0].state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(all[1].state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(all[1].lease_token, 77);
  EXPECT_EQ(all[2].state, CONVEYOR_JOB_COMPLETED);
  EXPECT_EQ(all[3].state, CONVEYOR_JOB_SCHEDULED);
  EXPECT_EQ(ready_keys(h, "q", std::nullopt, 10, 10), (ReadyKeys{{"", 1}}));
  // Old and new jobs under keys; the running one completes under its lease.
  const int64_t fresh = enqueue_one(h, {"q", "new"});
  EXPECT_EQ(fresh, 5) << "ids continue";
  EXPECT_EQ(ready_keys(h, "q", std::nullopt, 10, 10), (ReadyKeys{{"", 1}, {"new", 1}}));
  std::vector<KeyedJob> got = claim_keys(h, "q", {{"", 10}}, {}, 9, 1000);
  EXPECT_EQ(ids(got), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(complete(h, {{2, 77}}, 1000), (std::vector<conveyor_status>{CONVEYOR_OK}));
  got = claim_keys(h, "q", {{"new", 10}}, {}, 9, 1000);
  ASSERT_EQ(ids(got), (std::vector<int64_t>{fresh}));
  EXPECT_EQ(got[0].key, "new");
}

// The statements the old claim path runs keep jobs_claim; the key
// statements use jobs_key, with no sort and no scan of the table.
TEST_F(SqliteKeysTest, EachStatementReadsItsIndex) {
  ASSERT_NE(open_store(), nullptr);
  namespace sql = conveyor::sqlite::sql;
  for (const conveyor::sqlite::Sql* s : {&sql::kClaim, &sql::kAnyReady, &sql::kClaimKindCandidates,
                                         &sql::kCountAvailable, &sql::kListAvailable}) {
    const std::string p = plan(s->text);
    EXPECT_NE(p.find("INDEX jobs_claim"), std::string::npos) << s->text << "\n" << p;
    EXPECT_EQ(p.find("jobs_key"), std::string::npos) << s->text << "\n" << p;
  }
  for (const conveyor::sqlite::Sql* s :
       {&sql::kClaimKeyCandidates, &sql::kClaimKeyFirsts, &sql::kReadyKeys}) {
    const std::string p = plan(s->text);
    EXPECT_NE(p.find("INDEX jobs_key"), std::string::npos) << s->text << "\n" << p;
    EXPECT_EQ(p.find("TEMP B-TREE"), std::string::npos) << "no sort:\n" << p;
    EXPECT_EQ(p.find("SCAN jobs"), std::string::npos) << "no scan:\n" << p;
    EXPECT_EQ(p.find("SCAN n"), std::string::npos) << "no scan:\n" << p;
    EXPECT_EQ(p.find("SCAN r"), std::string::npos) << "no scan:\n" << p;
  }
  // A claim's update finds each picked job by its place, not by an index.
  const std::string update = plan(sql::kClaimPlaces.text);
  EXPECT_NE(update.find("SEARCH jobs USING INTEGER PRIMARY KEY"), std::string::npos) << update;
  EXPECT_EQ(update.find("SCAN jobs"), std::string::npos) << update;
  const std::string p = plan(sql::kReadyKeys.text);
  EXPECT_NE(p.find("CO-ROUTINE walk"), std::string::npos)
      << "the walk stops where the caller stops reading:\n"
      << p;
  EXPECT_NE(p.find("jobs_key (queue=? AND key>?)"), std::string::npos) << "a seek per key:\n" << p;
}

// What the listing and a per-key claim read does not grow with keys that
// have no available job (running or final), nor with other listed keys:
// the same statements, run on a connection of the test's own, execute the
// same number of VM steps with 3000 such keys as without them. Keys whose
// jobs are all scheduled do cost (the ABI allows it), which shows that the
// count would see extra reads.
TEST_F(SqliteKeysTest, TheListingNeverReadsKeysWithoutAvailableJobs) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  enqueue_keyed(h, {{"q", "a"}, {"q", "a"}, {"q", "z"}});
  namespace sql = conveyor::sqlite::sql;
  // VM steps of one run of kReadyKeys (every key) and of kClaimKeyCandidates
  // (key a), and the keys listed.
  struct Steps {
    int listing = 0;
    int claim = 0;
    std::vector<std::string> keys;
  };
  auto measure = [&] {
    Steps out;
    sqlite3* raw = nullptr;
    EXPECT_EQ(sqlite3_open(db_path_.c_str(), &raw), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(raw, sql::kReadyKeys.text, -1, &st, nullptr), SQLITE_OK)
        << sqlite3_errmsg(raw);
    sqlite3_bind_text(st, 1, "q", 1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, "", 0, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, 100);
    sqlite3_bind_int64(st, 4, 10);
    while (sqlite3_step(st) == SQLITE_ROW)
      if (sqlite3_column_int64(st, 1) > 0)
        out.keys.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
    out.listing = sqlite3_stmt_status(st, SQLITE_STMTSTATUS_VM_STEP, 0);
    EXPECT_EQ(sqlite3_stmt_status(st, SQLITE_STMTSTATUS_FULLSCAN_STEP, 0), 0);
    sqlite3_finalize(st);
    EXPECT_EQ(sqlite3_prepare_v2(raw, sql::kClaimKeyCandidates.text, -1, &st, nullptr), SQLITE_OK);
    sqlite3_bind_text(st, 1, "q", 1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, "a", 1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, 100);
    sqlite3_bind_int64(st, 4, -1);
    int rows = 0;
    while (sqlite3_step(st) == SQLITE_ROW) ++rows;
    EXPECT_EQ(rows, 2);
    out.claim = sqlite3_stmt_status(st, SQLITE_STMTSTATUS_VM_STEP, 0);
    EXPECT_EQ(sqlite3_stmt_status(st, SQLITE_STMTSTATUS_FULLSCAN_STEP, 0), 0);
    sqlite3_finalize(st);
    sqlite3_close(raw);
    return out;
  };
  const Steps before = measure();
  EXPECT_EQ(before.keys, (std::vector<std::string>{"a", "z"}));
  EXPECT_GT(before.listing, 0);

  // 3000 keys between a and z: running and completed jobs, 5 each.
  std::vector<NewJob> many;
  std::vector<std::pair<std::string, uint32_t>> all;
  for (int i = 0; i < 3000; ++i) {
    const std::string k = "m" + std::to_string(10000 + i);
    for (int j = 0; j < 5; ++j) many.push_back({"q", k});
    all.emplace_back(k, 5);
  }
  enqueue_keyed(h, many);
  const std::vector<KeyedJob> running = claim_keys(h, "q", all, {}, 21, 100);
  ASSERT_EQ(running.size(), many.size());
  std::vector<conveyor_lease> done;
  for (size_t i = 0; i < running.size(); i += 2) done.push_back({running[i].id, 21});
  complete(h, done, 100);
  const Steps without_available = measure();
  EXPECT_EQ(without_available.keys, before.keys);
  EXPECT_EQ(ready_keys(h, "q", std::nullopt, 10, 10), (ReadyKeys{{"a", 2}, {"z", 1}}));
  EXPECT_EQ(without_available.listing, before.listing)
      << "the listing read keys that have no available job";
  EXPECT_EQ(without_available.claim, before.claim) << "claiming a read other keys";

  // The same keys with available jobs scheduled for later: the walk visits
  // them (allowed), so the step count is sensitive to keys it reads.
  exec(
      "UPDATE jobs SET state = 1, run_at = 500, lease_token = 0, lease_expires = 0"
      " WHERE key LIKE 'm%'");
  const Steps scheduled = measure();
  EXPECT_EQ(scheduled.keys, before.keys);
  EXPECT_GT(scheduled.listing, before.listing + 3000);
  EXPECT_EQ(scheduled.claim, before.claim) << "claiming a read other keys";
}

// Two handles claiming the same keys at once never get the same job, and
// between them claim every job once.
TEST_F(SqliteKeysTest, ConcurrentClaimKeysNeverOverlap) {
  conveyor_storage* h1 = open_store();
  conveyor_storage* h2 = open_store();
  ASSERT_NE(h1, nullptr);
  ASSERT_NE(h2, nullptr);
  std::vector<NewJob> jobs;
  for (int i = 0; i < 400; ++i) jobs.push_back({"q", "k" + std::to_string(i % 4)});
  enqueue_keyed(h1, jobs);
  std::vector<int64_t> got1, got2;
  auto worker = [&](conveyor_storage* h, int64_t token, std::vector<int64_t>* got) {
    for (int round = 0; round < 200; ++round) {
      std::vector<KeyedJob> j =
          claim_keys(h, "q", {{"k0", 2}, {"k1", 1}, {"k2", 3}, {"k3", 1}}, {}, token, 100);
      if (j.empty()) break;
      for (const KeyedJob& x : j) got->push_back(x.id);
    }
  };
  std::thread t1(worker, h1, 1, &got1);
  std::thread t2(worker, h2, 2, &got2);
  t1.join();
  t2.join();
  std::set<int64_t> all(got1.begin(), got1.end());
  all.insert(got2.begin(), got2.end());
  EXPECT_EQ(all.size(), got1.size() + got2.size()) << "a job was claimed twice";
  EXPECT_EQ(all.size(), 400u);
}

}  // namespace
