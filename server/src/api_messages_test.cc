// The engine's types to and from the conveyor.v1 messages: what the server
// writes (checked here in the JSON codec's wire form) reads back the same,
// in either codec and either JSON spelling.
#include "api_codec.hpp"

#include <conveyor/api_messages.hpp>
#include <conveyor/validation.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace conveyor::api {
namespace {

using nlohmann::json;

json as_json(const google::protobuf::Message& m) { return json::parse(encode(Codec::kJson, m)); }

// The message of type M read from JSON text.
template <typename M>
M from_json(const std::string& text) {
  M m;
  decode(Codec::kJson, text, m);
  return m;
}

// Through the binary codec and back.
template <typename M>
M via_binary(const M& m) {
  M out;
  decode(Codec::kProto, encode(Codec::kProto, m), out);
  return out;
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ValidationError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ValidationError";
  return {};
}

TEST(Rfc3339, FormatsUtcWithMicrosecondsWhenThereAreAny) {
  EXPECT_EQ(rfc3339(1'700'000'000'000'000), "2023-11-14T22:13:20Z");
  EXPECT_EQ(rfc3339(1'700'000'000'123'456), "2023-11-14T22:13:20.123456Z");
  EXPECT_EQ(rfc3339(0), "");
}

TEST(Rfc3339, ParsesFractionsAndOffsets) {
  EXPECT_EQ(parse_rfc3339("2023-11-14T22:13:20Z", "t"), 1'700'000'000'000'000);
  EXPECT_EQ(parse_rfc3339("2023-11-14T22:13:20.123456Z", "t"), 1'700'000'000'123'456);
  EXPECT_EQ(parse_rfc3339("2023-11-14T22:13:20.5Z", "t"), 1'700'000'000'500'000);
  EXPECT_EQ(parse_rfc3339("2023-11-15T00:13:20+02:00", "t"), 1'700'000'000'000'000);
  EXPECT_EQ(parse_rfc3339("", "t"), 0);
  EXPECT_EQ(error_of([] { parse_rfc3339("yesterday", "updatedAt"); }),
            "updatedAt: must be an RFC 3339 time like \"2024-05-01T12:00:00Z\", got \"yesterday\"");
  EXPECT_FALSE(error_of([] { parse_rfc3339("2023-13-14T22:13:20Z", "t"); }).empty());
}

// A truncated or out-of-range offset is refused (a truncated one once read an
// uninitialised minute; clang's -Wsometimes-uninitialized caught it).
TEST(Rfc3339, RefusesBrokenOffsets) {
  for (const char* text :
       {"2023-11-14T22:13:20+02", "2023-11-14T22:13:20+02:", "2023-11-14T22:13:20+0",
        "2023-11-14T22:13:20+24:00", "2023-11-14T22:13:20-02:60"}) {
    SCOPED_TRACE(text);
    EXPECT_NE(error_of([&] { parse_rfc3339(text, "t"); }).find("t: must be an RFC 3339 time"),
              std::string::npos);
  }
  EXPECT_EQ(parse_rfc3339("2023-11-14T22:13:20-00:00", "t"), 1'700'000'000'000'000);
  EXPECT_EQ(parse_rfc3339("2023-11-15T11:52:20+13:39", "t"), 1'700'000'000'000'000);
}

TEST(ApiMessages, OverrideRoundTripsInLowerCamelCase) {
  const RateLimitOverride o{"email:send", {2.5, 3}, 1'700'000'000'000'000};
  v1::RateLimitOverride m;
  to_proto(o, m);
  EXPECT_EQ(as_json(m), json::parse(R"({"queue":"email:send","ratePerSec":2.5,"burst":3,
                                        "updatedAt":"2023-11-14T22:13:20Z","scope":"process"})"));
  const RateLimitOverride back = from_proto(via_binary(m));
  EXPECT_EQ(back.queue, o.queue);
  EXPECT_EQ(back.limit, o.limit);
  EXPECT_EQ(back.updated_at_us, o.updated_at_us);
  // The .proto spelling and integers as strings read the same.
  const auto snake = from_proto(from_json<v1::RateLimitOverride>(
      R"({"queue":"q","rate_per_sec":1,"burst":"2","updated_at":"2023-11-14T22:13:20Z"})"));
  EXPECT_EQ(snake.limit, (RateLimit{1, 2}));  // no scope: process (an older server)
  const RateLimitOverride fleet{"f", {4, 2, LimitScope::kFleet}, 0};
  m.Clear();
  to_proto(fleet, m);
  EXPECT_EQ(as_json(m)["scope"], "fleet");
  EXPECT_EQ(from_proto(via_binary(m)).limit, fleet.limit);
  m.set_scope("galaxy");
  EXPECT_EQ(error_of([&] { from_proto(m, "override."); }).rfind("override.scope: ", 0), 0u)
      << error_of([&] { from_proto(m, "override."); });
  m.set_scope("process");
  m.set_updated_at("yesterday");
  EXPECT_EQ(error_of([&] { from_proto(m, "override."); }),
            "override.updatedAt: must be an RFC 3339 time like \"2024-05-01T12:00:00Z\", got "
            "\"yesterday\"");
}

TEST(ApiMessages, ListingOmitsAnUnsetDefault) {
  RateLimitListing l{false, std::nullopt, {{"a", {1, 1}, 0}}, SwitchSource::kConfig, {}};
  v1::ListRateLimitsResponse m;
  to_proto(l, m);
  json j = as_json(m);
  EXPECT_FALSE(j.contains("defaultLimit"));
  EXPECT_EQ(j["enabled"], false);
  EXPECT_EQ(j["enabledSource"], "config");
  RateLimitListing back = from_proto(via_binary(m));
  EXPECT_FALSE(back.enabled);
  EXPECT_EQ(back.enabled_source, SwitchSource::kConfig);
  EXPECT_FALSE(back.default_limit);
  ASSERT_EQ(back.overrides.size(), 1u);
  l.default_limit = RateLimit{10, 10};
  l.enabled_source = SwitchSource::kStorage;
  m.Clear();
  to_proto(l, m);
  EXPECT_EQ(as_json(m)["defaultLimit"],
            json::parse(R"({"ratePerSec":10.0,"burst":10,"scope":"process"})"));
  EXPECT_EQ(as_json(m)["enabledSource"], "storage");
  EXPECT_EQ(from_proto(via_binary(m)).default_limit, (RateLimit{10, 10}));
  EXPECT_EQ(from_proto(via_binary(m)).enabled_source, SwitchSource::kStorage);
  // A server that predates the live switch sends no source: the config's.
  m.clear_enabled_source();
  EXPECT_EQ(from_proto(via_binary(m)).enabled_source, SwitchSource::kConfig);
  m.set_enabled_source("moon");
  EXPECT_EQ(error_of([&] { from_proto(m); }),
            "enabledSource: unknown kill-switch source \"moon\" (known: storage, config)");
}

TEST(ApiMessages, SwitchStateBothWays) {
  v1::SetRateLimitingEnabledResponse m;
  to_proto(RateLimitingState{false, SwitchSource::kStorage}, m);
  EXPECT_EQ(as_json(m), json::parse(R"({"enabled":false,"enabledSource":"storage"})"));
  EXPECT_EQ(from_proto(via_binary(m)), (RateLimitingState{false, SwitchSource::kStorage}));
  to_proto(RateLimitingState{true, SwitchSource::kStorage}, m);
  EXPECT_EQ(as_json(m), json::parse(R"({"enabled":true,"enabledSource":"storage"})"));
}

TEST(ApiMessages, QueueInfoWritesInt64AsStringsAndOmitsAnUnlimitedRate) {
  QueueReport r;
  r.stats = QueueStats{"bulk", true, 5, 4, 3, 2, 1, 7};
  r.limit = EffectiveLimit{std::nullopt, LimitSource::kNone};
  r.throttled = 9;
  v1::QueueInfo m;
  to_proto(r, 11, m);
  EXPECT_EQ(as_json(m), json::parse(R"({"queue":"bulk","paused":true,"pending":"5","scheduled":"4",
      "running":"3","completed":"2","failed":"1","cancelled":"7","limit":{"source":"none"},
      "throttled":"9","dispatched":"11","oldestPendingAgeSeconds":0,"unservedKinds":[]})"));
  QueueReport back = from_proto(via_binary(m));
  EXPECT_EQ(back.stats.queue, "bulk");
  EXPECT_TRUE(back.stats.paused);
  EXPECT_EQ(back.stats.pending, 5);
  EXPECT_EQ(back.stats.cancelled, 7);
  EXPECT_EQ(back.throttled, 9u);
  EXPECT_EQ(back.limit, r.limit);

  r.unserved_kinds = {{"resize", 2}, {"send_email", 3}};
  m.Clear();
  to_proto(r, 11, m);
  EXPECT_EQ(
      as_json(m)["unservedKinds"],
      json::parse(R"([{"kind":"resize","pending":"2"},{"kind":"send_email","pending":"3"}])"));
  EXPECT_EQ(from_proto(via_binary(m)).unserved_kinds, r.unserved_kinds);
  r.unserved_kinds.clear();

  r.limit = EffectiveLimit{RateLimit{50, 10}, LimitSource::kOverride};
  m.Clear();
  to_proto(r, 0, m);
  EXPECT_EQ(as_json(m)["limit"],
            json::parse(R"({"ratePerSec":50.0,"burst":10,"scope":"process","source":"override"})"));
  EXPECT_EQ(from_proto(m).limit, r.limit);
  r.limit = EffectiveLimit{RateLimit{50, 10, LimitScope::kFleet}, LimitSource::kOverride};
  m.Clear();
  to_proto(r, 0, m);
  EXPECT_EQ(as_json(m)["limit"]["scope"], "fleet");
  EXPECT_EQ(from_proto(via_binary(m)).limit, r.limit);
  m.mutable_limit()->set_source("sideways");
  EXPECT_EQ(error_of([&] { from_proto(m, "queues[0]."); }),
            "queues[0].limit.source: unknown limit source \"sideways\" (known: override, "
            "queue-config, default, none, disabled, backoff, per-key-override)");
}

// Settings of keys: one key's limit and weight, every key's limit (no key),
// the empty key (present, ""), in ListRateLimitsResponse both ways.
TEST(ApiMessages, KeySettingsRoundTripInTheListing) {
  RateLimitListing l;
  l.key_settings = {KeyOverride{"tenants", "a", RateLimit{2, 3}, 4, 1'700'000'000'000'000},
                    KeyOverride{"tenants", "", std::nullopt, 2, 1'700'000'000'000'000},
                    KeyOverride{"tenants", std::nullopt, RateLimit{1, 1, LimitScope::kFleet},
                                std::nullopt, 1'700'000'000'000'000}};
  v1::ListRateLimitsResponse m;
  to_proto(l, m);
  EXPECT_EQ(as_json(m)["keySettings"], json::parse(R"([
      {"queue":"tenants","key":"a","limit":{"ratePerSec":2.0,"burst":3,"scope":"process"},
       "weight":4,"updatedAt":"2023-11-14T22:13:20Z"},
      {"queue":"tenants","key":"","weight":2,"updatedAt":"2023-11-14T22:13:20Z"},
      {"queue":"tenants","limit":{"ratePerSec":1.0,"burst":1,"scope":"fleet"},
       "updatedAt":"2023-11-14T22:13:20Z"}])"));
  EXPECT_EQ(from_proto(via_binary(m)).key_settings, l.key_settings);
  // A server that predates key settings: none.
  EXPECT_TRUE(from_proto(v1::ListRateLimitsResponse()).key_settings.empty());
  m.mutable_key_settings(2)->mutable_limit()->set_scope("galaxy");
  EXPECT_EQ(error_of([&] { from_proto(m); }).rfind("keySettings[2].limit.scope: ", 0), 0u);
}

// ListKeys: each key's limit, its source and its weight; the per-key limit's
// scope; a server that predates them reads as unlimited, "none", weight 1.
TEST(ApiMessages, KeyInfoCarriesTheKeysLimitSourceAndWeight) {
  KeysReport r;
  r.queue = "tenants";
  r.keys = {
      KeyReport{.key = "a",
                .ready = 3,
                .limit = RateLimit{2, 3},
                .limit_source = LimitSource::kOverride,
                .weight = 4},
      KeyReport{.key = "b",
                .ready = 1,
                .limit = RateLimit{1, 1, LimitScope::kFleet},
                .limit_source = LimitSource::kEveryKeyOverride,
                .weight = 1},
      KeyReport{
          .key = "c", .limit = std::nullopt, .limit_source = LimitSource::kDisabled, .weight = 1}};
  r.total_keys = 3;
  r.key_rate_limit = RateLimit{1, 1, LimitScope::kFleet};
  r.limit_source = LimitSource::kEveryKeyOverride;
  v1::ListKeysResponse m;
  to_proto(r, m);
  const json j = as_json(m);
  EXPECT_EQ(j["keys"][0]["limit"],
            json::parse(R"({"ratePerSec":2.0,"burst":3,"scope":"process"})"));
  EXPECT_EQ(j["keys"][0]["limitSource"], "override");
  EXPECT_EQ(j["keys"][0]["weight"], 4);
  EXPECT_EQ(j["keys"][1]["limitSource"], "per-key-override");
  EXPECT_FALSE(j["keys"][2].contains("limit"));
  EXPECT_EQ(j["keys"][2]["limitSource"], "disabled");
  EXPECT_EQ(j["limit"], json::parse(R"({"ratePerSec":1.0,"burst":1,"scope":"fleet",
                                         "source":"per-key-override"})"));
  const KeysReport back = from_proto(via_binary(m), "tenants");
  ASSERT_EQ(back.keys.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.keys[i].limit, r.keys[i].limit) << i;
    EXPECT_EQ(back.keys[i].limit_source, r.keys[i].limit_source) << i;
    EXPECT_EQ(back.keys[i].weight, r.keys[i].weight) << i;
  }
  EXPECT_EQ(back.key_rate_limit, r.key_rate_limit);
  EXPECT_EQ(back.limit_source, LimitSource::kEveryKeyOverride);

  const KeysReport old = from_proto(
      from_json<v1::ListKeysResponse>(
          R"({"keys":[{"key":"a","ready":"1"}],"limit":{"source":"none"},"fairness":"fair"})"),
      "tenants");
  ASSERT_EQ(old.keys.size(), 1u);
  EXPECT_EQ(old.keys[0].limit, std::nullopt);
  EXPECT_EQ(old.keys[0].limit_source, LimitSource::kNone);
  EXPECT_EQ(old.keys[0].weight, 1u);
  m.mutable_keys(1)->set_limit_source("sideways");
  EXPECT_EQ(error_of([&] {
              from_proto(m, "tenants");
            }).rfind("keys[1].limitSource: unknown limit source \"sideways\"", 0),
            0u);
}

TEST(ApiMessages, JobRoundTrips) {
  Job job;
  job.id = 42;
  job.state = JobState::kFailed;
  job.queue = "email";
  job.kind = "noop";
  job.payload = R"({"to":"a@b.c"})";
  job.priority = -3;
  job.attempt = 2;
  job.max_attempts = 2;
  job.run_at_us = 1'700'000'000'000'001;
  job.created_at_us = 1'700'000'000'000'000;
  job.finalized_at_us = 1'700'000'001'000'000;
  job.last_error = "boom";
  job.cost = 5;
  job.key = "tenant-\xc3\xa9";
  v1::Job m;
  to_proto(job, m);
  const json j = as_json(m);
  EXPECT_EQ(j["cost"], 5);
  EXPECT_EQ(j["key"], "tenant-\xc3\xa9");
  EXPECT_EQ(j["id"], "42");
  EXPECT_EQ(j["state"], "failed");
  EXPECT_EQ(j["maxAttempts"], 2);
  EXPECT_EQ(j["runAt"], "2023-11-14T22:13:20.000001Z");
  const Job back = from_proto(via_binary(m));
  EXPECT_EQ(back.id, 42);
  EXPECT_EQ(back.state, JobState::kFailed);
  EXPECT_EQ(back.payload, job.payload);
  EXPECT_EQ(back.priority, -3);
  EXPECT_EQ(back.run_at_us, job.run_at_us);
  EXPECT_EQ(back.finalized_at_us, job.finalized_at_us);
  EXPECT_EQ(back.last_error, "boom");
  EXPECT_EQ(back.cost, 5);
  EXPECT_EQ(back.key, "tenant-\xc3\xa9");
  m.clear_cost();  // a server that predates costs: every job took one token
  EXPECT_EQ(from_proto(via_binary(m)).cost, 1);
  m.clear_key();  // a server that predates keys: the empty key
  EXPECT_EQ(from_proto(via_binary(m)).key, "");
  job.finalized_at_us = 0;
  job.key.clear();
  m.Clear();
  to_proto(job, m);
  EXPECT_EQ(as_json(m)["finalizedAt"], "");
  EXPECT_EQ(as_json(m)["leaseExpiresAt"], "");  // not running
  EXPECT_EQ(as_json(m)["key"], "");             // the empty key is written, as every field
  // A running job carries its lease's expiry, both ways.
  job.state = JobState::kRunning;
  job.lease_expires_us = 1'700'000'030'000'000;
  m.Clear();
  to_proto(job, m);
  EXPECT_EQ(as_json(m)["leaseExpiresAt"], "2023-11-14T22:13:50Z");
  EXPECT_EQ(from_proto(via_binary(m)).lease_expires_us, job.lease_expires_us);
  m.set_lease_expires_at("soon");
  EXPECT_EQ(
      error_of([&] { from_proto(m, "job."); }).rfind("job.leaseExpiresAt: must be an RFC 3339", 0),
      0u);
  m.set_lease_expires_at("");
  m.set_state("sideways");
  EXPECT_EQ(error_of([&] { from_proto(m, "job."); }),
            "job.state: unknown job state \"sideways\" (known: available or pending, scheduled, "
            "running, completed, failed, cancelled)");
  m.set_state("pending");  // the synonym reads as available
  EXPECT_EQ(from_proto(m).state, JobState::kAvailable);
}

TEST(ApiMessages, JobOutcomeNamesBothWays) {
  v1::JobOutcome m;
  using Status = JobOutcome::Status;
  to_proto(JobOutcome{7, Status::kWrongState}, m);
  EXPECT_EQ(as_json(m), json::parse(R"({"id":"7","outcome":"wrong_state"})"));
  for (Status s : {Status::kOk, Status::kNotFound, Status::kWrongState}) {
    to_proto(JobOutcome{7, s}, m);
    EXPECT_EQ(from_proto(via_binary(m)).status, s);
  }
  m.set_outcome("maybe");
  EXPECT_EQ(error_of([&] { from_proto(m, "outcomes[0]."); }),
            "outcomes[0].outcome: unknown outcome \"maybe\" (known: ok, not_found, wrong_state)");
}

TEST(ApiMessages, NewJobDefaultsAndValidation) {
  JobRequest r = from_proto(from_json<v1::NewJob>(R"({"queue":"q","kind":"noop"})"), "job.");
  EXPECT_EQ(r.payload, "{}");
  EXPECT_FALSE(r.max_attempts);
  EXPECT_EQ(r.delay_s, 0);
  EXPECT_EQ(r.cost, 1);  // absent (0 on the wire): one token
  EXPECT_EQ(r.key, "");  // absent: the empty key
  r = from_proto(from_json<v1::NewJob>(R"({"queue":"q","kind":"noop","max_attempts":"3",
                                           "delay_seconds":1.5,"priority":-1,"payload":"[1]",
                                           "cost":4,"key":"tenant-42"})"));
  EXPECT_EQ(r.cost, 4);
  EXPECT_EQ(r.key, "tenant-42");
  EXPECT_EQ(r.max_attempts, 3);
  EXPECT_EQ(r.delay_s, 1.5);
  EXPECT_EQ(r.priority, -1);
  v1::NewJob m;
  to_proto(r, m);
  EXPECT_EQ(from_proto(via_binary(m)).max_attempts, 3);
  EXPECT_EQ(from_proto(via_binary(m)).cost, 4);
  EXPECT_EQ(from_proto(via_binary(m)).key, "tenant-42");
  EXPECT_EQ(as_json(m)["key"], "tenant-42");
  // The longest key passes; one byte more is refused naming the field.
  m.set_key(std::string(kMaxJobKeyBytes, 'k'));
  EXPECT_EQ(from_proto(via_binary(m)).key.size(), kMaxJobKeyBytes);
  m.set_key(std::string(kMaxJobKeyBytes + 1, 'k'));
  EXPECT_EQ(
      error_of([&] {
        from_proto(m, "jobs[3].");
      }).rfind("jobs[3].key: key is 201 bytes; the longest is 200 bytes (UTF-8), got \"kkk", 0),
      0u)
      << error_of([&] { from_proto(m, "jobs[3]."); });
  // Text that is not UTF-8 (possible in a message built in memory; the
  // codecs refuse it on the wire).
  m.set_key("k\xff");
  EXPECT_EQ(error_of([&] { from_proto(m, "job."); }),
            "job.key: key must be UTF-8 text; byte 1 is not, got \"k\\xff\"");
  EXPECT_EQ(error_of([] {
              from_proto(from_json<v1::NewJob>(R"({"queue":"q","kind":"noop","cost":-2})"), "job.");
            }),
            "job.cost: cost must be a whole number of tokens from 1 to 1000000, got -2");
  EXPECT_EQ(error_of([] {
              from_proto(from_json<v1::NewJob>(R"({"queue":"q","kind":"noop","cost":1000001})"),
                         "job.");
            }),
            "job.cost: cost must be a whole number of tokens from 1 to 1000000, got 1000001");

  EXPECT_EQ(error_of([] {
              from_proto(from_json<v1::NewJob>(R"({"queue":"q","kind":"noop","payload":"{x"})"),
                         "jobs[2].");
            }),
            "jobs[2].payload: payload is not valid JSON: \"{x\"");
  EXPECT_EQ(error_of([] {
              from_proto(from_json<v1::NewJob>(R"({"queue":"q","kind":"noop","maxAttempts":0})"),
                         "job.");
            }),
            "job.maxAttempts: max_attempts must be >= 1, got 0");
  EXPECT_EQ(error_of([] {
              from_proto(from_json<v1::NewJob>(R"({"queue":"q","kind":"noop","delaySeconds":-1})"),
                         "job.");
            }),
            "job.delaySeconds: delay must be a number of seconds from 0 to 31536000, got -1");
  const std::string kind_error =
      error_of([] { from_proto(from_json<v1::NewJob>(R"({"queue":"q","kind":""})"), "job."); });
  EXPECT_EQ(kind_error.rfind("job.kind: invalid job kind \"\"", 0), 0u) << kind_error;
}

TEST(ApiMessages, CoreFieldNamesMapToApiFieldNames) {
  EXPECT_EQ(api_field_name("rate"), "ratePerSec");
  EXPECT_EQ(api_field_name("max_attempts"), "maxAttempts");
  EXPECT_EQ(api_field_name("delay"), "delaySeconds");
  EXPECT_EQ(api_field_name("queue"), "queue");
  EXPECT_EQ(api_field_name("burst"), "burst");
}

}  // namespace
}  // namespace conveyor::api
