// KeyTurns: fair turns between keys, per-key limits, bounded state. Time is
// a fake clock; storage is a map of each key's ready jobs, claimed from as
// claim_keys would.
#include "key_turns.hpp"

#include "fleet_bucket.hpp"
#include "maintenance_steps.hpp"
#include "testing/fault_injecting_storage.hpp"

#include <conveyor/host/plugin_loader.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace conveyor {
namespace {

using namespace std::chrono_literals;

// The queue's ready jobs per key, as storage holds them.
class FakeKeys {
 public:
  std::map<std::string, int64_t> ready;
  int listings = 0;

  KeyTurns::ListPage lister() {
    return [this](const std::optional<std::string>& after, uint32_t limit, uint32_t count_limit) {
      ++listings;
      std::vector<Storage::ReadyKey> page;
      for (auto it = after ? ready.upper_bound(*after) : ready.begin();
           it != ready.end() && page.size() < limit; ++it)
        if (it->second > 0) page.push_back({it->first, std::min<int64_t>(it->second, count_limit)});
      return page;
    };
  }

  // claim_keys: up to each key's share of its ready jobs.
  std::vector<Job> claim(const std::vector<Storage::KeyClaim>& asked) {
    std::vector<Job> jobs;
    for (const Storage::KeyClaim& a : asked) {
      int64_t& n = ready[a.key];
      for (uint32_t i = 0; i < a.max_jobs && n > 0; ++i, --n) {
        Job j;
        j.id = ++next_id_;
        j.key = a.key;
        jobs.push_back(j);
      }
    }
    return jobs;
  }

