// ABI 1.4 (job keys) against a real PostgreSQL (CONVEYOR_TEST_PG_DSN), the
// same tests for both PostgreSQL plugins: this file is compiled into each
// plugin's test binary, which drives that plugin through its C ABI table.
// Keys round-trip through every call that reports jobs; claim_keys takes
// each listed key's first jobs in claim order, filtered by kind, paused
// with the queue, and never a job twice across concurrent claimers;
// list_ready_keys pages through the keys with ready jobs in bytewise order.
#include "job_keys_test_support.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace conveyor::postgres::test {
namespace {

constexpr int64_t kSecond = 1'000'000;
constexpr int64_t kHour = 3600 * kSecond;

class PgJobKeysTest : public PgTest {
 protected:
  void SetUp() override {
    PgTest::SetUp();
    t_ = wall_us();
  }
  std::vector<int64_t> add(conveyor_storage* h, const std::vector<KeyedJob>& jobs) {
    return enqueue_keyed(api_, h, jobs, t_);
  }
  KeyClaimResult take(conveyor_storage* h, const std::string& queue,
                      const std::vector<std::pair<std::string, uint32_t>>& keys,
                      const std::vector<std::string>& kinds = {}, int64_t now = 0) {
    return claim_keys(api_, h, queue, keys, kinds, ++token_, now == 0 ? t_ : now,
                      (now == 0 ? t_ : now) + kHour);
  }
  ReadyKeys listed(conveyor_storage* h, const std::string& queue,
                   const std::optional<std::string>& after, uint32_t limit, uint32_t count_limit,
                   int64_t now = 0) {
    ReadyKeysResult r = ready_keys(api_, h, queue, after, limit, count_limit, now == 0 ? t_ : now);
    EXPECT_EQ(r.status, CONVEYOR_OK) << r.message;
    return r.keys;
  }
  static std::map<std::string, std::vector<int64_t>> ids_by_key(const std::vector<JobCopy>& jobs) {
    std::map<std::string, std::vector<int64_t>> out;
    for (const JobCopy& j : jobs) out[j.key].push_back(j.id);
    return out;
  }

  int64_t t_ = 0;  // the tests' "now": the wall clock at the start
  int64_t token_ = 1000;
};

TEST_F(PgJobKeysTest, EveryV14SlotIsFilled) {
  EXPECT_GE(api_->struct_size, CONVEYOR_PLUGIN_V1_4_SIZE);
  EXPECT_EQ(api_->abi_minor, static_cast<uint32_t>(CONVEYOR_ABI_MINOR));
  EXPECT_NE(api_->enqueue_v4, nullptr);
  EXPECT_NE(api_->claim_keys, nullptr);
  EXPECT_NE(api_->list_ready_keys, nullptr);
}

// A key goes in with enqueue_v4 and comes back out of every call that
// reports jobs, byte for byte; jobs of the other enqueue slots have the
// empty key.
TEST_F(PgJobKeysTest, KeysRoundTripThroughEveryCallThatReportsJobs) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::string longest(CONVEYOR_JOB_KEY_MAX, 'k');
  const std::string odd = "t\xc3\xa9nant \"1\" \\ {a,b} 'x'";
  const std::vector<int64_t> ids = add(h, {{"q", "tenant-1"},
                                           {"q", odd, "other"},
                                           {"q", longest},
                                           {"q", "", "k", 0, 0, 4},
                                           {"q", "later", "k", 0, t_ + kHour}});
  ASSERT_EQ(ids.size(), 5u);
  const std::string want[] = {"tenant-1", odd, longest, "", "later"};
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(job(h, ids[i], t_).key, want[i]) << i;
  EXPECT_EQ(job(h, ids[3], t_).cost, 4) << "the cost travels beside the key";
  EXPECT_EQ(job(h, ids[4], t_).state, CONVEYOR_JOB_SCHEDULED);

