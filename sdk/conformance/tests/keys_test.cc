// ABI 1.4 job keys: enqueue_v4 stores a key with each job and every call that
// reports jobs reports it; claim_keys claims up to a number of jobs per key in
// one step; list_ready_keys lists the keys that have ready jobs, in key order
// (storage_plugin.h "version 1.4"). Each behaviour runs only on a plugin of
// ABI 1.4 or later whose table fills the slots it uses.
#include "fixture.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace conveyor::conformance {
namespace {

class JobKeys : public ConformanceTest {};
class ClaimKeys : public ConformanceTest {};
class ListReadyKeys : public ConformanceTest {};

conveyor_str cstr(std::string_view s) { return conveyor_str{s.data(), s.size()}; }

// The longest key there is: CONVEYOR_JOB_KEY_MAX bytes, ending in a two-byte
// UTF-8 character (a plugin counting characters, not bytes, is off by one).
std::string longest_key() { return std::string(CONVEYOR_JOB_KEY_MAX - 2, 'k') + "\xc3\xa9"; }
// One byte too many.
std::string too_long_key() { return std::string(CONVEYOR_JOB_KEY_MAX + 1, 'k'); }

std::vector<int64_t> ids_of(const std::vector<JobCopy>& jobs) {
  std::vector<int64_t> ids;
  for (const JobCopy& j : jobs) ids.push_back(j.id);
  return ids;
}
// on_job's order is free across keys: compare claims as sets.
std::set<int64_t> id_set(const std::vector<JobCopy>& jobs) {
  std::vector<int64_t> ids = ids_of(jobs);
  return {ids.begin(), ids.end()};
}
std::vector<std::string> keys_of(const std::vector<ReadyKeyCopy>& keys) {
  std::vector<std::string> out;
  for (const ReadyKeyCopy& k : keys) out.push_back(k.key);
  return out;
}
std::map<std::string, int64_t> counts_of(const std::vector<ReadyKeyCopy>& keys) {
  std::map<std::string, int64_t> out;
  for (const ReadyKeyCopy& k : keys) out[k.key] = k.ready;
  return out;
}

// Each job of ids is still AVAILABLE and has never started: a refused or
// unrelated call left it alone.
void expect_untouched(Handle& h, const std::vector<int64_t>& ids, const std::string& why) {
  for (int64_t id : ids) {
    JobCopy j = h.job(id, kT0);
    EXPECT_TRUE(j.state == CONVEYOR_JOB_AVAILABLE || j.state == CONVEYOR_JOB_SCHEDULED)
        << "job " << id << " (key \"" << j.key << "\") is " << state_name(j.state) << ": " << why;
    EXPECT_EQ(j.attempt, 0) << "job " << id << " (key \"" << j.key << "\") was claimed: " << why;
  }
}

// ---- enqueue_v4 and the key in every report ----

TEST_F(JobKeys, KeysRoundTripThroughEveryReportingCall) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  // One job per key, claimed in this order (priority), one kind each.
  const std::vector<std::string> keys = {"tenant-42", "", "caf\xc3\xa9 \xe2\x9c\x93", longest_key(),
                                         "Tenant-42"};
  std::vector<JobSpec> specs;
  for (size_t i = 0; i < keys.size(); ++i)
    specs.push_back(JobSpec{.queue = "keys",
                            .kind = "kind" + std::to_string(i),
                            .priority = static_cast<int32_t>(i),
                            .key = keys[i]});
  const std::vector<int64_t> ids = h->add_keyed(specs);
  ASSERT_EQ(ids.size(), keys.size());
  const std::string rule =
      " (storage_plugin.h enqueue_v4: the key is \"reported in "
      "conveyor_job.key by every call that reports jobs\")";
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(h->job(ids[i], kT0).key, keys[i]) << "get_job" << rule;
  if (h->has_slot(host::StorageSlot::kListJobs)) {
    std::vector<JobCopy> listed = h->list("keys", {}, "", 0, 100, kT0);
    ASSERT_EQ(listed.size(), ids.size());
    for (size_t i = 0; i < listed.size(); ++i)
      EXPECT_EQ(listed[i].key, keys[i]) << "list_jobs" << rule;
  }
  // Each claiming call takes the next job in claim order.
  EXPECT_EQ(h->claim_one("keys", kT0).key, keys[0]) << "claim" << rule;
  size_t claimed = 1;
  if (h->has_slot(host::StorageSlot::kClaimKinds)) {
    std::vector<JobCopy> got = h->claim_kinds_jobs("keys", {"kind1"}, 1, kT0);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].key, keys[1]) << "claim_kinds" << rule;
    claimed = 2;
  }
  if (h->has_slot(host::StorageSlot::kClaimKeys)) {
    std::vector<JobCopy> got = h->claim_keys_jobs("keys", {}, {KeyClaim{keys[claimed], 1}}, kT0);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].key, keys[claimed]) << "claim_keys" << rule;
    ++claimed;
  }
  // The claimed jobs, reported by the rescue of their expired leases.
  const int64_t after_expiry = kT0 + kLease + 1;
  if (h->has_slot(host::StorageSlot::kRescueExpiredV2)) {
    std::vector<JobCopy> rescued;
    require_ok(h->rescue_expired_v2(after_expiry, 100, &rescued));
    EXPECT_EQ(rescued.size(), claimed);
    for (const JobCopy& j : rescued) {
      const auto at = std::find(ids.begin(), ids.end(), j.id) - ids.begin();
      ASSERT_LT(static_cast<size_t>(at), ids.size());
      EXPECT_EQ(j.key, keys[at]) << "rescue_expired_v2" << rule;
    }
  } else {
    EXPECT_EQ(h->rescue(after_expiry, 100), claimed);
  }
  // A final job keeps its key.
  std::vector<JobCopy> rest = h->claim_jobs("keys", 100, after_expiry);
  ASSERT_EQ(rest.size(), ids.size());
  std::vector<conveyor_lease> leases;
  for (const JobCopy& j : rest) leases.push_back(j.lease());
  h->complete_all(leases, after_expiry + 1);
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(h->job(ids[i], after_expiry + 2).key, keys[i])
        << "get_job of a COMPLETED job" << rule;
}