 private:
  int64_t next_id_ = 0;
};

// One claim of a keyed unit: allocate, claim, record; jobs finish at once
// unless keep_running.
std::vector<Job> claim_once(KeyTurns& turns, FakeKeys& storage, uint32_t permits, SteadyTime now,
                            bool keep_running = false) {
  const std::vector<Storage::KeyClaim> asked = turns.allocate(permits, now, storage.lister());
  std::vector<Job> jobs = storage.claim(asked);
  turns.claimed(asked, jobs, now);
  turns.started(jobs);
  if (!keep_running)
    for (const Job& j : jobs) turns.finished(j.id);
  return jobs;
}

TEST(KeyTurns, ABigBacklogDoesNotDelaySmallKeysByMoreThanARound) {
  // The noisy neighbour: key "a" has 100,000 ready jobs, 100 other keys 5
  // each. With 20 permits per claim, a round (one job for each of the 101
  // keys) takes ceil(101 / 20) = 6 claims: every small key gets its first
  // job within the first 6 claims and all 5 of its jobs within 5 rounds
  // (30 claims), while FIFO would serve "a" for 5,000 claims first.
  FakeKeys storage;
  storage.ready["a"] = 100000;
  for (int k = 0; k < 100; ++k) storage.ready["k" + std::to_string(100 + k)] = 5;
  KeyTurns turns({});
  ManualClock clock;
  std::map<std::string, int> first_claim, last_claim;
  int a_jobs = 0;
  for (int claim = 1; claim <= 40; ++claim) {
    for (const Job& j : claim_once(turns, storage, 20, clock.steady_now())) {
      if (j.key == "a") {
        ++a_jobs;
        continue;
      }
      first_claim.try_emplace(j.key, claim);
      last_claim[j.key] = claim;
    }
  }
  ASSERT_EQ(first_claim.size(), 100u);
  for (const auto& [key, claim] : first_claim) EXPECT_LE(claim, 6) << key;
  for (const auto& [key, claim] : last_claim) EXPECT_LE(claim, 30) << key;
  for (int k = 0; k < 100; ++k) EXPECT_EQ(storage.ready["k" + std::to_string(100 + k)], 0);
  // "a" got one job per round while others waited, and every permit once
  // they were done: 40 claims * 20 permits, less the small keys' 500.
  EXPECT_EQ(a_jobs, 40 * 20 - 500);
}

TEST(KeyTurns, ANewlyReadyKeyWaitsAtMostOneRoundAfterItIsListed) {
  // The bound docs/design/keys.md states: once listed, a key is served
  // before any other key gets a second job, i.e. within ceil(K / permits)
  // claims with K ready keys.
  FakeKeys storage;
  for (int k = 0; k < 50; ++k) storage.ready["busy" + std::to_string(10 + k)] = 1000;
  KeyTurns turns({});
  ManualClock clock;
  for (int i = 0; i < 7; ++i) claim_once(turns, storage, 8, clock.steady_now());
  storage.ready["new"] = 1;
  turns.mark_stale();  // a wake: the enqueue of "new"
  const int bound = (51 + 8 - 1) / 8;
  int waited = 0;
  bool served = false;
  while (!served && waited < bound + 1) {
    ++waited;
    for (const Job& j : claim_once(turns, storage, 8, clock.steady_now()))
      served = served || j.key == "new";
  }
  EXPECT_TRUE(served);
  EXPECT_LE(waited, bound);
}

TEST(KeyTurns, WithoutAWakeANewKeyIsFoundAtTheNextRelisting) {
  FakeKeys storage;
  storage.ready["a"] = 1000;
  KeyTurns turns({});
  ManualClock clock;
  claim_once(turns, storage, 4, clock.steady_now());
  storage.ready["b"] = 1;  // another process enqueued it; no wake here
  const int listings = storage.listings;
  claim_once(turns, storage, 4, clock.steady_now());
  EXPECT_EQ(storage.listings, listings) << "no relisting while known keys have work";
  clock.advance(KeyTurns::kRelistEvery);
  std::set<std::string> keys;
  for (const Job& j : claim_once(turns, storage, 4, clock.steady_now())) keys.insert(j.key);
  EXPECT_TRUE(keys.count("b"));
}

TEST(KeyTurns, EachKeysBucketHoldsItsRateAndTheKeysShareNothing) {
  // 2/s, burst 1, for each of 10 keys with plenty of work, claimed every
  // 10 ms for 10 s: each key starts at most burst + rate * t jobs by every
  // time t, and about 2 per second in all.
  FakeKeys storage;
  for (int k = 0; k < 10; ++k) storage.ready["key" + std::to_string(k)] = 1000;
  KeyTurns turns({.rate = RateLimit{2.0, 1}, .workers = std::nullopt});
  ManualClock clock;
  const SteadyTime start = clock.steady_now();
  std::map<std::string, int> started;
  for (int tick = 0; tick <= 1000; ++tick) {
    for (const Job& j : claim_once(turns, storage, 100, clock.steady_now())) {
      const double t = std::chrono::duration<double>(clock.steady_now() - start).count();
      const int n = ++started[j.key];
      EXPECT_LE(n, 1 + 2.0 * t + 1e-9) << j.key << " at " << t << " s";
    }
    clock.advance(10ms);
  }
  for (const auto& [key, n] : started) EXPECT_GE(n, 20) << key;  // 1 + 2/s * 10 s = 21
  EXPECT_EQ(started.size(), 10u);
}

TEST(KeyTurns, AThrottledKeySaysWhenItHasATokenAndOthersStillRun) {
  FakeKeys storage;
  storage.ready["slow"] = 100;
  storage.ready["other"] = 100;
  KeyTurns turns({.rate = RateLimit{1.0, 1}, .workers = std::nullopt});
  ManualClock clock;
  const SteadyTime now = clock.steady_now();
  const std::vector<Job> first = claim_once(turns, storage, 10, now);
  EXPECT_EQ(first.size(), 2u);  // one token each
  EXPECT_TRUE(claim_once(turns, storage, 10, now).empty());
  const KeyTurns::Blocked b = turns.blocked();
  ASSERT_TRUE(b.tokens_at.has_value());
  EXPECT_EQ(*b.tokens_at, now + 1s);
  EXPECT_FALSE(b.by_workers);
}

TEST(KeyTurns, KeyMaxWorkersCapsRunningJobsPerKeyUntilTheyFinish) {
  FakeKeys storage;
  storage.ready["a"] = 100;
  storage.ready["b"] = 100;
  KeyTurns turns({.rate = std::nullopt, .workers = 3});
  ManualClock clock;
  const std::vector<Job> running = claim_once(turns, storage, 50, clock.steady_now(), true);
  ASSERT_EQ(running.size(), 6u);
  EXPECT_TRUE(claim_once(turns, storage, 50, clock.steady_now(), true).empty());
  EXPECT_TRUE(turns.blocked().by_workers);
  turns.finished(running.front().id);
  const std::vector<Job> next = claim_once(turns, storage, 50, clock.steady_now(), true);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next.front().key, running.front().key);
}

