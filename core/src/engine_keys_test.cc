// Job keys through the whole engine (issue 36): fair turns between keys,
// key_from, key_max_workers, key_rate_limit, and fairness = "fifo", on the
// in-memory example plugin (ABI 1.4, loaded through the real loader). Real
// time with generous bounds: these check order and counts, not speed.
#include <conveyor/internal/engine_internals.hpp>
#include "testing/fault_injecting_storage.hpp"
#include "testing/sync.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::FaultInjectingStorage;
using testing::StorageOp;

class EngineKeysTest : public ::testing::Test {
 protected:
  EngineKeysTest() {
    config.engine.poll_interval_ms = 20;
    config.engine.shutdown_timeout_ms = 500;
  }
  std::unique_ptr<Engine> make() {
    return EngineInternals::make(config, SystemClock::instance(), storage);
  }
  // Enqueues n jobs of kind "k" with key into queue "q".
  void enqueue(Engine& e, const std::string& key, int n) {
    std::vector<NewJob> jobs(n);
    for (NewJob& j : jobs) {
      j.queue = "q";
      j.kind = "k";
      j.key = key;
    }
    e.enqueue_batch(std::move(jobs));
  }
  // Runs the queue one job at a time and returns the keys in start order.
  std::vector<std::string> start_order(Engine& e, size_t total) {
    std::mutex mu;
    std::vector<std::string> order;
    e.register_handler("k", [&](const Job& j) {
      std::lock_guard lock(mu);
      order.push_back(j.key);
    });
    e.start();
    EXPECT_TRUE(eventually([&] {
      std::lock_guard lock(mu);
      return order.size() == total;
    }));
    e.stop();
    std::lock_guard lock(mu);
    return order;
  }

  std::shared_ptr<FaultInjectingStorage> storage =
      std::make_shared<FaultInjectingStorage>(testing::open_memory_storage());
  Config config;
};

// Where each small key's last job started, in start order (1-based).
std::map<std::string, size_t> last_start(const std::vector<std::string>& order) {
  std::map<std::string, size_t> last;
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] != "big") last[order[i]] = i + 1;
  return last;
}

TEST_F(EngineKeysTest, ABacklogOfOneKeyDoesNotHoldUpTheOthers) {
  config.queues["q"].max_workers = 1;  // one job at a time: the order is the schedule
  auto engine = make();
  enqueue(*engine, "big", 60);
  for (const char* key : {"s1", "s2", "s3"}) enqueue(*engine, key, 3);
  const std::vector<std::string> order = start_order(*engine, 69);
  // Four ready keys take turns: each small key's three jobs are done within
  // three rounds of four, where claim order would put them after all 60.
  for (const auto& [key, at] : last_start(order)) EXPECT_LE(at, 12u) << key;
  EXPECT_EQ(order.size(), 69u);
  EXPECT_GE(storage->calls(StorageOp::kClaimKeys), 1u);
  EXPECT_EQ(storage->calls(StorageOp::kClaim), 0u);
}

TEST_F(EngineKeysTest, FifoClaimsAcrossKeysInClaimOrder) {
  config.queues["q"].max_workers = 1;
  config.queues["q"].fairness = Fairness::kFifo;
  auto engine = make();
  enqueue(*engine, "big", 60);
  for (const char* key : {"s1", "s2", "s3"}) enqueue(*engine, key, 3);
  const std::vector<std::string> order = start_order(*engine, 69);
  for (size_t i = 0; i < 60; ++i) EXPECT_EQ(order[i], "big") << i;
  EXPECT_EQ(storage->calls(StorageOp::kClaimKeys), 0u);
  EXPECT_EQ(storage->calls(StorageOp::kListReadyKeys), 0u);
}