TEST_F(JobKeys, EnqueueV4IsEnqueueV3WithKeys) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  std::vector<int64_t> ids;
  ASSERT_TRUE(h->enqueue_v4({JobSpec{.queue = "v4",
                                     .payload = "{\"a\":1}",
                                     .priority = 3,
                                     .max_attempts = 4,
                                     .cost = 2,
                                     .key = "k"},
                             JobSpec{.queue = "v4", .run_at_us = kT0 + 100 * kSecond, .cost = 3}},
                            kT0 + 5, &ids)
                  .ok());
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_LT(ids[0], ids[1]) << "ids must increase in batch order";
  const std::string rule = " (storage_plugin.h enqueue_v4: \"Everything else as enqueue_v3\")";
  JobCopy a = h->job(ids[0], kT0 + 5);
  EXPECT_STATE(a.state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(a.created_at, kT0 + 5) << "created_at is enqueue_v4's now_us" << rule;
  EXPECT_EQ(a.payload, "{\"a\":1}");
  EXPECT_EQ(a.priority, 3);
  EXPECT_EQ(a.max_attempts, 4);
  EXPECT_EQ(a.cost, 2) << "the job's cost" << rule;
  EXPECT_EQ(a.key, "k");
  JobCopy b = h->job(ids[1], kT0 + 5);
  EXPECT_STATE(b.state, CONVEYOR_JOB_SCHEDULED);
  EXPECT_EQ(b.cost, 3) << "the job's cost" << rule;
  EXPECT_EQ(b.key, "");
  // Bad costs and kinds refuse the whole batch, as for enqueue_v3.
  for (const JobSpec& bad : {JobSpec{.queue = "v4bad", .cost = 0, .key = "k"},
                             JobSpec{.queue = "v4bad", .cost = CONVEYOR_JOB_COST_MAX + 1},
                             JobSpec{.queue = "v4bad", .kind = "", .key = "k"},
                             JobSpec{.queue = "v4bad", .max_attempts = 0}}) {
    Status s = h->enqueue_v4({JobSpec{.queue = "v4bad", .key = "k"}, bad}, kT0, nullptr);
    EXPECT_STATUS(s.code, CONVEYOR_E_INVALID) << s << rule;
  }
  EXPECT_TRUE(h->claim_jobs("v4bad", 10, kT0).empty()) << "part of a refused batch was stored";
  EXPECT_EQ(h->claim_jobs("v4", 10, kT0 + 100 * kSecond).size(), 2u);
}

TEST_F(JobKeys, JobsEnqueuedWithoutAKeyHaveTheEmptyKey) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  std::vector<int64_t> ids = {h->add(JobSpec{.queue = "old", .kind = "enqueue"})};
  if (h->has_slot(host::StorageSlot::kEnqueueV2)) {
    std::vector<int64_t> v2;
    require_ok(h->enqueue_v2({JobSpec{.queue = "old", .kind = "enqueue_v2"}}, kT0, &v2));
    ids.push_back(v2.at(0));
  }
  if (h->has_slot(host::StorageSlot::kEnqueueV3)) {
    ids.push_back(h->add_costed({JobSpec{.queue = "old", .kind = "enqueue_v3"}}).at(0));
  }
  h->add_keyed({JobSpec{.queue = "old", .kind = "keyed", .key = "x"}});
  const std::string rule =
      " (storage_plugin.h enqueue_v4: \"Jobs enqueued by any other "
      "enqueue slot have the empty key\")";
  for (int64_t id : ids) {
    JobCopy j = h->job(id, kT0);
    EXPECT_EQ(j.key, "") << "job " << id << " enqueued by " << j.kind << rule;
  }
  if (h->has_slot(host::StorageSlot::kListReadyKeys)) {
    std::vector<ReadyKeyCopy> ready = h->ready_keys("old", std::nullopt, 10, 100, kT0);
    EXPECT_EQ(keys_of(ready), (std::vector<std::string>{"", "x"})) << rule;
    EXPECT_EQ(counts_of(ready)[""], static_cast<int64_t>(ids.size())) << rule;
  }
  if (h->has_slot(host::StorageSlot::kClaimKeys)) {
    std::vector<JobCopy> got = h->claim_keys_jobs("old", {}, {KeyClaim{"", 10}}, kT0);
    EXPECT_EQ(id_set(got), std::set<int64_t>(ids.begin(), ids.end()))
        << "claim_keys of the empty key must take the jobs enqueued without a key" << rule;
    for (const JobCopy& j : got) EXPECT_EQ(j.key, "");
  }
}