  // The other enqueue slots: the empty key.
  const int64_t plain = enqueue(h, "q", 5);
  EXPECT_EQ(job(h, plain, t_).key, "");
  int64_t costed = 0;
  conveyor_new_job_v2 v2{conveyor_new_job{str("q"), str("k"), str("{}"), 5, 3, 0}, 2, 0};
  conveyor_error err{};
  ASSERT_EQ(api_->enqueue_v3(h, &v2, 1, t_, &costed, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(job(h, costed, t_).key, "");

  // list_jobs.
  std::vector<JobCopy> all;
  uint32_t n = 0;
  ASSERT_EQ(api_->list_jobs(
                h, str("q"), nullptr, 0, str(""), 0, 100, t_,
                [](void* ctx, const conveyor_job* j) {
                  static_cast<std::vector<JobCopy>*>(ctx)->push_back(plugin_testing::copy_job(j));
                },
                &all, &n, &err),
            CONVEYOR_OK)
      << err.message;
  ASSERT_EQ(all.size(), 7u);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(all[i].key, want[i]) << i;

  // claim, claim_kinds and claim_keys report the key.
  std::vector<JobCopy> first = claim(h, "q", 1, ++token_, t_, t_ + 10);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].id, ids[0]);
  EXPECT_EQ(first[0].key, "tenant-1");
  const conveyor_str other = str("other");
  std::vector<JobCopy> kinded;
  ASSERT_EQ(api_->claim_kinds(
                h, str("q"), &other, 1, 5, ++token_, t_, t_ + kHour,
                [](void* ctx, const conveyor_job* j) {
                  static_cast<std::vector<JobCopy>*>(ctx)->push_back(plugin_testing::copy_job(j));
                },
                &kinded, &n, &err),
            CONVEYOR_OK)
      << err.message;
  ASSERT_EQ(kinded.size(), 1u);
  EXPECT_EQ(kinded[0].key, odd);
  KeyClaimResult keyed = take(h, "q", {{longest, 5}, {"", 1}});
  ASSERT_EQ(keyed.status, CONVEYOR_OK) << keyed.message;
  ASSERT_EQ(keyed.jobs.size(), 2u);
  EXPECT_EQ(ids_by_key(keyed.jobs),
            (std::map<std::string, std::vector<int64_t>>{{"", {ids[3]}}, {longest, {ids[2]}}}));
  for (const JobCopy& j : keyed.jobs) {
    EXPECT_EQ(j.state, CONVEYOR_JOB_RUNNING);
    EXPECT_EQ(j.lease_token, token_);
    EXPECT_EQ(j.attempt, 1);
    EXPECT_EQ(j.queue, "q");
  }

  // A failure retried now, then a release: the job keeps its key.
  ASSERT_EQ(fail(h, leases_of(keyed.jobs)[0], "boom", t_, t_), CONVEYOR_OK);
  KeyClaimResult again = take(h, "q", {{keyed.jobs[0].key, 1}});
  ASSERT_EQ(again.jobs.size(), 1u);
  EXPECT_EQ(again.jobs[0].id, keyed.jobs[0].id);
  EXPECT_EQ(again.jobs[0].key, keyed.jobs[0].key);
  EXPECT_EQ(again.jobs[0].attempt, 2);
  EXPECT_EQ(release(h, leases_of(again.jobs), t_), std::vector{CONVEYOR_OK});
  EXPECT_EQ(job(h, again.jobs[0].id, t_).key, keyed.jobs[0].key);

  // rescue_expired_v2 reports the key of the job whose lease expired.
  std::vector<JobCopy> rescued;
  uint32_t r = 0;
  ASSERT_EQ(api_->rescue_expired_v2(
                h, t_ + 20, 100,
                [](void* ctx, const conveyor_job* j) {
                  static_cast<std::vector<JobCopy>*>(ctx)->push_back(plugin_testing::copy_job(j));
                },
                &rescued, &r, &err),
            CONVEYOR_OK)
      << err.message;
  ASSERT_EQ(rescued.size(), 1u);
  EXPECT_EQ(rescued[0].id, ids[0]);
  EXPECT_EQ(rescued[0].key, "tenant-1");
  EXPECT_EQ(job(h, ids[0], t_ + 20).key, "tenant-1");