TEST(KeyTurns, TheEmptyKeyIsAKeyLikeAnyOther) {
  FakeKeys storage;
  storage.ready[""] = 1000;
  storage.ready["tenant"] = 2;
  KeyTurns turns({});
  ManualClock clock;
  std::map<std::string, int> got;
  for (const Job& j : claim_once(turns, storage, 2, clock.steady_now())) ++got[j.key];
  EXPECT_EQ(got[""], 1);
  EXPECT_EQ(got["tenant"], 1);
}

TEST(KeyTurns, KeysWithNothingLeftAreForgottenOnceTheirBucketsAreFull) {
  FakeKeys storage;
  for (int k = 0; k < 1000; ++k) storage.ready["key" + std::to_string(k)] = 1;
  KeyTurns turns({.rate = RateLimit{10.0, 1}, .workers = std::nullopt});
  ManualClock clock;
  while (claim_once(turns, storage, 100, clock.steady_now()).size() > 0) {
  }
  // Drained, but each bucket spent its token: remembered until refilled.
  EXPECT_GT(turns.remembered(), 0u);
  clock.advance(200ms);
  EXPECT_TRUE(claim_once(turns, storage, 100, clock.steady_now()).empty());
  EXPECT_EQ(turns.remembered(), 0u);
  EXPECT_GT(KeyTurns::bytes_per_key(), 0u);
}

TEST(KeyTurns, AFailedClaimGivesTheTokensBackAndListsAgain) {
  FakeKeys storage;
  storage.ready["a"] = 10;
  KeyTurns turns({.rate = RateLimit{1.0, 5}, .workers = std::nullopt});
  ManualClock clock;
  const SteadyTime now = clock.steady_now();
  const std::vector<Storage::KeyClaim> asked = turns.allocate(5, now, storage.lister());
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked.front().max_jobs, 5u);
  turns.claimed(asked, {}, now, /*failed=*/true);
  const int listings = storage.listings;
  EXPECT_EQ(claim_once(turns, storage, 5, now).size(), 5u);  // all five tokens are back
  EXPECT_GT(storage.listings, listings);                     // the keys are read again
}

TEST(KeyTurns, KeysBeyondAFullPageAreReadAtOnceNotAtThePoll) {
  // 1,001 keys with a job each: the first listing is a full page of 1,000;
  // a claim with permits to spare says so (the unit comes back at once) and
  // the next reads the rest.
  FakeKeys storage;
  for (int k = 0; k < 1001; ++k) storage.ready["key" + std::to_string(10000 + k)] = 1;
  KeyTurns turns({});
  ManualClock clock;
  EXPECT_EQ(claim_once(turns, storage, 2000, clock.steady_now()).size(), 1000u);
  EXPECT_TRUE(turns.blocked().more_keys);
  EXPECT_EQ(claim_once(turns, storage, 2000, clock.steady_now()).size(), 1u);
  EXPECT_FALSE(turns.blocked().more_keys);
}

TEST(KeyTurns, AClaimThatSpendsAKeysLastTokenSaysWhenItHasTheNext) {
  // Fewer keys than permits: the claim that empties the buckets must name
  // the next token's time, or the unit would wait for its poll.
  FakeKeys storage;
  storage.ready["a"] = 100;
  storage.ready["b"] = 100;
  KeyTurns turns({.rate = RateLimit{4.0, 1}, .workers = std::nullopt});
  ManualClock clock;
  const SteadyTime now = clock.steady_now();
  EXPECT_EQ(claim_once(turns, storage, 50, now).size(), 2u);
  const KeyTurns::Blocked b = turns.blocked();
  ASSERT_TRUE(b.tokens_at.has_value());
  EXPECT_EQ(*b.tokens_at, now + 250ms);
}

TEST(KeyTurns, AWakeWhileTheKeysAreReadIsNotLost) {
  FakeKeys storage;
  storage.ready["a"] = 1000;
  KeyTurns turns({});
  ManualClock clock;
  const KeyTurns::ListPage list = storage.lister();
  bool woke = false;
  const KeyTurns::ListPage waking = [&](const std::optional<std::string>& after, uint32_t limit,
                                        uint32_t count_limit) {
    std::vector<Storage::ReadyKey> page = list(after, limit, count_limit);
    if (!woke) {
      woke = true;
      storage.ready["late"] = 1;  // enqueued after the read, and its wake comes now
      turns.mark_stale();
    }
    return page;
  };
  const auto asked = turns.allocate(4, clock.steady_now(), waking);
  turns.claimed(asked, storage.claim(asked), clock.steady_now());
  std::set<std::string> keys;
  for (const Job& j : claim_once(turns, storage, 4, clock.steady_now())) keys.insert(j.key);
  EXPECT_TRUE(keys.count("late")) << "the wake during the listing was dropped";
}

