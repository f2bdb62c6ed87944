#include <conveyor/internal/limit_resolver.hpp>

#include <gtest/gtest.h>

namespace conveyor {
namespace {

EngineConfig engine(bool enabled, double rate, uint32_t burst) {
  EngineConfig e;
  e.rate_limit_enabled = enabled;
  e.rate_limit_rate_per_sec = rate;
  e.rate_limit_burst = burst;
  return e;
}

std::map<std::string, QueueConfig> static_limit(const std::string& queue, RateLimit limit) {
  QueueConfig q;
  q.rate_limit = limit;
  return {{queue, q}};
}

TEST(LimitResolver, NothingConfiguredIsUnlimitedWithSourceNone) {
  LimitResolver r(engine(true, 0, 0), {});
  EXPECT_EQ(r.resolve("email"), (EffectiveLimit{std::nullopt, LimitSource::kNone}));
}

TEST(LimitResolver, GlobalDefaultAppliesToEveryQueueAndAutoBurstIsCeilRate) {
  LimitResolver r(engine(true, 7.5, 0), {});
  EXPECT_EQ(r.resolve("any"), (EffectiveLimit{RateLimit{7.5, 8}, LimitSource::kDefault}));
}

TEST(LimitResolver, QueueConfigReplacesDefault) {
  LimitResolver r(engine(true, 100, 100), static_limit("email", {10, 2}));
  EXPECT_EQ(r.resolve("email"), (EffectiveLimit{RateLimit{10, 2}, LimitSource::kQueueConfig}));
  EXPECT_EQ(r.resolve("other"), (EffectiveLimit{RateLimit{100, 100}, LimitSource::kDefault}));
}

TEST(LimitResolver, OverrideReplacesQueueConfigAndRemovalReverts) {
  LimitResolver r(engine(true, 100, 100), static_limit("email", {10, 2}));
  uint64_t g0 = r.generation();
  r.set_overrides({RateLimitOverride{"email", RateLimit{50, 10}, 1}});
  EXPECT_NE(r.generation(), g0);
  EXPECT_EQ(r.resolve("email"), (EffectiveLimit{RateLimit{50, 10}, LimitSource::kOverride}));
  r.set_overrides({});
  EXPECT_EQ(r.resolve("email"), (EffectiveLimit{RateLimit{10, 2}, LimitSource::kQueueConfig}));
}

TEST(LimitResolver, OverrideOnQueueWithoutStaticLimitBeatsDefault) {
  LimitResolver r(engine(true, 100, 0), {});
  r.set_overrides({RateLimitOverride{"email", RateLimit{1, 1}, 1}});
  EXPECT_EQ(r.resolve("email").source, LimitSource::kOverride);
  EXPECT_EQ(r.resolve("bulk").source, LimitSource::kDefault);
}

TEST(LimitResolver, KillSwitchDisablesEverythingButKeepsOverrides) {
  LimitResolver r(engine(false, 100, 0), static_limit("email", {10, 2}));
  r.set_overrides({RateLimitOverride{"email", RateLimit{50, 10}, 1}});
  EXPECT_EQ(r.resolve("email"), (EffectiveLimit{std::nullopt, LimitSource::kDisabled}));
  EXPECT_EQ(r.resolve("x"), (EffectiveLimit{std::nullopt, LimitSource::kDisabled}));
  ASSERT_EQ(r.overrides().size(), 1u);
  EXPECT_EQ(r.overrides()[0].queue, "email");
}

TEST(LimitResolver, StoredKillSwitchBeatsTheConfigAndClearingItRevertsToTheConfig) {
  LimitResolver r(engine(true, 10, 0), static_limit("email", RateLimit{50, 10}));
  EXPECT_EQ(r.switch_state(), (RateLimitingState{true, SwitchSource::kConfig}));
  const uint64_t g = r.generation();
  r.set_stored_switch(false);
  EXPECT_GT(r.generation(), g) << "dispatchers must re-resolve";
  EXPECT_EQ(r.switch_state(), (RateLimitingState{false, SwitchSource::kStorage}));
  EXPECT_EQ(r.resolve("email").source, LimitSource::kDisabled);
  const uint64_t g2 = r.generation();
  r.set_stored_switch(false);
  EXPECT_EQ(r.generation(), g2) << "no change, no re-resolve";
  r.set_stored_switch(std::nullopt);
  EXPECT_EQ(r.switch_state(), (RateLimitingState{true, SwitchSource::kConfig}));
  EXPECT_EQ(r.resolve("email").source, LimitSource::kQueueConfig);

  LimitResolver off(engine(false, 10, 0), {});
  off.set_stored_switch(true);  // conveyor ratelimit enable beats rate_limit_enabled = false
  EXPECT_EQ(off.resolve("any").source, LimitSource::kDefault);
}

TEST(LimitResolver, SourceNamesAreTheContractSpellings) {
  EXPECT_STREQ(to_string(LimitSource::kOverride), "override");
  EXPECT_STREQ(to_string(LimitSource::kQueueConfig), "queue-config");
  EXPECT_STREQ(to_string(LimitSource::kDefault), "default");
  EXPECT_STREQ(to_string(LimitSource::kNone), "none");
  EXPECT_STREQ(to_string(LimitSource::kDisabled), "disabled");
}

}  // namespace
}  // namespace conveyor