TEST_F(JobKeys, KeyTooLongRejectsTheWholeBatch) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  std::vector<int64_t> ids;
  Status s = h->enqueue_v4(
      {JobSpec{.queue = "long", .key = "fine"}, JobSpec{.queue = "long", .key = too_long_key()}},
      kT0, &ids);
  EXPECT_STATUS(s.code, CONVEYOR_E_INVALID)
      << s << " for a key of " << CONVEYOR_JOB_KEY_MAX + 1
      << " bytes (storage_plugin.h enqueue_v4: \"A key longer than CONVEYOR_JOB_KEY_MAX bytes is "
         "CONVEYOR_E_INVALID (nothing enqueued)\")";
  EXPECT_TRUE(h->claim_jobs("long", 10, kT0).empty()) << "part of a refused batch was stored";
  // The longest key is fine, and is kept whole.
  const int64_t id = h->add_keyed({JobSpec{.queue = "long", .key = longest_key()}}).at(0);
  EXPECT_EQ(h->job(id, kT0).key, longest_key());
}

TEST_F(JobKeys, TheKeyStaysThroughRetryReleaseAndRescue) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  const int64_t id =
      h->add_keyed({JobSpec{.queue = "life", .max_attempts = 3, .key = "tenant-7"}}).at(0);
  const std::string why =
      ": a job keeps its key for life (a new turn of an append-only "
      "plugin copies it)";
  JobCopy first = h->claim_one("life", kT0);
  ASSERT_TRUE(h->fail(first.lease(), "again", kT0 + 1, kT0 + 1).ok());
  EXPECT_EQ(h->job(id, kT0 + 1).key, "tenant-7") << "after fail with a retry" << why;
  JobCopy second = h->claim_one("life", kT0 + 2);
  EXPECT_EQ(second.key, "tenant-7") << "claimed after fail with a retry" << why;
  std::vector<conveyor_status> r;
  ASSERT_TRUE(h->release({second.lease()}, kT0 + 3, &r).ok());
  JobCopy third = h->claim_one("life", kT0 + 4);
  EXPECT_EQ(third.key, "tenant-7") << "after release" << why;
  const int64_t after_expiry = kT0 + 4 + kLease + 1;
  EXPECT_EQ(h->rescue(after_expiry, 10), 1u);
  EXPECT_EQ(h->job(id, after_expiry).key, "tenant-7") << "after rescue" << why;
  JobCopy fourth = h->claim_one("life", after_expiry);
  EXPECT_EQ(fourth.key, "tenant-7") << "claimed after rescue" << why;
  ASSERT_TRUE(h->fail(fourth.lease(), "out of attempts", -1, after_expiry + 1).ok());
  EXPECT_EQ(h->job(id, after_expiry + 1).key, "tenant-7") << "FAILED" << why;
  if (h->has_slot(host::StorageSlot::kRetryJobs)) {
    EXPECT_EQ(h->retry({id}, after_expiry + 2), std::vector<conveyor_status>{CONVEYOR_OK});
    EXPECT_EQ(h->job(id, after_expiry + 2).key, "tenant-7") << "after retry_jobs" << why;
    if (h->has_slot(host::StorageSlot::kClaimKeys)) {
      std::vector<JobCopy> got =
          h->claim_keys_jobs("life", {}, {KeyClaim{"tenant-7", 5}}, after_expiry + 3);
      EXPECT_EQ(ids_of(got), std::vector<int64_t>{id})
          << "claim_keys must find a retried job under its key";
    }
  }
}

TEST_F(JobKeys, KeysSurviveCloseAndReopen) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_DURABLE);
  int64_t id = 0;
  {
    auto h = open();
    CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
    id = h->add_keyed({JobSpec{.queue = "durable", .key = "kept"}}).at(0);
  }
  auto h = open();
  EXPECT_EQ(h->job(id, kT0).key, "kept") << "a durable plugin keeps the key with the job";
  if (h->has_slot(host::StorageSlot::kListReadyKeys)) {
    EXPECT_EQ(keys_of(h->ready_keys("durable", std::nullopt, 10, 10, kT0)),
              std::vector<std::string>{"kept"});
  }
}