// ---- weights, run-time settings, the kill switch ----

std::shared_ptr<const LimitResolver::KeyOverrides> overrides(
    std::optional<RateLimit> every_key, std::map<std::string, RateLimit, std::less<>> limits,
    std::map<std::string, uint32_t, std::less<>> weights = {}) {
  auto o = std::make_shared<LimitResolver::KeyOverrides>();
  o->every_key = every_key;
  o->limits = std::move(limits);
  o->weights = std::move(weights);
  return o;
}

TEST(KeyTurns, AKeyOfWeightThreeGetsThreeJobsARoundToAnothersOne) {
  FakeKeys storage;
  storage.ready["heavy"] = 100000;
  storage.ready["light"] = 100000;
  storage.ready["plain"] = 100000;
  KeyTurns turns({});
  turns.set_overrides(overrides(std::nullopt, {}, {{"heavy", 3}}), true);
  ManualClock clock;
  std::map<std::string, int> started;
  // 5 permits a claim, exactly one round (3 + 1 + 1) each time.
  for (int i = 0; i < 200; ++i)
    for (const Job& j : claim_once(turns, storage, 5, clock.steady_now())) ++started[j.key];
  EXPECT_EQ(started["heavy"], 600);
  EXPECT_EQ(started["light"], 200);
  EXPECT_EQ(started["plain"], 200);
  EXPECT_EQ(turns.limit_of("heavy").weight, 3u);
  EXPECT_EQ(turns.limit_of("light").weight, 1u);
}

TEST(KeyTurns, WeightsShareTheRoundsWhenPermitsAreFewer) {
  // 2 permits a claim, weights 3 and 1: over many claims the split is still
  // 3 : 1 (the turn goes on from where the last claim stopped).
  FakeKeys storage;
  storage.ready["a"] = 100000;
  storage.ready["b"] = 100000;
  KeyTurns turns({});
  turns.set_overrides(overrides(std::nullopt, {}, {{"a", 3}}), true);
  ManualClock clock;
  std::map<std::string, int> started;
  for (int i = 0; i < 400; ++i)
    for (const Job& j : claim_once(turns, storage, 2, clock.steady_now())) ++started[j.key];
  EXPECT_EQ(started["a"] + started["b"], 800);
  EXPECT_NEAR(static_cast<double>(started["a"]) / started["b"], 3.0, 0.1);
}

TEST(KeyTurns, AKeysOwnLimitBeatsEveryKeysWhichBeatsTheConfig) {
  FakeKeys storage;
  storage.ready["vip"] = 1000;
  storage.ready["other"] = 1000;
  KeyTurns turns({.rate = RateLimit{2.0, 2}, .workers = std::nullopt});
  ManualClock clock;
  std::map<std::string, int> started;
  for (const Job& j : claim_once(turns, storage, 100, clock.steady_now())) ++started[j.key];
  EXPECT_EQ(started["vip"], 2);  // the config's burst
  EXPECT_EQ(started["other"], 2);
  EXPECT_EQ(turns.limit_of("other").source, LimitSource::kQueueConfig);

  turns.set_overrides(overrides(RateLimit{1.0, 1}, {{"vip", RateLimit{100.0, 50}}}), true);
  claim_once(turns, storage, 100, clock.steady_now());  // buckets take their new shapes
  clock.advance(10s);                                   // and fill up
  started.clear();
  for (const Job& j : claim_once(turns, storage, 100, clock.steady_now())) ++started[j.key];
  EXPECT_EQ(started["vip"], 50);   // its own burst
  EXPECT_EQ(started["other"], 1);  // every key's: burst 1
  EXPECT_EQ(turns.limit_of("vip").source, LimitSource::kOverride);
  EXPECT_EQ(turns.limit_of("other").source, LimitSource::kEveryKeyOverride);
  EXPECT_EQ(turns.limit_of("other").limit, (RateLimit{1.0, 1}));

  // Removed again: the config's limit applies to both (a bucket keeps its
  // tokens through a change, so the larger burst fills up first).
  turns.set_overrides(overrides(std::nullopt, {}), true);
  claim_once(turns, storage, 100, clock.steady_now());
  clock.advance(10s);
  started.clear();
  for (const Job& j : claim_once(turns, storage, 100, clock.steady_now())) ++started[j.key];
  EXPECT_EQ(started["vip"], 2);
  EXPECT_EQ(started["other"], 2);
  EXPECT_EQ(turns.limit_of("vip").source, LimitSource::kQueueConfig);
}