  // The scheduled job, due later, is claimed under its key then.
  KeyClaimResult due = take(h, "q", {{"later", 1}}, {}, t_ + 2 * kHour);
  ASSERT_EQ(due.jobs.size(), 1u);
  EXPECT_EQ(due.jobs[0].id, ids[4]);
  EXPECT_EQ(due.jobs[0].key, "later");
}

TEST_F(PgJobKeysTest, EnqueueRefusesKeysThatCannotBeStored) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  std::string message;
  EXPECT_EQ(
      try_enqueue_keyed(api_, h, {{"q", "fine"}, {"q", std::string(CONVEYOR_JOB_KEY_MAX + 1, 'k')}},
                        t_, nullptr, &message),
      CONVEYOR_E_INVALID);
  EXPECT_NE(message.find("key"), std::string::npos) << message;
  EXPECT_EQ(try_enqueue_keyed(api_, h, {{"q", "fine"}, {"q", "\xff\xfe"}}, t_, nullptr, &message),
            CONVEYOR_E_INVALID);
  EXPECT_NE(message.find("key"), std::string::npos) << message;
  EXPECT_EQ(try_enqueue_keyed(api_, h, {{"q", std::string("a\0b", 3)}}, t_, nullptr, &message),
            CONVEYOR_E_INVALID);
  EXPECT_TRUE(claim(h, "q", 10, 1, t_, t_ + kHour).empty()) << "nothing was enqueued";
}

// Per key its first max_jobs ready jobs in claim order (priority, run_at,
// id); keys not listed, other queues and jobs not due are untouched.
TEST_F(PgJobKeysTest, ClaimKeysTakesEachKeysFirstJobsInClaimOrder) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::vector<int64_t> a = add(h, {{"q", "a", "k", 5},
                                         {"q", "a", "k", 1, t_ - 10},
                                         {"q", "a", "k", 1, t_ - 20},
                                         {"q", "a", "k", 0},
                                         {"q", "a", "k", -1, t_ + kHour}});
  const std::vector<int64_t> b = add(h, {{"q", "b"}, {"q", "b"}, {"q", "b"}});
  const std::vector<int64_t> c = add(h, {{"q", "c", "k", -5}, {"q", "c", "k", -5}});
  const std::vector<int64_t> e = add(h, {{"q", "", "k", 3}, {"q", "", "k", 2}});
  const std::vector<int64_t> other = add(h, {{"q2", "a", "k", -9}});

  KeyClaimResult got = take(h, "q", {{"a", 2}, {"b", 5}, {"", 1}, {"zz", 3}, {"c", 0}});
  ASSERT_EQ(got.status, CONVEYOR_OK) << got.message;
  EXPECT_EQ(ids_by_key(got.jobs), (std::map<std::string, std::vector<int64_t>>{
                                      {"", {e[1]}}, {"a", {a[3], a[2]}}, {"b", b}}));
  for (const JobCopy& j : got.jobs) {
    EXPECT_EQ(j.state, CONVEYOR_JOB_RUNNING);
    EXPECT_EQ(j.lease_token, token_);
    EXPECT_EQ(j.lease_expires, t_ + kHour);
  }
  for (int64_t id : {c[0], c[1], other[0], a[0], a[1], e[0]})
    EXPECT_EQ(job(h, id, t_).state, CONVEYOR_JOB_AVAILABLE) << id << " was not to be claimed";
  EXPECT_EQ(job(h, a[4], t_).state, CONVEYOR_JOB_SCHEDULED);

  // The rest of a, in claim order; the job not due yet stays.
  got = take(h, "q", {{"a", 10}});
  EXPECT_EQ(ids_of(got.jobs), (std::vector<int64_t>{a[1], a[0]}));
  got = take(h, "q", {{"a", 10}});
  EXPECT_TRUE(got.jobs.empty());
  got = take(h, "q", {{"a", 10}}, {}, t_ + kHour);
  EXPECT_EQ(ids_of(got.jobs), (std::vector<int64_t>{a[4]}));

  // n_keys == 0 claims nothing; a key twice or one too long is refused.
  got = take(h, "q", {});
  EXPECT_EQ(got.status, CONVEYOR_OK);
  EXPECT_TRUE(got.jobs.empty());
  got = take(h, "q", {{"c", 1}, {"c", 1}});
  EXPECT_EQ(got.status, CONVEYOR_E_INVALID);
  got = take(h, "q", {{"c", 1}, {std::string(CONVEYOR_JOB_KEY_MAX + 1, 'c'), 1}});
  EXPECT_EQ(got.status, CONVEYOR_E_INVALID);
  got = take(h, "q", {{"c", 1}, {"\xff", 1}});
  EXPECT_EQ(got.status, CONVEYOR_E_INVALID);
  for (int64_t id : c) EXPECT_EQ(job(h, id, t_).state, CONVEYOR_JOB_AVAILABLE);
  got = take(h, "never-used", {{"c", 1}});
  EXPECT_EQ(got.status, CONVEYOR_OK);
  EXPECT_TRUE(got.jobs.empty());
}