// ---- claim_keys ----

TEST_F(ClaimKeys, TakesUpToMaxJobsOfEachKeyInClaimOrder) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  CONFORMANCE_REQUIRE_SLOT(h, claim_keys);
  // Key "a", in claim order (priority, run_at, id): a3, a4, a2, a1, a5.
  const int64_t a1 = h->add_keyed({JobSpec{.priority = 1, .key = "a"}}).at(0);
  const int64_t a2 = h->add_keyed({JobSpec{.run_at_us = kT0 + 2, .key = "a"}}).at(0);
  const int64_t a3 = h->add_keyed({JobSpec{.run_at_us = kT0 + 1, .key = "a"}}).at(0);
  const int64_t a4 = h->add_keyed({JobSpec{.run_at_us = kT0 + 1, .key = "a"}}).at(0);
  const int64_t a5 = h->add_keyed({JobSpec{.priority = 2, .key = "a"}}).at(0);
  // Key "b" has fewer jobs than asked for; key "c" is asked for none.
  const std::vector<int64_t> b = h->add_keyed({JobSpec{.key = "b"}, JobSpec{.key = "b"}});
  const int64_t c = h->add_keyed({JobSpec{.key = "c"}}).at(0);
  const int64_t token = next_lease_token();
  const int64_t now = kT0 + 10;
  std::vector<JobCopy> got;
  require_ok(h->claim_keys("default", {}, {KeyClaim{"a", 3}, KeyClaim{"b", 5}, KeyClaim{"c", 0}},
                           token, now, now + kLease, &got));
  EXPECT_EQ(id_set(got), (std::set<int64_t>{a3, a4, a2, b[0], b[1]}))
      << "storage_plugin.h claim_keys: \"up to keys[i].max_jobs ready jobs of each key ... per "
         "key the first ready jobs in claim order (priority, run_at, id)\"; \"A key with fewer "
         "ready jobs gives what it has\"; max_jobs 0 takes none";
  for (const JobCopy& j : got) {
    EXPECT_STATE(j.state, CONVEYOR_JOB_RUNNING);
    EXPECT_EQ(j.attempt, 1);
    EXPECT_EQ(j.lease_token, token) << "leases as claim";
    EXPECT_EQ(j.lease_expires, now + kLease) << "leases as claim";
  }
  expect_untouched(*h, {a1, a5, c}, "not among the first max_jobs of its key");
  // The next call goes on where this one stopped.
  std::vector<JobCopy> more = h->claim_keys_jobs("default", {}, {KeyClaim{"a", 1}}, now);
  EXPECT_EQ(ids_of(more), std::vector<int64_t>{a1});
}

TEST_F(ClaimKeys, LeavesKeysNotListedAndOtherQueuesUntouched) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  CONFORMANCE_REQUIRE_SLOT(h, claim_keys);
  // Ahead in claim order, but of other keys (a prefix, an extension, another
  // case, the empty key) or of another queue.
  const std::vector<int64_t> others =
      h->add_keyed({JobSpec{.priority = -10, .key = "other"}, JobSpec{.priority = -9, .key = ""},
                    JobSpec{.priority = -8, .key = "min"}, JobSpec{.priority = -7, .key = "mine2"},
                    JobSpec{.priority = -6, .key = "Mine"},
                    JobSpec{.queue = "elsewhere", .priority = -5, .key = "mine"}});
  const int64_t mine = h->add_keyed({JobSpec{.priority = 10, .key = "mine"}}).at(0);
  std::vector<JobCopy> got = h->claim_keys_jobs("default", {}, {KeyClaim{"mine", 5}}, kT0);
  EXPECT_EQ(ids_of(got), std::vector<int64_t>{mine})
      << "storage_plugin.h claim_keys: \"jobs of keys not listed are left untouched and never "
         "block the listed ones\" (keys compared whole and bytewise; one queue)";
  expect_untouched(*h, others, "its key was not listed, or it is in another queue");
  EXPECT_TRUE(h->claim_keys_jobs("nowhere", {}, {KeyClaim{"mine", 5}}, kT0).empty())
      << "an unknown queue claims nothing";
}