TEST(KeyTurns, TheKillSwitchLiftsEveryKeysLimitButNotItsWeight) {
  FakeKeys storage;
  storage.ready["a"] = 1000;
  storage.ready["b"] = 1000;
  KeyTurns turns({.rate = RateLimit{1.0, 1}, .workers = std::nullopt});
  turns.set_overrides(overrides(std::nullopt, {{"a", RateLimit{1.0, 1}}}, {{"a", 2}}), false);
  ManualClock clock;
  std::map<std::string, int> started;
  for (const Job& j : claim_once(turns, storage, 30, clock.steady_now())) ++started[j.key];
  EXPECT_EQ(started["a"], 20);  // unlimited, two a round
  EXPECT_EQ(started["b"], 10);
  EXPECT_EQ(turns.limit_of("a").source, LimitSource::kDisabled);
  EXPECT_FALSE(turns.limit_of("a").limit.has_value());
  turns.set_overrides(overrides(std::nullopt, {{"a", RateLimit{1.0, 1}}}, {{"a", 2}}), true);
  clock.advance(5s);
  started.clear();
  for (const Job& j : claim_once(turns, storage, 30, clock.steady_now())) ++started[j.key];
  EXPECT_EQ(started["a"], 1);
  EXPECT_EQ(started["b"], 1);
}

// ---- scope fleet: a bucket per key shared by every process ----

class KeyTurnsFleet : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("conveyor-key-turns-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    stores_.clear();
    std::filesystem::remove_all(dir_);
  }
  // A new handle on one SQLite file: one more "process".
  testing::FaultInjectingStorage& process() {
    static const auto plugin =
        load_plugin(std::filesystem::path(CONVEYOR_TEST_PLUGIN_DIR) / "libconveyor-sqlite.so");
    auto store = std::make_shared<testing::FaultInjectingStorage>(
        Storage::open(plugin, {{"path", (dir_ / "keys.db").string()}}));
    stores_.push_back(store);
    return *store;
  }
  KeyTurns::Fleet fleet(Storage& storage) {
    return KeyTurns::Fleet{&storage, &clock_, &counters_, "q"};
  }

  std::filesystem::path dir_;
  std::vector<std::shared_ptr<testing::FaultInjectingStorage>> stores_;
  ManualClock clock_;
  QueueCounters counters_;
};

TEST_F(KeyTurnsFleet, ThreeProcessesHoldEachKeyToItsRateTogether) {
  // key_rate_limit 5/s burst 1, scope fleet, three processes claiming from
  // one backlog of 4 keys every 10 ms for 10 s: from every start, no key
  // ever above burst + rate * t across the three, and each near 5/s.
  const RateLimit limit{5.0, 1, LimitScope::kFleet};
  FakeKeys shared;
  for (int k = 0; k < 4; ++k) shared.ready["tenant" + std::to_string(k)] = 100000;
  std::vector<std::unique_ptr<KeyTurns>> processes;
  for (int p = 0; p < 3; ++p)
    processes.push_back(std::make_unique<KeyTurns>(
        KeyTurns::Limits{.rate = limit, .workers = std::nullopt}, nullptr, fleet(process())));
  const SteadyTime start = clock_.steady_now();
  std::map<std::string, int> started;
  for (int tick = 0; tick <= 1000; ++tick) {
    for (auto& turns : processes)
      for (const Job& j : claim_once(*turns, shared, 20, clock_.steady_now())) {
        const double t = std::chrono::duration<double>(clock_.steady_now() - start).count();
        const int n = ++started[j.key];
        EXPECT_LE(n, 1 + 5.0 * t + 1e-6) << j.key << " at " << t << " s";
      }
    clock_.advance(10ms);
  }
  ASSERT_EQ(started.size(), 4u);
  for (const auto& [key, n] : started) EXPECT_GE(n, 50) << key;  // 1 + 5/s * 10 s = 51
  // Every claim's takes, however many keys it served, were one call.
  for (const auto& store : stores_) {
    EXPECT_LE(store->calls(testing::StorageOp::kAddSharedStates), 1001u);
    EXPECT_GT(store->calls(testing::StorageOp::kAddSharedStates), 0u);
    EXPECT_EQ(store->calls(testing::StorageOp::kAddSharedState), 0u);
  }
  // The record is the key's own, in shared storage.
  EXPECT_GT(stores_.front()->swap_shared_state(FleetBucket::key_for("q", "tenant0"), -1, 0).version,
            0);
}