TEST_F(PgJobKeysTest, ClaimKeysFiltersKindsAndHonoursPause) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::vector<int64_t> a = add(h, {{"q", "a", "x", 0},
                                         {"q", "a", "y", 1},
                                         {"q", "a", "x", 2},
                                         {"q", "a", "y", 3},
                                         {"q", "b", "y", 0}});
  KeyClaimResult got = take(h, "q", {{"a", 10}}, {"y", "absent"});
  ASSERT_EQ(got.status, CONVEYOR_OK) << got.message;
  EXPECT_EQ(ids_of(got.jobs), (std::vector<int64_t>{a[1], a[3]}));
  EXPECT_EQ(job(h, a[4], t_).state, CONVEYOR_JOB_AVAILABLE) << "key b was not listed";
  got = take(h, "q", {{"a", 10}}, {"z"});
  EXPECT_TRUE(got.jobs.empty());

  ASSERT_EQ(pause(h, "q", true), CONVEYOR_OK);
  got = take(h, "q", {{"a", 10}, {"b", 10}});
  EXPECT_EQ(got.status, CONVEYOR_OK) << got.message;
  EXPECT_TRUE(got.jobs.empty()) << "a paused queue gives no job";
  EXPECT_EQ(listed(h, "q", std::nullopt, 10, 10), (ReadyKeys{{"a", 2}, {"b", 1}}))
      << "a paused queue's keys are listed";
  ASSERT_EQ(pause(h, "q", false), CONVEYOR_OK);
  got = take(h, "q", {{"a", 10}, {"b", 10}}, {"x"});
  EXPECT_EQ(ids_of(got.jobs), (std::vector<int64_t>{a[0], a[2]}));
}