TEST_F(ClaimKeys, HonoursTheKindsFilter) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  CONFORMANCE_REQUIRE_SLOT(h, claim_keys);
  const int64_t x0 = h->add_keyed({JobSpec{.kind = "x", .priority = -5, .key = "a"}}).at(0);
  const int64_t y = h->add_keyed({JobSpec{.kind = "y", .priority = 0, .key = "a"}}).at(0);
  const int64_t x1 = h->add_keyed({JobSpec{.kind = "x", .priority = 1, .key = "a"}}).at(0);
  const int64_t z = h->add_keyed({JobSpec{.kind = "z", .priority = 2, .key = "a"}}).at(0);
  const int64_t y_b = h->add_keyed({JobSpec{.kind = "y", .key = "b"}}).at(0);
  const int64_t x_b = h->add_keyed({JobSpec{.kind = "x", .priority = -1, .key = "b"}}).at(0);
  std::vector<JobCopy> got =
      h->claim_keys_jobs("default", {"z", "y"}, {KeyClaim{"a", 2}, KeyClaim{"b", 1}}, kT0);
  EXPECT_EQ(id_set(got), (std::set<int64_t>{y, z, y_b}))
      << "storage_plugin.h claim_keys: \"restricted to kinds[0..n_kinds) as claim_kinds\"; "
         "other kinds are left untouched and do not count against max_jobs";
  expect_untouched(*h, {x0, x1, x_b}, "its kind was not asked for");
  std::vector<JobCopy> rest = h->claim_keys_jobs("default", {}, {KeyClaim{"a", 10}}, kT0);
  EXPECT_EQ(id_set(rest), (std::set<int64_t>{x0, x1}))
      << "storage_plugin.h claim_keys: \"n_kinds == 0: no filter\"";
}

TEST_F(ClaimKeys, RespectsRunAtAndPause) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  CONFORMANCE_REQUIRE_SLOT(h, claim_keys);
  const int64_t id = h->add_keyed({JobSpec{.run_at_us = kT0 + kSecond, .key = "a"}}).at(0);
  EXPECT_TRUE(h->claim_keys_jobs("default", {}, {KeyClaim{"a", 5}}, kT0 + kSecond - 1).empty())
      << "claim_keys took a job 1 us before its run_at (only ready jobs: run_at <= now_us)";
  h->pause("default", true, kT0);
  EXPECT_TRUE(h->claim_keys_jobs("default", {}, {KeyClaim{"a", 5}}, kT0 + kSecond).empty())
      << "claim_keys took a job from a paused queue (storage_plugin.h claim_keys: \"pause ... as "
         "claim\")";
  h->pause("default", false, kT0);
  EXPECT_EQ(ids_of(h->claim_keys_jobs("default", {}, {KeyClaim{"a", 5}}, kT0 + kSecond)),
            std::vector<int64_t>{id})
      << "due and resumed, the job is claimed";
}

TEST_F(ClaimKeys, NoKeysClaimsNothing) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  CONFORMANCE_REQUIRE_SLOT(h, claim_keys);
  const std::vector<int64_t> ids = h->add_keyed({JobSpec{.key = ""}, JobSpec{.key = "a"}});
  EXPECT_TRUE(h->claim_keys_jobs("default", {}, {}, kT0).empty())
      << "storage_plugin.h claim_keys: \"n_keys == 0 claims nothing (OK)\"";
  expect_untouched(*h, ids, "claim_keys was given no keys");
}

TEST_F(ClaimKeys, InvalidArgumentsClaimNothing) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  CONFORMANCE_REQUIRE_SLOT(h, claim_keys);
  const std::vector<int64_t> ids =
      h->add_keyed({JobSpec{.key = "a"}, JobSpec{.key = "b"}, JobSpec{.key = ""}});
  const std::string rule = " (storage_plugin.h claim_keys: CONVEYOR_E_INVALID, nothing claimed)";
  struct Case {
    const char* what;
    std::vector<std::string> kinds;
    std::vector<KeyClaim> keys;
  };
  for (const Case& c : {
           Case{"the same key twice", {}, {KeyClaim{"a", 1}, KeyClaim{"b", 1}, KeyClaim{"a", 1}}},
           Case{"the empty key twice", {}, {KeyClaim{"", 1}, KeyClaim{"", 1}}},
           Case{"a key longer than CONVEYOR_JOB_KEY_MAX",
                {},
                {KeyClaim{"a", 1}, KeyClaim{too_long_key(), 1}}},
           Case{"an empty kind", {"conformance.job", ""}, {KeyClaim{"a", 1}}},
       }) {
    std::vector<JobCopy> got;
    Status s =
        h->claim_keys("default", c.kinds, c.keys, next_lease_token(), kT0, kT0 + kLease, &got);
    EXPECT_STATUS(s.code, CONVEYOR_E_INVALID) << c.what << rule;
  }
  std::vector<JobCopy> got;
  Status zero = h->claim_keys("default", {}, {KeyClaim{"a", 1}}, 0, kT0, kT0 + kLease, &got);
  EXPECT_STATUS(zero.code, CONVEYOR_E_INVALID) << "lease_token 0" << rule;
  // NULL arrays and out-parameters, through the table itself.
  const conveyor_key_claim one{cstr("a"), 1, 0};
  const conveyor_str kind = cstr("conformance.job");
  uint32_t n = 0;
  int calls = 0;
  auto count = [](void* ctx, const conveyor_job*) { ++*static_cast<int*>(ctx); };
  struct Raw {
    const char* what;
    const conveyor_str* kinds;
    size_t n_kinds;
    const conveyor_key_claim* keys;
    size_t n_keys;
    conveyor_job_fn on_job;
    uint32_t* out;
  };
  for (const Raw& c : {Raw{"keys NULL with n_keys 1", nullptr, 0, nullptr, 1, count, &n},
                       Raw{"kinds NULL with n_kinds 1", nullptr, 1, &one, 1, count, &n},
                       Raw{"on_job NULL", &kind, 1, &one, 1, nullptr, &n},
                       Raw{"out_claimed NULL", &kind, 1, &one, 1, count, nullptr}}) {
    conveyor_error err = poisoned_error();
    const conveyor_status code =
        table().claim_keys(h->raw(), cstr("default"), c.kinds, c.n_kinds, c.keys, c.n_keys,
                           next_lease_token(), kT0, kT0 + kLease, c.on_job, &calls, c.out, &err);
    EXPECT_STATUS(code, CONVEYOR_E_INVALID) << c.what << rule;
    if (code != CONVEYOR_OK)
      if (std::string problems = check_error(code, err); !problems.empty())
        ADD_FAILURE() << c.what << ": " << problems;
  }
  EXPECT_EQ(calls, 0) << "a refused claim_keys called on_job";
  expect_untouched(*h, ids, "every claim_keys call was refused");
}