TEST_F(KeyTurnsFleet, RecordsOfKeysFullForAMinuteAreDeleted) {
  Storage& storage = process();
  if (!storage.has_slot(StorageSlot::kDeleteSharedStates))
    GTEST_SKIP() << "the SQLite plugin has no delete_shared_states yet";
  FakeKeys keys;
  for (int k = 0; k < 3; ++k) keys.ready["k" + std::to_string(k)] = 1;
  KeyTurns turns({.rate = RateLimit{1.0, 1, LimitScope::kFleet}, .workers = std::nullopt}, nullptr,
                 fleet(storage));
  EXPECT_EQ(claim_once(turns, keys, 10, clock_.steady_now()).size(), 3u);
  const std::string record = FleetBucket::key_for("q", "k0");
  EXPECT_GT(storage.swap_shared_state(record, -1, 0).version, 0);
  // Full again after 1 s, but not yet for a minute: kept.
  clock_.advance(30s);
  EXPECT_EQ(forget_idle_key_buckets(storage, clock_), 0u);
  clock_.advance(kIdleKeyBucketAge);
  EXPECT_EQ(forget_idle_key_buckets(storage, clock_), 3u);
  EXPECT_EQ(storage.swap_shared_state(record, -1, 0).version, 0);
  // A queue's own fleet bucket is not a key's: untouched.
  storage.swap_shared_state(FleetBucket::key_for("q"), 0, 1);
  clock_.advance(kIdleKeyBucketAge * 2);
  EXPECT_EQ(forget_idle_key_buckets(storage, clock_), 0u);
}

TEST(FleetBucketKeys, AKeysRecordNamesItsQueueAndKeyOrAHashWhenLong) {
  EXPECT_EQ(FleetBucket::key_for("mail", "acme"), "ratelimit.key:mail/=acme");
  EXPECT_EQ(FleetBucket::key_for("mail", ""), "ratelimit.key:mail/=");
  const std::string long_key(200, 'x');
  const std::string hashed = FleetBucket::key_for("mail", long_key);
  EXPECT_EQ(hashed.rfind("ratelimit.key:mail/#", 0), 0u);
  EXPECT_EQ(hashed.size(), std::string("ratelimit.key:mail/#").size() + 40);
  EXPECT_LE(FleetBucket::key_for(std::string(128, 'q'), long_key).size(),
            size_t{CONVEYOR_SHARED_KEY_MAX});
  EXPECT_NE(hashed, FleetBucket::key_for("mail", long_key + "y"));
}

TEST(KeyTurns, AKindFilteredClaimThatComesBackShortListsTheKeysAgain) {
  // The unit's local handlers claim only their kinds: a key that gave them
  // nothing may still have jobs for a remote worker's kinds, so it must not
  // stay "drained" until the next relisting a second away.
  FakeKeys storage;
  storage.ready["a"] = 3;
  KeyTurns turns({});
  ManualClock clock;
  const SteadyTime now = clock.steady_now();
  std::vector<Storage::KeyClaim> asked = turns.allocate(5, now, storage.lister());
  ASSERT_EQ(asked.size(), 1u);
  turns.claimed(asked, {}, now, /*failed=*/false, /*filtered=*/true);  // none of its kinds
  const int listings = storage.listings;
  asked = turns.allocate(5, now, storage.lister());
  EXPECT_EQ(storage.listings, listings + 1);
  ASSERT_EQ(asked.size(), 1u) << "the key's jobs of other kinds were forgotten";
  EXPECT_EQ(asked.front().key, "a");
}

}  // namespace
}  // namespace conveyor