TEST_F(EngineKeysTest, KeyFromTakesTheKeyFromThePayload) {
  config.queues["q"].key_from = "/tenant/id";
  auto engine = make();
  const int64_t acme = engine->enqueue("q", "k", R"({"tenant":{"id":"acme"}})");
  const int64_t number = engine->enqueue("q", "k", R"({"tenant":{"id":42}})");
  const int64_t missing = engine->enqueue("q", "k", R"({"other":1})");
  EnqueueOptions explicit_key;
  explicit_key.key = "given";
  const int64_t given = engine->enqueue("q", "k", R"({"tenant":{"id":"acme"}})", explicit_key);
  EXPECT_EQ(engine->get_job(acme)->key, "acme");
  EXPECT_EQ(engine->get_job(number)->key, "42");
  EXPECT_EQ(engine->get_job(missing)->key, "");
  EXPECT_EQ(engine->get_job(given)->key, "given");  // a key given wins
}

TEST_F(EngineKeysTest, BadKeysAreRefusedAndNothingIsEnqueued) {
  auto engine = make();
  EnqueueOptions o;
  o.key = std::string(kMaxJobKeyBytes + 1, 'x');
  EXPECT_THROW(engine->enqueue("q", "k", "{}", o), ValidationError);
  o.key = "\xff";
  try {
    engine->enqueue("q", "k", "{}", o);
    FAIL() << "invalid UTF-8 accepted";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "key");
  }
  EXPECT_EQ(storage->calls(StorageOp::kEnqueue), 0u);
}

TEST_F(EngineKeysTest, KeyMaxWorkersCapsEachKeyAndLetsOthersUseTheRest) {
  config.queues["q"].max_workers = 6;
  config.queues["q"].key_max_workers = 2;
  auto engine = make();
  std::mutex mu;
  std::map<std::string, int> running, most;
  int total = 0, done = 0;
  engine->register_handler("k", [&](const Job& j) {
    {
      std::lock_guard lock(mu);
      most[j.key] = std::max(most[j.key], ++running[j.key]);
    }
    std::this_thread::sleep_for(20ms);  // the job's work: overlap is the point
    std::lock_guard lock(mu);
    --running[j.key];
    ++done;
  });
  enqueue(*engine, "a", 10);
  enqueue(*engine, "b", 10);
  enqueue(*engine, "c", 10);
  total = 30;
  engine->start();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mu);
    return done == total;
  }));
  engine->stop();
  for (const char* key : {"a", "b", "c"}) {
    EXPECT_LE(most[key], 2) << key;
    EXPECT_GE(most[key], 1) << key;
  }
}

TEST_F(EngineKeysTest, KeyRateLimitHoldsEachKeyToItsBucket) {
  config.queues["q"].max_workers = 20;
  config.queues["q"].key_rate_limit = RateLimit{20.0, 2};
  auto engine = make();
  std::mutex mu;
  std::map<std::string, std::vector<std::chrono::steady_clock::time_point>> starts;
  engine->register_handler("k", [&](const Job& j) {
    std::lock_guard lock(mu);
    starts[j.key].push_back(std::chrono::steady_clock::now());
  });
  for (const char* key : {"a", "b", "c"}) enqueue(*engine, key, 12);
  const auto begin = std::chrono::steady_clock::now();
  engine->start();
  ASSERT_TRUE(eventually(
      [&] {
        std::lock_guard lock(mu);
        return starts["a"].size() + starts["b"].size() + starts["c"].size() == 36;
      },
      10s));
  engine->stop();
  // Each key: at most burst + rate * t by every start (t from the engine's
  // start, which is no later than its bucket's), so 12 jobs take >= 0.5 s;
  // the keys run side by side, so all 36 take about as long as 12.
  for (const auto& [key, times] : starts) {
    for (size_t i = 0; i < times.size(); ++i) {
      const double t = std::chrono::duration<double>(times[i] - begin).count();
      EXPECT_LE(static_cast<double>(i + 1), 2 + 20.0 * t + 1e-6) << key << " job " << i;
    }
  }
  const double all =
      std::chrono::duration<double>(
          std::max({starts["a"].back(), starts["b"].back(), starts["c"].back()}) - begin)
          .count();
  EXPECT_LT(all, 3.0) << "the keys' buckets are separate: 36 jobs at 3 x 20/s";
}