TEST_F(ClaimKeys, ConcurrentClaimsNeverReturnTheSameJob) {
  auto first = open();
  CONFORMANCE_REQUIRE_SLOT(first, enqueue_v4);
  CONFORMANCE_REQUIRE_SLOT(first, claim_keys);
  // With multi-process, half the claimers use a second handle.
  std::unique_ptr<Handle> second = has(CONVEYOR_CAP_MULTI_PROCESS) ? open() : nullptr;
  constexpr int kKeys = 12;
  constexpr int kPerKey = 100;
  constexpr int kThreads = 8;
  for (int k = 0; k < kKeys; ++k) {
    std::vector<JobSpec> specs(kPerKey, JobSpec{.queue = "load", .key = "key" + std::to_string(k)});
    first->add_keyed(specs);
  }
  std::mutex mu;
  std::vector<int64_t> claimed;
  std::vector<std::string> errors;
  std::atomic<int> total{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto claimer = [&](Handle& h, int seed) {
    int round = seed;
    while (total.load() < kKeys * kPerKey && std::chrono::steady_clock::now() < deadline) {
      // Overlapping sets of keys: each call names 4 of them, 1 to 3 jobs each.
      std::vector<KeyClaim> keys;
      for (int i = 0; i < 4; ++i)
        keys.push_back(KeyClaim{"key" + std::to_string((round + 3 * i) % kKeys),
                                static_cast<uint32_t>(1 + (round + i) % 3)});
      ++round;
      std::vector<JobCopy> jobs;
      Status s =
          h.claim_keys("load", {}, keys, next_lease_token(), kT0, kT0 + 1000 * kLease, &jobs);
      if (s.code == CONVEYOR_E_UNAVAILABLE) continue;  // transient: the host retries
      std::lock_guard lock(mu);
      if (!s.ok()) {
        std::ostringstream msg;
        msg << s;
        errors.push_back(msg.str());
        return;
      }
      for (const JobCopy& j : jobs) claimed.push_back(j.id);
      total.fetch_add(static_cast<int>(jobs.size()));
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back(claimer, std::ref(second && t % 2 == 1 ? *second : *first), t * 5);
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors) ADD_FAILURE() << "a claimer failed: " << e;
  std::map<int64_t, int> times;
  for (int64_t id : claimed) ++times[id];
  int duplicates = 0;
  for (const auto& [id, n] : times) duplicates += n > 1 ? 1 : 0;
  EXPECT_EQ(duplicates, 0) << duplicates << " job(s) were returned by more than one claim_keys "
                           << "(storage_plugin.h claim_keys: \"Leases ... as claim\": \"Two "
                              "concurrent claims ... never return the same job\")";
  EXPECT_EQ(times.size(), static_cast<size_t>(kKeys * kPerKey))
      << "every job should have been claimed once";
}

// ---- list_ready_keys ----

TEST_F(ListReadyKeys, ListsKeysWithReadyJobsInBytewiseOrder) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  CONFORMANCE_REQUIRE_SLOT(h, list_ready_keys);
  // Bytewise: "" < "B" < "a" < "ab" < "b" < "z" < "\xc3\xa9" (é). A locale's
  // collation would put "B" after "a" and "é" next to "e"; the empty key is
  // one key like any other, and comes first.
  const std::vector<std::string> ordered = {"", "B", "a", "ab", "b", "z", "\xc3\xa9"};
  for (size_t i : {4u, 6u, 0u, 2u, 5u, 1u, 3u})
    h->add_keyed(std::vector<JobSpec>(i + 1, JobSpec{.key = ordered[i]}));
  std::vector<ReadyKeyCopy> got = h->ready_keys("default", std::nullopt, 100, 100, kT0);
  EXPECT_EQ(keys_of(got), ordered)
      << "storage_plugin.h list_ready_keys: \"in key order (bytewise, as \\\"name order\\\"; the "
         "empty key first)\"";
  for (const ReadyKeyCopy& k : got) {
    const auto at = std::find(ordered.begin(), ordered.end(), k.key) - ordered.begin();
    EXPECT_EQ(k.ready, at + 1) << "ready jobs of key \"" << k.key << "\"";
  }
}

TEST_F(ListReadyKeys, LeavesOutKeysWithoutReadyJobs) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  CONFORMANCE_REQUIRE_SLOT(h, list_ready_keys);
  const int64_t later = kT0 + 3600 * kSecond;
  h->add_keyed({JobSpec{.run_at_us = later, .key = "scheduled"}});
  h->add_keyed({JobSpec{.key = "running"}});
  h->add_keyed({JobSpec{.priority = -1, .max_attempts = 1, .key = "final"},
                JobSpec{.priority = -1, .key = "final"}, JobSpec{.priority = -1, .key = "final"}});
  h->add_keyed({JobSpec{.priority = 1, .key = "ready"}});
  // "final": one completed, one failed, one cancelled.
  std::vector<JobCopy> finals = h->claim_jobs("default", 3, kT0);
  ASSERT_EQ(finals.size(), 3u);
  h->complete_one(finals[0].lease(), kT0);
  require_ok(h->fail(finals[1].lease(), "boom", -1, kT0));
  require_ok(h->cancel(finals[2].id, kT0));
  // "running": claimed.
  EXPECT_EQ(h->claim_one("default", kT0).key, "running");
  EXPECT_EQ(keys_of(h->ready_keys("default", std::nullopt, 100, 100, kT0)),
            std::vector<std::string>{"ready"})
      << "storage_plugin.h list_ready_keys: only keys \"that have at least one ready job "
         "(AVAILABLE, run_at <= now_us)\": not a key whose jobs are all scheduled for later, "
         "running or final";
  EXPECT_EQ(keys_of(h->ready_keys("default", std::nullopt, 100, 100, later)),
            (std::vector<std::string>{"ready", "scheduled"}))
      << "once its run_at has come, the scheduled key is listed";
  h->pause("default", true, kT0);
  EXPECT_EQ(keys_of(h->ready_keys("default", std::nullopt, 100, 100, kT0)),
            std::vector<std::string>{"ready"})
      << "storage_plugin.h list_ready_keys: \"a paused queue's keys are listed too\"";
}