// Claimers on several handles (connections) take the same keys at once:
// every job is claimed exactly once.
TEST_F(PgJobKeysTest, ConcurrentClaimKeysNeverShareAJob) {
  constexpr int kClaimers = 4, kKeys = 8, kPerKey = 60;
  std::vector<conveyor_storage*> handles;
  for (int i = 0; i < kClaimers; ++i) handles.push_back(open_store());
  for (conveyor_storage* h : handles) ASSERT_NE(h, nullptr);
  std::vector<KeyedJob> jobs;
  std::vector<std::pair<std::string, uint32_t>> keys;
  for (int k = 0; k < kKeys; ++k) {
    keys.emplace_back("key-" + std::to_string(k), 3);
    for (int i = 0; i < kPerKey; ++i) jobs.push_back({"q", keys.back().first, "k", i % 3});
  }
  keys.emplace_back("", 2);
  for (int i = 0; i < kPerKey; ++i) jobs.push_back({"q", ""});
  const std::vector<int64_t> ids = add(handles[0], jobs);
  ASSERT_EQ(ids.size(), jobs.size());

  std::mutex mu;
  std::vector<int64_t> claimed;
  std::atomic<int64_t> next_token{1};
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClaimers; ++c) {
    threads.emplace_back([&, c] {
      int empty_rounds = 0;
      while (empty_rounds < 3 && !failed) {
        KeyClaimResult r =
            claim_keys(api_, handles[c], "q", keys, {}, next_token++, t_, t_ + kHour);
        if (r.status != CONVEYOR_OK) {
          failed = true;
          ADD_FAILURE() << r.message;
          return;
        }
        std::map<std::string, int> per_key;
        for (const JobCopy& j : r.jobs) ++per_key[j.key];
        for (const auto& [key, n] : per_key)
          if (n > (key.empty() ? 2 : 3)) {
            failed = true;
            ADD_FAILURE() << "key '" << key << "' gave " << n << " jobs";
          }
        empty_rounds = r.jobs.empty() ? empty_rounds + 1 : 0;
        std::lock_guard lock(mu);
        for (const JobCopy& j : r.jobs) claimed.push_back(j.id);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<int64_t> sorted = claimed;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end())
      << "a job was claimed twice";
  std::vector<int64_t> want = ids;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(sorted, want) << "every job is claimed once";
}

// Keys with ready jobs in bytewise order (the empty key first), paged after
// the last key reported, each counted up to count_limit; keys whose jobs are
// all scheduled, running or finished are not listed.
TEST_F(PgJobKeysTest, ListReadyKeysPagesInBytewiseOrder) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::string e_acute = "\xc3\xa9";
  std::vector<KeyedJob> jobs;
  for (const std::string& k : {std::string("z"), e_acute, std::string("b"), std::string("ab"),
                               std::string("a b"), std::string("B"), std::string("")})
    jobs.push_back({"q", k});
  for (int i = 0; i < 4; ++i) jobs.push_back({"q", "a", "k", i});
  jobs.push_back({"q", "a", "k", 0, t_ + kHour});  // scheduled: not counted
  jobs.push_back({"q", "s", "k", 0, t_ + kHour});  // scheduled only: not listed
  jobs.push_back({"q", "r"});                      // running: not listed
  jobs.push_back({"q", "d"});                      // completed: not listed
  jobs.push_back({"q2", "other-queue"});
  add(h, jobs);
  KeyClaimResult taken = take(h, "q", {{"r", 1}, {"d", 1}});
  ASSERT_EQ(taken.jobs.size(), 2u);
  for (const JobCopy& j : taken.jobs)
    if (j.key == "d") {
      ASSERT_EQ(complete(h, leases_of({j}), t_), std::vector{CONVEYOR_OK});
    }

  EXPECT_EQ(
      listed(h, "q", std::nullopt, 100, 100),
      (ReadyKeys{
          {"", 1}, {"B", 1}, {"a", 4}, {"a b", 1}, {"ab", 1}, {"b", 1}, {"z", 1}, {e_acute, 1}}));
  // Pages of three, each after the last key of the one before.
  EXPECT_EQ(listed(h, "q", std::nullopt, 3, 2), (ReadyKeys{{"", 1}, {"B", 1}, {"a", 2}}));
  EXPECT_EQ(listed(h, "q", "a", 3, 2), (ReadyKeys{{"a b", 1}, {"ab", 1}, {"b", 1}}));
  EXPECT_EQ(listed(h, "q", "b", 3, 2), (ReadyKeys{{"z", 1}, {e_acute, 1}}));
  EXPECT_EQ(listed(h, "q", e_acute, 3, 2), ReadyKeys{});
  // The empty key is a key: after it comes the next one.
  EXPECT_EQ(listed(h, "q", "", 1, 1), (ReadyKeys{{"B", 1}}));
  // After a key that has no jobs: from the next one that has.
  EXPECT_EQ(listed(h, "q", "aa", 2, 1), (ReadyKeys{{"ab", 1}, {"b", 1}}));
  EXPECT_EQ(listed(h, "q", "a", 1, 1, /*now=*/t_ + 2 * kHour), (ReadyKeys{{"a b", 1}}));
  // Once due, the scheduled jobs count.
  EXPECT_EQ(listed(h, "q", "Z", 2, 100, t_ + 2 * kHour), (ReadyKeys{{"a", 5}, {"a b", 1}}));
  EXPECT_EQ(listed(h, "q", "r", 1, 100, t_ + 2 * kHour), (ReadyKeys{{"s", 1}}));
  EXPECT_EQ(listed(h, "q2", std::nullopt, 10, 10), (ReadyKeys{{"other-queue", 1}}));
  EXPECT_EQ(listed(h, "never-used", std::nullopt, 10, 10), ReadyKeys{});

  // Bad arguments.
  for (auto [limit, count_limit] :
       {std::pair<uint32_t, uint32_t>{0, 1}, {CONVEYOR_LIST_JOBS_MAX + 1, 1}, {1, 0}}) {
    ReadyKeysResult r = ready_keys(api_, h, "q", std::nullopt, limit, count_limit, t_);
    EXPECT_EQ(r.status, CONVEYOR_E_INVALID) << limit << " " << count_limit;
  }
  EXPECT_EQ(ready_keys(api_, h, "", std::nullopt, 10, 10, t_).status, CONVEYOR_E_INVALID);
  EXPECT_EQ(ready_keys(api_, h, "q", std::string(CONVEYOR_JOB_KEY_MAX + 1, 'a'), 10, 10, t_).status,
            CONVEYOR_E_INVALID);
  std::string last;  // the greatest key of CONVEYOR_JOB_KEY_MAX bytes: U+10FFFF repeated
  while (last.size() < CONVEYOR_JOB_KEY_MAX) last += "\xf4\x8f\xbf\xbf";
  EXPECT_EQ(listed(h, "q", last, 10, 10), ReadyKeys{}) << "the longest key is a key to list after";
}

// What list_ready_keys says is what claim_keys finds: claiming every listed
// key's ready jobs drains it from the list, page by page.
TEST_F(PgJobKeysTest, ListedKeysDrainThroughClaimKeys) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  std::vector<KeyedJob> jobs;
  for (int k = 0; k < 30; ++k)
    for (int i = 0; i <= k % 4; ++i) jobs.push_back({"q", "k" + std::to_string(100 + k)});
  add(h, jobs);
  size_t claimed = 0;
  for (int round = 0; round < 100; ++round) {
    ReadyKeys page = listed(h, "q", std::nullopt, 7, 2);
    if (page.empty()) break;
    std::vector<std::pair<std::string, uint32_t>> want;
    for (const auto& [key, ready] : page) want.emplace_back(key, static_cast<uint32_t>(ready));
    KeyClaimResult got = take(h, "q", want);
    ASSERT_EQ(got.status, CONVEYOR_OK) << got.message;
    size_t expected = 0;
    for (const auto& [key, ready] : page) expected += static_cast<size_t>(ready);
    EXPECT_EQ(got.jobs.size(), expected) << "claim_keys found what was listed";
    claimed += got.jobs.size();
  }
  EXPECT_EQ(claimed, jobs.size());
  EXPECT_TRUE(claim(h, "q", 100, 1, t_, t_ + kHour).empty());
}

}  // namespace
}  // namespace conveyor::postgres::test