// One job of key "a" is refused with Retry-After 2 s; "b" has 10 jobs.
// Returns the start times (since the refusal) of each key's jobs after it.
std::map<std::string, std::vector<double>> starts_after_a_refusal(Engine& engine) {
  std::mutex mu;
  std::map<std::string, std::vector<double>> after;
  std::optional<std::chrono::steady_clock::time_point> refused;
  int done = 0;
  engine.register_handler("k", [&](const Job& j) {
    std::lock_guard lock(mu);
    const auto now = std::chrono::steady_clock::now();
    if (j.key == "a" && !refused) {
      refused = now;
      throw RetryAfter(2000ms, "429 Too Many Requests");
    }
    if (refused) after[j.key].push_back(std::chrono::duration<double>(now - *refused).count());
    ++done;
  });
  std::vector<NewJob> jobs(13);
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].queue = "q";
    jobs[i].kind = "k";
    jobs[i].key = i < 3 ? "a" : "b";
  }
  engine.enqueue_batch(std::move(jobs));
  engine.start();
  EXPECT_TRUE(eventually(
      [&] {
        std::lock_guard lock(mu);
        return done == 13;
      },
      15s));
  engine.stop();
  std::lock_guard lock(mu);
  return after;
}

TEST_F(EngineKeysTest, ARetryAfterHoldsOnlyTheKeyOfTheJobRefused) {
  config.queues["q"].max_workers = 1;
  auto engine = make();
  auto after = starts_after_a_refusal(*engine);
  ASSERT_EQ(after["a"].size(), 3u);
  ASSERT_FALSE(after["b"].empty());
  for (double t : after["a"]) EXPECT_GE(t, 1.9) << "key a started before its hold ended";
  EXPECT_LT(after["b"].front(), 1.0) << "key b waited for a's hold";
}

TEST_F(EngineKeysTest, HoldQueueMakesARetryAfterHoldTheWholeQueue) {
  config.queues["q"].max_workers = 1;
  HttpTargetConfig http;
  http.url = "http://127.0.0.1:9/";
  http.hold = HttpTargetConfig::Hold::kQueue;
  config.queues["q"].http = http;
  config.http.allow_private = true;
  auto engine = make();
  auto after = starts_after_a_refusal(*engine);
  ASSERT_FALSE(after["b"].empty());
  EXPECT_GE(after["b"].front(), 1.0) << "the queue's hold let key b through";
}

// ---- run-time key settings (ABI 1.5) ----

TEST_F(EngineKeysTest, AWeightOfThreeGivesAKeyThreeTurnsToAnothersOne) {
  config.queues["q"].max_workers = 1;  // one job a claim: the order is the schedule
  auto engine = make();
  engine->set_key_weight("q", "heavy", 3);
  enqueue(*engine, "heavy", 30);
  enqueue(*engine, "light", 10);
  const std::vector<std::string> order = start_order(*engine, 40);
  // Rounds of 3 heavy and 1 light: the first 20 starts hold 15 and 5.
  EXPECT_EQ(std::count(order.begin(), order.begin() + 20, "heavy"), 15);
  EXPECT_EQ(std::count(order.begin(), order.begin() + 20, "light"), 5);
  EXPECT_TRUE(engine->delete_key_weight("q", "heavy"));
  EXPECT_FALSE(engine->delete_key_weight("q", "heavy"));
}

TEST_F(EngineKeysTest, KeySettingsAreRefusedWhereTheyCannotApply) {
  config.queues["f"].fairness = Fairness::kFifo;
  auto engine = make();
  try {
    engine->set_key_rate_limit("f", std::string("a"), RateLimit{1.0, 1});
    ADD_FAILURE() << "a fifo queue took a key's limit";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("fairness = \"fifo\""), std::string::npos) << e.what();
  }
  EXPECT_THROW(engine->set_key_weight("q", "a", 0), ValidationError);
  EXPECT_THROW(engine->set_key_weight("q", "a", kKeyWeightMax + 1), ValidationError);
  EXPECT_THROW(engine->set_key_rate_limit("q", std::string("a"), RateLimit{0.0, 1}),
               ValidationError);
  EXPECT_THROW(engine->set_key_rate_limit("q", std::string(201, 'k'), RateLimit{1.0, 1}),
               ValidationError);
  EXPECT_TRUE(engine->key_overrides().empty()) << "nothing refused was stored";
}