TEST_F(ListReadyKeys, CountsReadyJobsUpToCountLimit) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  CONFORMANCE_REQUIRE_SLOT(h, list_ready_keys);
  // "a": 5 ready, 2 scheduled, 1 running, 1 completed; "b": 1 ready.
  h->add_keyed({JobSpec{.priority = -1, .key = "a"}, JobSpec{.priority = -1, .key = "a"}});
  h->add_keyed(std::vector<JobSpec>(5, JobSpec{.key = "a"}));
  h->add_keyed(std::vector<JobSpec>(2, JobSpec{.run_at_us = kT0 + kSecond, .key = "a"}));
  h->add_keyed({JobSpec{.key = "b"}});
  std::vector<JobCopy> two = h->claim_jobs("default", 2, kT0);
  ASSERT_EQ(two.size(), 2u);
  h->complete_one(two[0].lease(), kT0);
  const std::string rule =
      " (storage_plugin.h conveyor_ready_key.ready: \"min(ready jobs, count_limit)\")";
  using Counts = std::map<std::string, int64_t>;
  EXPECT_EQ(counts_of(h->ready_keys("default", std::nullopt, 10, 100, kT0)),
            (Counts{{"a", 5}, {"b", 1}}))
      << "ready jobs only: not scheduled, running or completed ones" << rule;
  EXPECT_EQ(counts_of(h->ready_keys("default", std::nullopt, 10, 3, kT0)),
            (Counts{{"a", 3}, {"b", 1}}))
      << "count_limit 3" << rule;
  EXPECT_EQ(counts_of(h->ready_keys("default", std::nullopt, 10, 1, kT0)),
            (Counts{{"a", 1}, {"b", 1}}))
      << "count_limit 1" << rule;
  EXPECT_EQ(counts_of(h->ready_keys("default", std::nullopt, 10, 100, kT0 + kSecond)),
            (Counts{{"a", 7}, {"b", 1}}))
      << "the scheduled jobs once due" << rule;
}

TEST_F(ListReadyKeys, PagesByKeysetAfterKey) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  CONFORMANCE_REQUIRE_SLOT(h, list_ready_keys);
  const std::vector<std::string> all = {"", "k0", "k1", "k2", "k3", "k4", "k5"};
  for (auto it = all.rbegin(); it != all.rend(); ++it) h->add_keyed({JobSpec{.key = *it}});
  using Keys = std::vector<std::string>;
  const std::string rule =
      " (storage_plugin.h list_ready_keys: \"those after *after_key only "
      "(after_key NULL: from the first key), at most limit of them\")";
  EXPECT_EQ(keys_of(h->ready_keys("default", std::nullopt, 3, 10, kT0)), (Keys{"", "k0", "k1"}))
      << "first page" << rule;
  EXPECT_EQ(keys_of(h->ready_keys("default", "k1", 3, 10, kT0)), (Keys{"k2", "k3", "k4"}))
      << "the page after k1" << rule;
  EXPECT_EQ(keys_of(h->ready_keys("default", "k4", 3, 10, kT0)), (Keys{"k5"}))
      << "the last page: fewer than limit" << rule;
  EXPECT_EQ(keys_of(h->ready_keys("default", "k5", 3, 10, kT0)), Keys{})
      << "after the last key" << rule;
  EXPECT_EQ(keys_of(h->ready_keys("default", std::string(""), 3, 10, kT0)),
            (Keys{"k0", "k1", "k2"}))
      << "after the empty key (not NULL): the empty key itself is not listed again" << rule;
  EXPECT_EQ(keys_of(h->ready_keys("default", "k2x", 2, 10, kT0)), (Keys{"k3", "k4"}))
      << "after a key that has no jobs: the keys after it bytewise" << rule;
  EXPECT_EQ(keys_of(h->ready_keys("default", std::nullopt, 1, 10, kT0)), Keys{""})
      << "limit 1" << rule;
}

TEST_F(ListReadyKeys, OnlyTheNamedQueue) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  CONFORMANCE_REQUIRE_SLOT(h, list_ready_keys);
  h->add_keyed({JobSpec{.queue = "q1", .key = "a"}, JobSpec{.queue = "q2", .key = "b"},
                JobSpec{.queue = "q2", .key = "a"}});
  EXPECT_EQ(counts_of(h->ready_keys("q1", std::nullopt, 10, 10, kT0)),
            (std::map<std::string, int64_t>{{"a", 1}}))
      << "list_ready_keys lists the keys \"of one queue\"";
  EXPECT_TRUE(h->ready_keys("nowhere", std::nullopt, 10, 10, kT0).empty())
      << "storage_plugin.h list_ready_keys: \"An unknown queue lists nothing (OK)\"";
}

TEST_F(ListReadyKeys, InvalidArgumentsListNothing) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v4);
  CONFORMANCE_REQUIRE_SLOT(h, list_ready_keys);
  h->add_keyed({JobSpec{.key = "a"}});
  const std::string rule =
      " (storage_plugin.h list_ready_keys: CONVEYOR_E_INVALID, nothing reported)";
  struct Case {
    const char* what;
    std::string queue;
    std::optional<std::string> after;
    uint32_t limit;
    uint32_t count_limit;
  };
  for (const Case& c :
       {Case{"an empty queue name", "", std::nullopt, 10, 10},
        Case{"limit 0", "default", std::nullopt, 0, 10},
        Case{"limit above CONVEYOR_LIST_JOBS_MAX", "default", std::nullopt,
             CONVEYOR_LIST_JOBS_MAX + 1, 10},
        Case{"count_limit 0", "default", std::nullopt, 10, 0},
        Case{"after_key longer than CONVEYOR_JOB_KEY_MAX", "default", too_long_key(), 10, 10}}) {
    std::vector<ReadyKeyCopy> got;
    Status s = h->list_ready_keys(c.queue, c.after, c.limit, c.count_limit, kT0, &got);
    EXPECT_STATUS(s.code, CONVEYOR_E_INVALID) << c.what << rule;
    EXPECT_TRUE(got.empty()) << c.what << ": keys reported by a refused call" << rule;
  }
  EXPECT_EQ(h->ready_keys("default", std::nullopt, CONVEYOR_LIST_JOBS_MAX, UINT32_MAX, kT0).size(),
            1u)
      << "limit CONVEYOR_LIST_JOBS_MAX and any count_limit >= 1 are valid";
  // NULL callback or count, through the table itself.
  uint32_t n = 0;
  int calls = 0;
  auto count = [](void* ctx, const conveyor_ready_key*) { ++*static_cast<int*>(ctx); };
  for (bool null_callback : {true, false}) {
    conveyor_error err = poisoned_error();
    const char* what = null_callback ? "on_key NULL" : "out_listed NULL";
    const conveyor_status code = table().list_ready_keys(
        h->raw(), cstr("default"), nullptr, 10, 10, kT0, null_callback ? nullptr : +count, &calls,
        null_callback ? &n : nullptr, &err);
    EXPECT_STATUS(code, CONVEYOR_E_INVALID) << what << rule;
    if (code != CONVEYOR_OK)
      if (std::string problems = check_error(code, err); !problems.empty())
        ADD_FAILURE() << what << ": " << problems;
  }
  EXPECT_EQ(calls, 0) << "a refused list_ready_keys called on_key";
}

}  // namespace
}  // namespace conveyor::conformance