TEST_F(EngineKeysTest, APluginWithoutKeySettingsIsNamedWithItsAbi) {
  storage->hide_slot("set_key_setting");
  auto engine = make();
  try {
    engine->set_key_weight("q", "a", 2);
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    EXPECT_EQ(e.code(), CONVEYOR_E_UNSUPPORTED);
    EXPECT_NE(std::string(e.what()).find("set_key_setting"), std::string::npos) << e.what();
  }
}

TEST_F(EngineKeysTest, ASettingMadeByOneProcessIsFollowedByAnother) {
  // Two engines on one SQLite file stand for two processes.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("conveyor-engine-keys-" + std::to_string(getpid()) + "-shared");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  config.storage.plugin = "sqlite";
  config.storage.plugin_dir = CONVEYOR_TEST_PLUGIN_DIR;
  config.storage.options = {{"path", (dir / "keys.db").string()}};
  config.queues["q"].key_rate_limit = RateLimit{2.0, 2};
  {
    auto a = EngineInternals::make(config, SystemClock::instance(), nullptr);
    auto b = EngineInternals::make(config, SystemClock::instance(), nullptr);
    b->start();
    a->set_key_rate_limit("q", std::string("vip"), RateLimit{50.0, 10});
    a->set_key_rate_limit("q", std::nullopt, RateLimit{1.0, 1, LimitScope::kFleet});
    a->set_key_weight("q", "vip", 4);
    // All three changes (two rows: the weight joins vip's row).
    ASSERT_TRUE(eventually(
        [&] {
          const std::vector<KeyOverride> o = b->key_overrides();
          return o.size() == 2 && o[0].weight.has_value();
        },
        5s));
    const std::vector<KeyOverride> seen = b->key_overrides();
    EXPECT_EQ(seen[0].key, std::optional<std::string>("vip"));
    EXPECT_EQ(seen[0].limit, (std::optional<RateLimit>(RateLimit{50.0, 10})));
    EXPECT_EQ(seen[0].weight, std::optional<uint32_t>(4));
    EXPECT_EQ(seen[1].key, std::nullopt);
    EXPECT_EQ(seen[1].limit->scope, LimitScope::kFleet);

    enqueue(*a, "vip", 1);
    enqueue(*a, "other", 1);
    KeysReport r = b->keys("q");
    for (const KeyReport& k : r.keys) {
      if (k.key == "vip") {
        EXPECT_EQ(k.limit_source, LimitSource::kOverride);
        EXPECT_EQ(k.weight, 4u);
      } else {
        EXPECT_EQ(k.limit_source, LimitSource::kEveryKeyOverride);
        EXPECT_EQ(k.limit, (std::optional<RateLimit>(RateLimit{1.0, 1, LimitScope::kFleet})));
      }
    }
    EXPECT_EQ(r.limit_source, LimitSource::kEveryKeyOverride);

    // Removed: the config's key_rate_limit again, in the other process too.
    EXPECT_TRUE(a->delete_key_rate_limit("q", std::string("vip")));
    EXPECT_FALSE(a->delete_key_rate_limit("q", std::string("vip")));
    EXPECT_TRUE(a->delete_key_rate_limit("q", std::nullopt));
    ASSERT_TRUE(eventually([&] { return b->key_overrides().size() == 1; }, 5s));
    EXPECT_FALSE(b->key_overrides()[0].limit.has_value()) << "the weight stays";
    r = b->keys("q");
    for (const KeyReport& k : r.keys)
      if (k.key != "vip") {
        EXPECT_EQ(k.limit_source, LimitSource::kQueueConfig) << k.key;
      }
    b->stop();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace conveyor
