// ABI 1.5: key settings made at run time (set_key_setting, delete_key_setting,
// list_key_settings: a key's own rate limit, every key's limit, a key's
// weight) and delete_shared_states, which forgets shared records
// (storage_plugin.h "version 1.5"). Each behaviour runs only on a plugin of
// ABI 1.5 or later whose table fills the slots it uses.
#include "fixture.hpp"

#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace conveyor::conformance {
namespace {

class KeySettings : public ConformanceTest {};
class DeleteSharedStates : public ConformanceTest {};

// The three key-setting slots come together: a host uses none without all
// three (storage_plugin.h "version 1.5").
#define REQUIRE_KEY_SETTING_SLOTS(h)                 \
  do {                                               \
    CONFORMANCE_REQUIRE_SLOT(h, set_key_setting);    \
    CONFORMANCE_REQUIRE_SLOT(h, delete_key_setting); \
    CONFORMANCE_REQUIRE_SLOT(h, list_key_settings);  \
  } while (0)
// delete_shared_states is tested on records written by swap_shared_state.
#define REQUIRE_FORGET_SLOTS(h)                        \
  do {                                                 \
    CONFORMANCE_REQUIRE_SLOT(h, swap_shared_state);    \
    CONFORMANCE_REQUIRE_SLOT(h, delete_shared_states); \
  } while (0)

constexpr int32_t kOne = CONVEYOR_KEY_TARGET_ONE;
constexpr int32_t kEvery = CONVEYOR_KEY_TARGET_EVERY;
constexpr uint32_t kRate = CONVEYOR_KEY_FIELD_RATE;
constexpr uint32_t kWeight = CONVEYOR_KEY_FIELD_WEIGHT;
constexpr uint32_t kAll = CONVEYOR_KEY_FIELDS_ALL;

conveyor_str cstr(std::string_view s) { return conveyor_str{s.data(), s.size()}; }

// A setting of the rate fields only.
KeySettingCopy rate_of(std::string queue, int32_t target, std::string key, double rate,
                       uint32_t burst, int32_t scope = CONVEYOR_SCOPE_PROCESS) {
  KeySettingCopy k;
  k.queue = std::move(queue);
  k.target = target;
  k.key = std::move(key);
  k.fields = kRate;
  k.rate_per_sec = rate;
  k.burst = burst;
  k.scope = scope;
  return k;
}
// A setting of the weight only.
KeySettingCopy weight_of(std::string queue, int32_t target, std::string key, uint32_t weight) {
  KeySettingCopy k;
  k.queue = std::move(queue);
  k.target = target;
  k.key = std::move(key);
  k.fields = kWeight;
  k.weight = weight;
  return k;
}
// Both at once.
KeySettingCopy both_of(std::string queue, int32_t target, std::string key, double rate,
                       uint32_t burst, int32_t scope, uint32_t weight) {
  KeySettingCopy k = rate_of(std::move(queue), target, std::move(key), rate, burst, scope);
  k.fields = kAll;
  k.weight = weight;
  return k;
}

std::string target_name(int32_t target) {
  return target == kOne ? "ONE" : target == kEvery ? "EVERY" : std::to_string(target);
}
// "queue/ONE/"key"" for a row.
std::string row_of(const KeySettingCopy& k) {
  return k.queue + "/" + target_name(k.target) + "/\"" + k.key + "\"";
}
std::vector<std::string> rows_of(const std::vector<KeySettingCopy>& settings) {
  std::vector<std::string> rows;
  for (const KeySettingCopy& k : settings) rows.push_back(row_of(k));
  return rows;
}
// Every field of every row, for failure messages.
std::string describe(const std::vector<KeySettingCopy>& settings) {
  std::ostringstream out;
  out << settings.size() << " setting(s)";
  for (const KeySettingCopy& k : settings)
    out << "; " << row_of(k) << " fields " << k.fields << " rate " << k.rate_per_sec << " burst "
        << k.burst << " scope " << k.scope << " weight " << k.weight << " updated_at "
        << k.updated_at;
  return out.str();
}
// The listed row (queue, target, key), or nullptr.
const KeySettingCopy* find_row(const std::vector<KeySettingCopy>& settings, std::string_view queue,
                               int32_t target, std::string_view key) {
  for (const KeySettingCopy& k : settings)
    if (k.queue == queue && k.target == target && k.key == key) return &k;
  return nullptr;
}

// The longest key there is: CONVEYOR_JOB_KEY_MAX bytes, ending in a two-byte
// UTF-8 character (a plugin counting characters, not bytes, is off by one).
std::string longest_key() { return std::string(CONVEYOR_JOB_KEY_MAX - 2, 'k') + "\xc3\xa9"; }

// ---- set_key_setting and list_key_settings ----

TEST_F(KeySettings, SetIsListedWithItsFieldsAndZeroForTheOthers) {
  auto h = open();
  REQUIRE_KEY_SETTING_SLOTS(h);
  EXPECT_TRUE(h->key_settings().empty()) << "fresh storage lists no key setting";
  h->set_key(rate_of("mail", kOne, "tenant-1", 2.5, 7, CONVEYOR_SCOPE_FLEET), kT0 + 5);
  h->set_key(weight_of("mail", kEvery, "", 3), kT0 + 6);
  const std::vector<KeySettingCopy> l = h->key_settings();
  ASSERT_EQ(l.size(), 2u) << describe(l);
  const KeySettingCopy& one = l[0];
  EXPECT_EQ(row_of(one), "mail/ONE/\"tenant-1\"") << describe(l);
  EXPECT_EQ(one.fields, kRate) << "fields reports the fields stored";
  EXPECT_EQ(one.rate_per_sec, 2.5);
  EXPECT_EQ(one.burst, 7u);
  EXPECT_EQ(one.scope, CONVEYOR_SCOPE_FLEET);
  EXPECT_EQ(one.weight, 0u) << "a field not stored is reported as zero";
  EXPECT_EQ(one.updated_at, kT0 + 5) << "updated_at_us is set_key_setting's now_us";
  const KeySettingCopy& every = l[1];
  EXPECT_EQ(row_of(every), "mail/EVERY/\"\"") << describe(l);
  EXPECT_EQ(every.fields, kWeight);
  EXPECT_EQ(every.weight, 3u);
  EXPECT_EQ(every.rate_per_sec, 0) << "a field not stored is reported as zero";
  EXPECT_EQ(every.burst, 0u);
  EXPECT_EQ(every.scope, 0);
  EXPECT_EQ(every.updated_at, kT0 + 6);
}

TEST_F(KeySettings, ValuesRoundTripExactly) {
  auto h = open();
  REQUIRE_KEY_SETTING_SLOTS(h);
  h->set_key(both_of("q", kOne, "a", 1.0 / 3.0, UINT32_MAX, CONVEYOR_SCOPE_PROCESS,
                     CONVEYOR_KEY_WEIGHT_MAX),
             kT0);
  h->set_key(both_of("q", kOne, "b", 0.001, 1, CONVEYOR_SCOPE_FLEET, 1), kT0);
  h->set_key(rate_of("q", kEvery, "", 1e6, 4'000'000'000u, CONVEYOR_SCOPE_FLEET), kT0);
  const std::vector<KeySettingCopy> l = h->key_settings();
  ASSERT_EQ(l.size(), 3u) << describe(l);
  EXPECT_EQ(l[0].rate_per_sec, 1.0 / 3.0) << "rate_per_sec is a double: store it exactly";
  EXPECT_EQ(l[0].burst, UINT32_MAX) << "burst is a uint32_t: every value must survive";
  EXPECT_EQ(l[0].weight, uint32_t{CONVEYOR_KEY_WEIGHT_MAX});
  EXPECT_EQ(l[0].fields, kAll);
  EXPECT_EQ(l[1].rate_per_sec, 0.001);
  EXPECT_EQ(l[1].burst, 1u);
  EXPECT_EQ(l[1].scope, CONVEYOR_SCOPE_FLEET);
  EXPECT_EQ(l[1].weight, 1u);
  EXPECT_EQ(l[2].rate_per_sec, 1e6);
  EXPECT_EQ(l[2].burst, 4'000'000'000u);
}

TEST_F(KeySettings, SetMergesOnlyTheNamedFields) {
  auto h = open();
  REQUIRE_KEY_SETTING_SLOTS(h);
  constexpr const char* kRule =
      " (storage_plugin.h set_key_setting: \"Stores the fields of setting->fields ...; fields not "
      "named keep what is stored\")";
  h->set_key(rate_of("q", kOne, "k", 1, 1, CONVEYOR_SCOPE_PROCESS), kT0 + 1);
  h->set_key(weight_of("q", kOne, "k", 5), kT0 + 2);
  std::vector<KeySettingCopy> l = h->key_settings();
  ASSERT_EQ(l.size(), 1u) << "one row per (queue, target, key); " << describe(l);
  EXPECT_EQ(l[0].fields, kAll) << "setting the weight dropped the rate" << kRule;
  EXPECT_EQ(l[0].rate_per_sec, 1) << kRule;
  EXPECT_EQ(l[0].burst, 1u) << kRule;
  EXPECT_EQ(l[0].weight, 5u);

  h->set_key(rate_of("q", kOne, "k", 2, 3, CONVEYOR_SCOPE_FLEET), kT0 + 3);
  l = h->key_settings();
  ASSERT_EQ(l.size(), 1u) << describe(l);
  EXPECT_EQ(l[0].fields, kAll) << "setting the rate dropped the weight" << kRule;
  EXPECT_EQ(l[0].weight, 5u) << kRule;
  EXPECT_EQ(l[0].rate_per_sec, 2) << "the named fields are replaced";
  EXPECT_EQ(l[0].burst, 3u);
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_FLEET);

  h->set_key(both_of("q", kOne, "k", 4, 4, CONVEYOR_SCOPE_PROCESS, 9), kT0 + 4);
  l = h->key_settings();
  ASSERT_EQ(l.size(), 1u) << describe(l);
  EXPECT_EQ(l[0].fields, kAll);
  EXPECT_EQ(l[0].rate_per_sec, 4);
  EXPECT_EQ(l[0].burst, 4u);
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_PROCESS) << "the scope is one of the rate's fields";
  EXPECT_EQ(l[0].weight, 9u);
}

// ---- delete_key_setting ----

TEST_F(KeySettings, DeleteClearsOnlyTheNamedFieldsAndRemovesAnEmptyRow) {
  auto h = open();
  REQUIRE_KEY_SETTING_SLOTS(h);
  h->set_key(both_of("q", kOne, "k", 2, 3, CONVEYOR_SCOPE_FLEET, 4), kT0);
  h->set_key(both_of("q", kEvery, "", 6, 7, CONVEYOR_SCOPE_PROCESS, 8), kT0);

  EXPECT_EQ(h->clear_key("q", kOne, "k", kWeight), 1) << "the weight was set";
  std::vector<KeySettingCopy> l = h->key_settings();
  const KeySettingCopy* k = find_row(l, "q", kOne, "k");
  ASSERT_NE(k, nullptr) << "clearing one field removed the row with another still set; "
                        << describe(l);
  EXPECT_EQ(k->fields, kRate) << "storage_plugin.h delete_key_setting: \"Clears the fields of "
                                 "fields\"; "
                              << describe(l);
  EXPECT_EQ(k->rate_per_sec, 2) << "the field not named keeps its value";
  EXPECT_EQ(k->burst, 3u);
  EXPECT_EQ(k->scope, CONVEYOR_SCOPE_FLEET);
  EXPECT_EQ(k->weight, 0u) << "a cleared field is reported as zero";

  EXPECT_EQ(h->clear_key("q", kEvery, "", kRate), 1);
  l = h->key_settings();
  const KeySettingCopy* every = find_row(l, "q", kEvery, "");
  ASSERT_NE(every, nullptr) << describe(l);
  EXPECT_EQ(every->fields, kWeight);
  EXPECT_EQ(every->weight, 8u);
  EXPECT_EQ(every->rate_per_sec, 0);
  EXPECT_EQ(every->burst, 0u);

  EXPECT_EQ(h->clear_key("q", kOne, "k", kRate), 1);
  l = h->key_settings();
  EXPECT_EQ(find_row(l, "q", kOne, "k"), nullptr)
      << "storage_plugin.h delete_key_setting: \"a row with no field left is removed\"; "
      << describe(l);
  EXPECT_EQ(h->clear_key("q", kEvery, "", kAll), 1) << "both fields named, one of them set";
  l = h->key_settings();
  EXPECT_TRUE(l.empty()) << describe(l);
}

TEST_F(KeySettings, DeleteOfWhatIsNotSetClearsNothingAndIsIdempotent) {
  auto h = open();
  REQUIRE_KEY_SETTING_SLOTS(h);
  constexpr const char* kRule =
      " (storage_plugin.h delete_key_setting: \"*out_cleared = 1 when any of those fields was "
      "set ..., else 0 and nothing changes (not an error ...)\")";
  EXPECT_EQ(h->clear_key("q", kOne, "never", kAll), 0) << "a row never set" << kRule;
  EXPECT_EQ(h->clear_key("never", kEvery, "", kRate), 0) << "a queue never named" << kRule;
  h->set_key(rate_of("q", kOne, "k", 2, 3), kT0);
  EXPECT_EQ(h->clear_key("q", kOne, "k", kWeight), 0) << "the weight was never set" << kRule;
  std::vector<KeySettingCopy> l = h->key_settings();
  ASSERT_EQ(l.size(), 1u) << "clearing a field that is not set changed the row; " << describe(l);
  EXPECT_EQ(l[0].fields, kRate);
  EXPECT_EQ(l[0].rate_per_sec, 2);
  EXPECT_EQ(h->clear_key("q", kOne, "K", kRate), 0) << "keys are compared bytewise" << kRule;
  EXPECT_EQ(h->clear_key("q", kEvery, "", kRate), 0) << "the setting of every key is another row";
  EXPECT_EQ(h->clear_key("q", kOne, "k", kRate), 1);
  EXPECT_EQ(h->clear_key("q", kOne, "k", kRate), 0) << "deleting again" << kRule;
  EXPECT_EQ(h->clear_key("q", kOne, "k", kAll), 0) << "deleting again" << kRule;
  EXPECT_TRUE(h->key_settings().empty());
}

TEST_F(KeySettings, RowsAreKeptApartByQueueTargetAndKey) {
  auto h = open();
  REQUIRE_KEY_SETTING_SLOTS(h);
  // The empty key of TARGET_ONE is one key like any other, not every key.
  h->set_key(weight_of("q", kOne, "", 2), kT0);
  h->set_key(weight_of("q", kEvery, "", 3), kT0);
  h->set_key(weight_of("q", kOne, "k", 4), kT0);
  h->set_key(weight_of("q", kOne, "K", 5), kT0);
  h->set_key(weight_of("q", kOne, "k ", 6), kT0);
  h->set_key(weight_of("r", kOne, "k", 7), kT0);
  h->set_key(weight_of("qq", kOne, "k", 8), kT0);
  std::vector<KeySettingCopy> l = h->key_settings();
  ASSERT_EQ(l.size(), 7u) << describe(l);
  const std::map<std::string, uint32_t> expected = {
      {"q/ONE/\"\"", 2},   {"q/EVERY/\"\"", 3}, {"q/ONE/\"k\"", 4}, {"q/ONE/\"K\"", 5},
      {"q/ONE/\"k \"", 6}, {"r/ONE/\"k\"", 7},  {"qq/ONE/\"k\"", 8}};
  for (const KeySettingCopy& k : l) {
    auto it = expected.find(row_of(k));
    ASSERT_NE(it, expected.end()) << row_of(k) << " was never set; " << describe(l);
    EXPECT_EQ(k.weight, it->second) << row_of(k) << " has another row's weight";
  }
  EXPECT_EQ(h->clear_key("q", kEvery, "", kWeight), 1);
  l = h->key_settings();
  EXPECT_NE(find_row(l, "q", kOne, ""), nullptr)
      << "deleting the setting of every key removed the empty key's own; " << describe(l);
  EXPECT_EQ(l.size(), 6u) << describe(l);
}

TEST_F(KeySettings, ListIsInQueueTargetKeyOrder) {
  auto h = open();
  REQUIRE_KEY_SETTING_SLOTS(h);
  // Set in a scrambled order; listed by queue (name order), target (ONE
  // before EVERY), key (bytewise: the empty key first, upper case before
  // lower, a prefix before its extensions, bytes >= 0x80 after ASCII).
  const std::vector<std::pair<std::string, std::pair<int32_t, std::string>>> set = {
      {"bravo", {kEvery, ""}},       {"bravo", {kOne, "zz"}},       {"alpha", {kOne, "b"}},
      {"alpha", {kEvery, ""}},       {"alpha", {kOne, "\xc3\xa9"}}, {"alpha", {kOne, "ab"}},
      {"alpha", {kOne, ""}},         {"alpha", {kOne, "a"}},        {"alpha", {kOne, "B"}},
      {"alpha", {kOne, "zzzzzzzz"}}, {"bravo", {kOne, ""}},         {"charlie", {kOne, "a"}},
      {"alpha", {kOne, "~"}},        {"alpha", {kOne, "a\x7f"}}};
  for (size_t i = 0; i < set.size(); ++i)
    h->set_key(weight_of(set[i].first, set[i].second.first, set[i].second.second,
                         static_cast<uint32_t>(i + 1)),
               kT0);
  const std::vector<std::string> expected = {
      "alpha/ONE/\"\"",         "alpha/ONE/\"B\"",  "alpha/ONE/\"a\"",        "alpha/ONE/\"ab\"",
      "alpha/ONE/\"a\x7f\"",    "alpha/ONE/\"b\"",  "alpha/ONE/\"zzzzzzzz\"", "alpha/ONE/\"~\"",
      "alpha/ONE/\"\xc3\xa9\"", "alpha/EVERY/\"\"", "bravo/ONE/\"\"",         "bravo/ONE/\"zz\"",
      "bravo/EVERY/\"\"",       "charlie/ONE/\"a\""};
  EXPECT_EQ(rows_of(h->key_settings()), expected)
      << "storage_plugin.h list_key_settings: \"in order of queue (name order), target (ONE "
         "before EVERY), key (bytewise)\"";
}

TEST_F(KeySettings, LongestAndUtf8KeysAndLongQueueNamesRoundTrip) {
  auto h = open();
  REQUIRE_KEY_SETTING_SLOTS(h);
  const std::string queue(128, 'q');
  const std::string utf8 = "caf\xc3\xa9 \xe2\x9c\x93";
  h->set_key(weight_of(queue, kOne, longest_key(), 2), kT0);
  h->set_key(rate_of(queue, kOne, utf8, 3, 3), kT0);
  std::vector<KeySettingCopy> l = h->key_settings();
  ASSERT_EQ(l.size(), 2u) << describe(l);
  EXPECT_EQ(l[0].queue, queue);
  EXPECT_EQ(l[0].key, utf8) << "'c' (0x63) sorts before 'k' (0x6b)";
  EXPECT_EQ(l[1].key, longest_key()) << "a key of CONVEYOR_JOB_KEY_MAX bytes is valid";
  EXPECT_EQ(h->clear_key(queue, kOne, longest_key(), kWeight), 1);
  EXPECT_EQ(h->clear_key(queue, kOne, utf8, kRate), 1);
  EXPECT_TRUE(h->key_settings().empty());
}

TEST_F(KeySettings, UpdatedAtIsTheNowOfTheLastSet) {
  auto h = open();
  REQUIRE_KEY_SETTING_SLOTS(h);
  h->set_key(rate_of("q", kOne, "k", 1, 1), kT0 + 1);
  std::vector<KeySettingCopy> l = h->key_settings();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].updated_at, kT0 + 1)
      << "updated_at_us must be set_key_setting's now_us (the host's clock), not the plugin's";
  h->set_key(weight_of("q", kOne, "k", 2), kT0 + 9 * kSecond);
  l = h->key_settings();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].updated_at, kT0 + 9 * kSecond)
      << "storage_plugin.h conveyor_key_setting: \"listed: now_us of the last set_key_setting\", "
         "whichever field it set";
  ASSERT_EQ(h->clear_key("q", kOne, "k", kRate), 1);
  l = h->key_settings();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].updated_at, kT0 + 9 * kSecond)
      << "delete_key_setting has no now_us: the last set's stays";
  h->set_key(weight_of("q", kOne, "k", 2), kT0 - kSecond);
  EXPECT_EQ(h->key_settings().at(0).updated_at, kT0 - kSecond)
      << "the last set's now_us, even when earlier than the one before";
}

// ---- refusals ----

// A valid setting of every field of (q, ONE, k), to spoil one field at a time.
conveyor_key_setting valid_setting() {
  static const std::string q = "q", k = "k";
  conveyor_key_setting s{};
  s.struct_size = sizeof s;
  s.fields = kAll;
  s.queue = cstr(q);
  s.key = cstr(k);
  s.target = kOne;
  s.scope = CONVEYOR_SCOPE_FLEET;
  s.rate_per_sec = 9;
  s.burst = 9;
  s.weight = 9;
  return s;
}

TEST_F(KeySettings, InvalidSettingsAreRefusedAndStoreNothing) {
  auto h = open();
  REQUIRE_KEY_SETTING_SLOTS(h);
  // What is stored before: each refused call must leave it exactly so.
  h->set_key(both_of("q", kOne, "k", 2, 3, CONVEYOR_SCOPE_PROCESS, 4), kT0);
  const std::string too_long(CONVEYOR_JOB_KEY_MAX + 1, 'k');
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    const char* what;
    std::function<void(conveyor_key_setting&)> spoil;
  };
  const std::vector<Case> cases = {
      {"struct_size smaller than the 1.5 struct",
       [](conveyor_key_setting& s) { s.struct_size = offsetof(conveyor_key_setting, weight); }},
      {"fields 0", [](conveyor_key_setting& s) { s.fields = 0; }},
      {"fields with an unknown bit", [](conveyor_key_setting& s) { s.fields = kAll | 4; }},
      {"fields with only an unknown bit", [](conveyor_key_setting& s) { s.fields = 8; }},
      {"fields all ones", [](conveyor_key_setting& s) { s.fields = UINT32_MAX; }},
      {"an empty queue name",
       [](conveyor_key_setting& s) {
         s.queue = conveyor_str{nullptr, 0};
       }},
      {"target 2", [](conveyor_key_setting& s) { s.target = 2; }},
      {"target -1", [](conveyor_key_setting& s) { s.target = -1; }},
      {"TARGET_EVERY with a key", [](conveyor_key_setting& s) { s.target = kEvery; }},
      {"a key longer than CONVEYOR_JOB_KEY_MAX",
       [&](conveyor_key_setting& s) { s.key = cstr(too_long); }},
      {"rate 0", [](conveyor_key_setting& s) { s.rate_per_sec = 0; }},
      {"rate -1", [](conveyor_key_setting& s) { s.rate_per_sec = -1; }},
      {"rate NaN", [&](conveyor_key_setting& s) { s.rate_per_sec = nan; }},
      {"rate +inf", [&](conveyor_key_setting& s) { s.rate_per_sec = inf; }},
      {"rate -inf", [&](conveyor_key_setting& s) { s.rate_per_sec = -inf; }},
      {"burst 0", [](conveyor_key_setting& s) { s.burst = 0; }},
      {"scope 2", [](conveyor_key_setting& s) { s.scope = 2; }},
      {"scope -1", [](conveyor_key_setting& s) { s.scope = -1; }},
      {"weight 0", [](conveyor_key_setting& s) { s.weight = 0; }},
      {"weight CONVEYOR_KEY_WEIGHT_MAX + 1",
       [](conveyor_key_setting& s) { s.weight = CONVEYOR_KEY_WEIGHT_MAX + 1; }},
      {"weight UINT32_MAX", [](conveyor_key_setting& s) { s.weight = UINT32_MAX; }},
      {"only the rate named, burst 0",
       [](conveyor_key_setting& s) {
         s.fields = kRate;
         s.weight = 0;
         s.burst = 0;
       }},
      {"only the weight named, weight above the maximum",
       [](conveyor_key_setting& s) {
         s.fields = kWeight;
         s.rate_per_sec = 0;
         s.burst = 0;
         s.scope = 0;
         s.weight = CONVEYOR_KEY_WEIGHT_MAX + 1;
       }},
  };
  for (const Case& c : cases) {
    conveyor_key_setting s = valid_setting();
    c.spoil(s);
    Status st = h->set_key_setting(s, kT0 + kSecond);
    EXPECT_STATUS(st.code, CONVEYOR_E_INVALID)
        << c.what << ": " << st << " (storage_plugin.h set_key_setting: \"Failure "
        << "(CONVEYOR_E_INVALID, nothing stored)\")";
  }
  // The same valid setting for another queue, spoilt the same ways: no row is made.
  for (const Case& c : cases) {
    static const std::string other = "other";
    conveyor_key_setting s = valid_setting();
    s.queue = cstr(other);
    c.spoil(s);
    if (s.queue.len == 0) continue;  // the empty-queue case again
    EXPECT_STATUS(h->set_key_setting(s, kT0 + kSecond).code, CONVEYOR_E_INVALID) << c.what;
  }
  // setting NULL, straight through the table (the binding never passes NULL).
  conveyor_error err = poisoned_error();
  EXPECT_STATUS(table().set_key_setting(h->raw(), nullptr, kT0, &err), CONVEYOR_E_INVALID)
      << "setting NULL";
  EXPECT_EQ(check_error(CONVEYOR_E_INVALID, err), "") << "setting NULL";

  std::vector<KeySettingCopy> l = h->key_settings();
  ASSERT_EQ(l.size(), 1u) << "a refused setting stored a row; " << describe(l);
  EXPECT_EQ(row_of(l[0]), "q/ONE/\"k\"");
  EXPECT_EQ(l[0].fields, kAll);
  EXPECT_EQ(l[0].rate_per_sec, 2) << "a refused setting changed the stored one; " << describe(l);
  EXPECT_EQ(l[0].burst, 3u);
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_PROCESS);
  EXPECT_EQ(l[0].weight, 4u);
  EXPECT_EQ(l[0].updated_at, kT0);
}

TEST_F(KeySettings, InvalidDeletesAreRefusedAndClearNothing) {
  auto h = open();
  REQUIRE_KEY_SETTING_SLOTS(h);
  h->set_key(both_of("q", kOne, "k", 2, 3, CONVEYOR_SCOPE_PROCESS, 4), kT0);
  h->set_key(both_of("q", kEvery, "", 5, 6, CONVEYOR_SCOPE_FLEET, 7), kT0);
  const std::string too_long(CONVEYOR_JOB_KEY_MAX + 1, 'k');
  struct Case {
    const char* what;
    std::string queue;
    int32_t target;
    std::string key;
    uint32_t fields;
  };
  const std::vector<Case> cases = {
      {"fields 0", "q", kOne, "k", 0},
      {"fields with an unknown bit", "q", kOne, "k", kAll | 4},
      {"fields with only an unknown bit", "q", kOne, "k", 4},
      {"fields all ones", "q", kEvery, "", UINT32_MAX},
      {"an empty queue name", "", kOne, "k", kAll},
      {"target 2", "q", 2, "k", kAll},
      {"target -1", "q", -1, "", kAll},
      {"TARGET_EVERY with a key", "q", kEvery, "k", kAll},
      {"a key longer than CONVEYOR_JOB_KEY_MAX", "q", kOne, too_long, kAll},
  };
  constexpr int32_t kNotWritten = 12345;
  for (const Case& c : cases) {
    int32_t cleared = kNotWritten;
    Status st = h->delete_key_setting(c.queue, c.target, c.key, c.fields, &cleared);
    EXPECT_STATUS(st.code, CONVEYOR_E_INVALID)
        << c.what << ": " << st << " (storage_plugin.h delete_key_setting: \"Failure "
        << "(CONVEYOR_E_INVALID): as set_key_setting for queue, target, key and fields\")";
  }
  // out_cleared NULL, straight through the table.
  conveyor_error err = poisoned_error();
  EXPECT_STATUS(
      table().delete_key_setting(h->raw(), cstr("q"), kOne, cstr("k"), kAll, nullptr, &err),
      CONVEYOR_E_INVALID)
      << "out_cleared NULL";
  EXPECT_EQ(check_error(CONVEYOR_E_INVALID, err), "") << "out_cleared NULL";

  std::vector<KeySettingCopy> l = h->key_settings();
  ASSERT_EQ(l.size(), 2u) << "a refused delete removed a row; " << describe(l);
  for (const KeySettingCopy& k : l)
    EXPECT_EQ(k.fields, kAll) << "a refused delete cleared a field of " << row_of(k) << "; "
                              << describe(l);
}

// ---- the change marker ----

constexpr const char* kMarkerRule =
    " (storage_plugin.h set_key_setting: \"Advances the change marker\"; delete_key_setting: "
    "\"*out_cleared = 1 when any of those fields was set (then the change marker advances ...), "
    "else 0 and nothing changes\")";

TEST_F(KeySettings, SetMovesTheChangeMarker) {
  auto h = open();
  REQUIRE_KEY_SETTING_SLOTS(h);
  int64_t last = h->marker();
  const std::vector<KeySettingCopy> sets = {
      rate_of("q", kOne, "k", 1, 1),                        // a new row
      weight_of("q", kOne, "k", 2),                         // a field added to it
      rate_of("q", kOne, "k", 3, 3, CONVEYOR_SCOPE_FLEET),  // a field replaced
      rate_of("q", kOne, "k", 3, 3, CONVEYOR_SCOPE_FLEET),  // the same values again
      weight_of("q", kEvery, "", 4)};                       // every key's setting
  for (size_t i = 0; i < sets.size(); ++i) {
    h->set_key(sets[i], kT0 + static_cast<int64_t>(i));
    const int64_t now = h->marker();
    EXPECT_NE(now, last) << "set " << i + 1 << " of " << sets.size() << " (" << row_of(sets[i])
                         << ", fields " << sets[i].fields << ") did not move the marker"
                         << kMarkerRule;
    last = now;
  }
}

TEST_F(KeySettings, DeleteMovesTheChangeMarkerOnlyWhenItClearedSomething) {
  auto h = open();
  REQUIRE_KEY_SETTING_SLOTS(h);
  h->set_key(rate_of("q", kOne, "k", 1, 1), kT0);
  int64_t before = h->marker();
  ASSERT_EQ(h->clear_key("q", kOne, "k", kWeight), 0);
  ASSERT_EQ(h->clear_key("q", kOne, "never", kAll), 0);
  ASSERT_EQ(h->clear_key("q", kEvery, "", kAll), 0);
  EXPECT_EQ(h->marker(), before) << "a delete that cleared nothing moved the marker" << kMarkerRule;
  ASSERT_EQ(h->clear_key("q", kOne, "k", kAll), 1);
  const int64_t after = h->marker();
  EXPECT_NE(after, before) << "a delete that cleared a field did not move the marker"
                           << kMarkerRule;
  ASSERT_EQ(h->clear_key("q", kOne, "k", kAll), 0);
  EXPECT_EQ(h->marker(), after) << "deleting again moved the marker" << kMarkerRule;
  // A refused set or delete is no change either.
  conveyor_key_setting bad = valid_setting();
  bad.weight = 0;
  EXPECT_STATUS(h->set_key_setting(bad, kT0).code, CONVEYOR_E_INVALID);
  EXPECT_STATUS(h->delete_key_setting("q", kOne, "k", 0, nullptr).code, CONVEYOR_E_INVALID);
  EXPECT_EQ(h->marker(), after) << "a refused call moved the marker";
}

// ---- sharing and durability ----

TEST_F(KeySettings, AreSharedByEveryHandle) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_MULTI_PROCESS);
  auto writer = open();
  REQUIRE_KEY_SETTING_SLOTS(writer);
  auto reader = open();
  const int64_t before = reader->marker();
  writer->set_key(rate_of("q", kOne, "k", 2, 3, CONVEYOR_SCOPE_FLEET), kT0 + 1);
  writer->set_key(weight_of("q", kEvery, "", 5), kT0 + 2);
  const int64_t after_set = reader->marker();
  EXPECT_NE(after_set, before) << "another handle's key setting did not move this handle's marker"
                               << kMarkerRule;
  std::vector<KeySettingCopy> l = reader->key_settings();
  ASSERT_EQ(l.size(), 2u) << "another handle's key settings are not listed (storage_plugin.h: "
                             "\"shared by every process on the storage\"); "
                          << describe(l);
  EXPECT_EQ(row_of(l[0]), "q/ONE/\"k\"");
  EXPECT_EQ(l[0].rate_per_sec, 2);
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_FLEET);
  EXPECT_EQ(l[0].updated_at, kT0 + 1);
  EXPECT_EQ(row_of(l[1]), "q/EVERY/\"\"");
  EXPECT_EQ(l[1].weight, 5u);
  // A field the reader adds merges with the writer's.
  reader->set_key(weight_of("q", kOne, "k", 6), kT0 + 3);
  l = writer->key_settings();
  const KeySettingCopy* k = find_row(l, "q", kOne, "k");
  ASSERT_NE(k, nullptr) << describe(l);
  EXPECT_EQ(k->fields, kAll) << describe(l);
  EXPECT_EQ(writer->clear_key("q", kOne, "k", kAll), 1);
  EXPECT_NE(reader->marker(), after_set) << "another handle's delete did not move the marker";
  EXPECT_EQ(reader->clear_key("q", kOne, "k", kAll), 0)
      << "the row another handle deleted is still there for this one";
  EXPECT_EQ(rows_of(reader->key_settings()), std::vector<std::string>{"q/EVERY/\"\""});
}

TEST_F(KeySettings, SurviveCloseAndReopen) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_DURABLE);
  {
    auto h = open();
    REQUIRE_KEY_SETTING_SLOTS(h);
    h->set_key(both_of("q", kOne, "k", 1.0 / 3.0, 7, CONVEYOR_SCOPE_FLEET, 8), kT0 + 1);
    h->set_key(weight_of("q", kEvery, "", 9), kT0 + 2);
    h->set_key(weight_of("q", kOne, "gone", 9), kT0 + 3);
    ASSERT_EQ(h->clear_key("q", kOne, "gone", kWeight), 1);
    ASSERT_EQ(h->clear_key("q", kOne, "k", kWeight), 1);
  }
  auto h = open();
  std::vector<KeySettingCopy> l = h->key_settings();
  ASSERT_EQ(l.size(), 2u) << "storage_plugin.h set_key_setting: \"Durable when the call "
                             "returns\"; "
                          << describe(l);
  EXPECT_EQ(row_of(l[0]), "q/ONE/\"k\"");
  EXPECT_EQ(l[0].fields, kRate) << "a cleared field came back after reopening";
  EXPECT_EQ(l[0].rate_per_sec, 1.0 / 3.0);
  EXPECT_EQ(l[0].burst, 7u);
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_FLEET);
  EXPECT_EQ(l[0].updated_at, kT0 + 1);
  EXPECT_EQ(row_of(l[1]), "q/EVERY/\"\"");
  EXPECT_EQ(l[1].weight, 9u);
}

// Two writers setting different fields of the same rows at once: every row
// ends with both (a read-modify-write outside one atomic step loses one).
TEST_F(KeySettings, ConcurrentSetsOfDifferentFieldsBothStay) {
  auto first = open();
  REQUIRE_KEY_SETTING_SLOTS(first);
  // Across handles where the storage has several (as two processes would).
  std::unique_ptr<Handle> other = has(CONVEYOR_CAP_MULTI_PROCESS) ? open() : nullptr;
  Handle& second = other ? *other : *first;
  constexpr int kKeys = 100;
  std::atomic<bool> go{false};
  auto writer = [&](Handle& h, bool rate) {
    while (!go.load()) std::this_thread::yield();
    for (int i = 0; i < kKeys; ++i) {
      const std::string key = "k" + std::to_string(i);
      Status s = rate ? h.set_key_setting(rate_of("q", kOne, key, 1, 1), kT0)
                      : h.set_key_setting(weight_of("q", kOne, key, 2), kT0);
      // Transient contention is the host's to retry; retry it here too.
      for (int retry = 0; s.code == CONVEYOR_E_UNAVAILABLE && retry < 50; ++retry)
        s = rate ? h.set_key_setting(rate_of("q", kOne, key, 1, 1), kT0)
                 : h.set_key_setting(weight_of("q", kOne, key, 2), kT0);
      EXPECT_TRUE(s.ok()) << s;
    }
  };
  std::thread a(writer, std::ref(*first), true);
  std::thread b(writer, std::ref(second), false);
  go.store(true);
  a.join();
  b.join();
  std::vector<KeySettingCopy> l = first->key_settings();
  ASSERT_EQ(l.size(), size_t{kKeys}) << describe(l);
  int lost = 0;
  for (const KeySettingCopy& k : l)
    if (k.fields != kAll) ++lost;
  EXPECT_EQ(lost, 0) << lost << " of " << kKeys
                     << " rows lost the field the other writer set (storage_plugin.h "
                        "set_key_setting: \"fields not named keep what is stored\"); "
                     << describe(l);
}

// ---- delete_shared_states ----

// Writes value to key, whatever its version (read, then swap from it).
void put(Handle& h, std::string_view key, int64_t value) {
  const SharedCopy now = h.shared(key);
  SharedCopy after;
  require_ok(h.swap_shared_state(key, now.version, value, &after));
  if (after.applied != 1)
    throw CallFailed("swap_shared_state of '" + std::string(key) + "' from its current version " +
                     std::to_string(now.version) + " did not apply");
}
bool exists(Handle& h, std::string_view key) { return h.shared(key).version != 0; }
// The keys of keys still there, in the order given.
std::vector<std::string> left_of(Handle& h, const std::vector<std::string>& keys) {
  std::vector<std::string> left;
  for (const std::string& k : keys)
    if (exists(h, k)) left.push_back(k);
  return left;
}

constexpr const char* kForgetRule =
    " (storage_plugin.h delete_shared_states: \"Deletes up to limit shared records ... whose key "
    "starts with prefix and whose value is below value_below\")";

TEST_F(DeleteSharedStates, DeletesOnlyRecordsWithThePrefixAndAValueBelow) {
  auto h = open();
  REQUIRE_FORGET_SLOTS(h);
  const int64_t t = kT0;  // the host stores times: "full again at"
  put(*h, "ratelimit.key:q:a", t - 5);
  put(*h, "ratelimit.key:q:b", t + 5);
  put(*h, "ratelimit.key:q:c", t - 1);
  put(*h, "ratelimit.key:r:a", t - 5);
  put(*h, "ratelimit.bucket:q", t - 5);
  put(*h, "ratelimit.enabled", 1);
  EXPECT_EQ(h->forget_shared("ratelimit.key:q:", t, 100), 2u) << kForgetRule;
  EXPECT_EQ(left_of(*h, {"ratelimit.key:q:a", "ratelimit.key:q:b", "ratelimit.key:q:c",
                         "ratelimit.key:r:a", "ratelimit.bucket:q", "ratelimit.enabled"}),
            (std::vector<std::string>{"ratelimit.key:q:b", "ratelimit.key:r:a",
                                      "ratelimit.bucket:q", "ratelimit.enabled"}))
      << kForgetRule;
  EXPECT_EQ(h->shared("ratelimit.key:q:b").value, t + 5) << "a record kept keeps its value";
  EXPECT_EQ(h->shared("ratelimit.key:q:b").version, 1);
  EXPECT_EQ(h->forget_shared("ratelimit.key:q:", t, 100), 0u) << "nothing left to delete";
}

TEST_F(DeleteSharedStates, ValueBelowIsStrict) {
  auto h = open();
  REQUIRE_FORGET_SLOTS(h);
  put(*h, "p:at", 100);
  put(*h, "p:below", 99);
  put(*h, "p:above", 101);
  put(*h, "p:negative", -5);
  put(*h, "p:min", INT64_MIN);
  put(*h, "p:max", INT64_MAX);
  const std::vector<std::string> all = {"p:at",       "p:below", "p:above",
                                        "p:negative", "p:min",   "p:max"};
  EXPECT_EQ(h->forget_shared("p:", INT64_MIN, 100), 0u) << "nothing is below INT64_MIN";
  EXPECT_EQ(left_of(*h, all), all);
  EXPECT_EQ(h->forget_shared("p:", 100, 100), 3u) << kForgetRule;
  EXPECT_EQ(left_of(*h, all), (std::vector<std::string>{"p:at", "p:above", "p:max"}))
      << "a value equal to value_below is not below it" << kForgetRule;
  EXPECT_EQ(h->forget_shared("p:", INT64_MAX, 100), 2u);
  EXPECT_EQ(left_of(*h, all), std::vector<std::string>{"p:max"});
}

TEST_F(DeleteSharedStates, AKeyEqualToThePrefixStartsWithIt) {
  auto h = open();
  REQUIRE_FORGET_SLOTS(h);
  put(*h, "ratelimit.key:q:k", 1);
  put(*h, "ratelimit.key:q:k2", 1);
  put(*h, "ratelimit.key:q:j", 1);
  EXPECT_EQ(h->forget_shared("ratelimit.key:q:k", 10, 100), 2u)
      << "a key equal to the prefix starts with it" << kForgetRule;
  EXPECT_EQ(left_of(*h, {"ratelimit.key:q:k", "ratelimit.key:q:k2", "ratelimit.key:q:j"}),
            std::vector<std::string>{"ratelimit.key:q:j"});
}

TEST_F(DeleteSharedStates, PrefixIsBytesNotAPattern) {
  auto h = open();
  REQUIRE_FORGET_SLOTS(h);
  // Each prefix with the keys that start with it and those that would match
  // it read as a LIKE or GLOB pattern (or with the wrong escape), or that
  // differ only in case.
  struct Group {
    std::string prefix;
    std::vector<std::string> deleted, kept;
  };
  const std::vector<Group> groups = {
      {"k_1%", {"k_1%", "k_1%a", "k_1%%"}, {"kx1%a", "k_1za", "K_1%a", "k_1", "k_2%", "kx1%"}},
      {"e\\_", {"e\\_", "e\\_x"}, {"e_x", "e\\ax", "e\\", "E\\_x"}},
      {"g*[a]?", {"g*[a]?", "g*[a]?z"}, {"gx[a]?", "g*a?", "g*[a]x", "g*[b]?"}},
      {"%", {"%", "%anything"}, {"anything", "_"}},
      {"_", {"_", "_x"}, {"x", "X_"}},
  };
  for (const Group& g : groups) {
    for (const std::string& k : g.deleted) put(*h, k, 1);
    for (const std::string& k : g.kept) put(*h, k, 1);
  }
  for (const Group& g : groups) {
    const uint32_t n = h->forget_shared(g.prefix, 10, 100);
    EXPECT_EQ(n, g.deleted.size()) << "prefix \"" << g.prefix << "\"" << kForgetRule;
    std::vector<std::string> all = g.deleted;
    all.insert(all.end(), g.kept.begin(), g.kept.end());
    EXPECT_EQ(left_of(*h, all), g.kept)
        << "prefix \"" << g.prefix << "\": a key starts with the prefix byte for byte ('%', "
        << "'_', '\\\\', '*', '?' and '[' are bytes like any other, and case matters)"
        << kForgetRule;
  }
}

TEST_F(DeleteSharedStates, KeysSharingOnlyAShorterPrefixAreKept) {
  auto h = open();
  REQUIRE_FORGET_SLOTS(h);
  struct Group {
    std::string prefix;
    std::vector<std::string> deleted, kept;
  };
  const std::vector<Group> groups = {
      {"ratelimit.key:q:ab",
       {"ratelimit.key:q:ab", "ratelimit.key:q:abc", "ratelimit.key:q:ab:"},
       {"ratelimit.key:q:a", "ratelimit.key:q:ac", "ratelimit.key:q:aB", "ratelimit.key:q:b",
        "ratelimit.key:q:aa\xc3\xbf", "ratelimit.key:q:"}},
      // Keys after the prefix with the highest code point (U+10FFFF): an
      // upper bound of "prefix + U+10FFFF" leaves them out.
      {"m:",
       {"m:", "m:\xf4\x8f\xbf\xbf",
        "m:\xf4\x8f\xbf\xbf"
        "z",
        "m:~"},
       {"m", "m;", "l:\xf4\x8f\xbf\xbf", "M:"}},
      // A prefix ending in a two-byte character (keys are UTF-8 text here,
      // as the host's are: every backend can store them).
      {"u:\xc3\xa9",
       {"u:\xc3\xa9", "u:\xc3\xa9t\xc3\xa9"},
       {"u:\xc3\xaa", "u:\xc3\xa8", "u:e", "u:"}},
  };
  for (const Group& g : groups) {
    for (const std::string& k : g.deleted) put(*h, k, 1);
    for (const std::string& k : g.kept) put(*h, k, 1);
  }
  for (const Group& g : groups) {
    const uint32_t n = h->forget_shared(g.prefix, 10, 100);
    EXPECT_EQ(n, g.deleted.size()) << "prefix \"" << g.prefix << "\"" << kForgetRule;
    std::vector<std::string> all = g.deleted;
    all.insert(all.end(), g.kept.begin(), g.kept.end());
    EXPECT_EQ(left_of(*h, all), g.kept) << "prefix \"" << g.prefix << "\"" << kForgetRule;
  }
}

TEST_F(DeleteSharedStates, RespectsTheLimitAndFewerThanTheLimitMeansNoneLeft) {
  auto h = open();
  REQUIRE_FORGET_SLOTS(h);
  // Ten keys in key order, every other one below value_below: a plugin that
  // counts the records it looked at, not those it deleted, stops early.
  std::vector<std::string> below, above;
  for (int i = 0; i < 10; ++i) {
    const std::string key = "b:" + std::to_string(i);
    put(*h, key, i % 2 == 0 ? 5 : 50);
    (i % 2 == 0 ? below : above).push_back(key);
  }
  const std::string rule =
      " (storage_plugin.h delete_shared_states: \"*out_deleted = the number deleted; fewer than "
      "limit means no more such records\")";
  EXPECT_EQ(h->forget_shared("b:", 10, 2), 2u) << "limit 2 with 5 records to delete" << rule;
  EXPECT_EQ(left_of(*h, below).size(), 3u) << "limit 2 deleted more or fewer than 2";
  EXPECT_EQ(left_of(*h, above), above) << "a record not below value_below was deleted";
  EXPECT_EQ(h->forget_shared("b:", 10, 2), 2u) << "limit 2 with 3 records to delete" << rule;
  EXPECT_EQ(left_of(*h, below).size(), 1u);
  const uint32_t last = h->forget_shared("b:", 10, 2);
  EXPECT_EQ(last, 1u) << "limit 2 with 1 record to delete" << rule;
  EXPECT_TRUE(left_of(*h, below).empty())
      << "a call deleting fewer than limit left records to delete" << rule;
  EXPECT_EQ(h->forget_shared("b:", 10, 2), 0u);
  EXPECT_EQ(left_of(*h, above), above);
  // limit 1, one at a time, up to none.
  EXPECT_EQ(h->forget_shared("b:", 100, 1), 1u);
  EXPECT_EQ(left_of(*h, above).size(), 4u);
  EXPECT_EQ(h->forget_shared("b:", 100, UINT32_MAX), 4u) << "the largest limit";
  EXPECT_TRUE(left_of(*h, above).empty());
}

TEST_F(DeleteSharedStates, DeletedRecordReadsAsNeverWrittenAndStartsAgain) {
  auto h = open();
  REQUIRE_FORGET_SLOTS(h);
  put(*h, "r:k", 1);
  put(*h, "r:k", 2);
  put(*h, "r:k", 3);
  ASSERT_EQ(h->shared("r:k").version, 3);
  ASSERT_EQ(h->forget_shared("r:", 10, 1), 1u);
  SharedCopy r = h->shared("r:k");
  EXPECT_EQ(r.version, 0) << "storage_plugin.h delete_shared_states: \"a deleted record reads as "
                             "never written again ((0, 0))\"";
  EXPECT_EQ(r.value, 0);
  SharedCopy stale;
  require_ok(h->swap_shared_state("r:k", 3, 9, &stale));
  EXPECT_EQ(stale.applied, 0) << "a swap from the deleted record's version applied";
  EXPECT_EQ(stale.version, 0);
  SharedCopy again;
  require_ok(h->swap_shared_state("r:k", 0, 7, &again));
  EXPECT_EQ(again.applied, 1) << "a swap from version 0 must apply to a deleted record";
  EXPECT_EQ(again.version, 1);
  EXPECT_EQ(again.value, 7);
}

TEST_F(DeleteSharedStates, InvalidArgumentsDeleteNothing) {
  auto h = open();
  REQUIRE_FORGET_SLOTS(h);
  put(*h, "x", 1);
  put(*h, "xy", 1);
  const std::string too_long(CONVEYOR_SHARED_KEY_MAX + 1, 'x');
  put(*h, too_long.substr(0, CONVEYOR_SHARED_KEY_MAX), 1);
  const std::string rule =
      " (storage_plugin.h delete_shared_states: \"Failure (CONVEYOR_E_INVALID, nothing deleted): "
      "prefix empty or longer than CONVEYOR_SHARED_KEY_MAX; limit 0; out_deleted NULL\")";
  uint32_t n = 0;
  EXPECT_STATUS(h->delete_shared_states("", 10, 100, &n).code, CONVEYOR_E_INVALID)
      << "an empty prefix" << rule;
  EXPECT_STATUS(h->delete_shared_states(too_long, 10, 100, &n).code, CONVEYOR_E_INVALID)
      << "a prefix of CONVEYOR_SHARED_KEY_MAX + 1 bytes" << rule;
  EXPECT_STATUS(h->delete_shared_states("x", 10, 0, &n).code, CONVEYOR_E_INVALID)
      << "limit 0" << rule;
  conveyor_error err = poisoned_error();
  EXPECT_STATUS(table().delete_shared_states(h->raw(), cstr("x"), 10, 100, nullptr, &err),
                CONVEYOR_E_INVALID)
      << "out_deleted NULL" << rule;
  EXPECT_EQ(check_error(CONVEYOR_E_INVALID, err), "") << "out_deleted NULL";
  EXPECT_EQ(left_of(*h, {"x", "xy", too_long.substr(0, CONVEYOR_SHARED_KEY_MAX)}).size(), 3u)
      << "a refused call deleted records";
  // The longest prefix is valid.
  EXPECT_EQ(h->forget_shared(too_long.substr(0, CONVEYOR_SHARED_KEY_MAX), 10, 100), 1u)
      << "a prefix of CONVEYOR_SHARED_KEY_MAX bytes is valid";
}

TEST_F(DeleteSharedStates, AnotherHandleSeesTheDeletion) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_MULTI_PROCESS);
  auto a = open();
  REQUIRE_FORGET_SLOTS(a);
  auto b = open();
  put(*a, "s:k", 1);
  put(*a, "s:keep", 20);
  ASSERT_EQ(b->shared("s:k").version, 1);
  EXPECT_EQ(b->forget_shared("s:", 10, 100), 1u) << "a record another handle wrote is not deleted";
  EXPECT_EQ(a->shared("s:k").version, 0) << "a record another handle deleted is still there";
  EXPECT_EQ(a->shared("s:keep").value, 20);
}

// One writer toggles a record between a value below value_below and one
// above; the other deletes with the prefix meanwhile. A record the writer
// has just moved above value_below must still be there when the writer reads
// it back (storage_plugin.h: "Each deletion is atomic against concurrent
// swaps ...: a record a concurrent call moved to a value >= value_below is
// not deleted").
TEST_F(DeleteSharedStates, ARecordMovedAboveTheBoundMeanwhileIsNotDeleted) {
  auto toggler = open();
  REQUIRE_FORGET_SLOTS(toggler);
  std::unique_ptr<Handle> other = has(CONVEYOR_CAP_MULTI_PROCESS) ? open() : nullptr;
  Handle& deleter = other ? *other : *toggler;
  constexpr int64_t kBelow = 10, kLow = 1, kHigh = 1000;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  std::atomic<bool> stop{false};
  std::atomic<int> highs{0};
  std::string broken;
  std::thread forget([&] {
    while (!stop.load()) {
      uint32_t n = 0;
      Status s = deleter.delete_shared_states("t:", kBelow, 10, &n);
      if (!s.ok() && s.code != CONVEYOR_E_UNAVAILABLE) {
        ADD_FAILURE() << s;
        return;
      }
    }
  });
  while (std::chrono::steady_clock::now() < until && broken.empty()) {
    SharedCopy now, set;
    Status s = toggler->swap_shared_state("t:k", -1, 0, &now);
    if (s.ok()) s = toggler->swap_shared_state("t:k", now.version, kLow, &set);
    if (s.ok() && set.applied == 1) s = toggler->swap_shared_state("t:k", set.version, kHigh, &set);
    if (!s.ok()) {
      if (s.code == CONVEYOR_E_UNAVAILABLE) continue;
      ADD_FAILURE() << s;
      break;
    }
    if (set.applied != 1 || set.value != kHigh) continue;  // the deleter was first: again
    ++highs;
    SharedCopy back;
    if (toggler->swap_shared_state("t:k", -1, 0, &back).ok() &&
        (back.version != set.version || back.value != kHigh))
      broken = "the record was (" + std::to_string(set.version) + ", " + std::to_string(kHigh) +
               ") after an applied swap, then read (" + std::to_string(back.version) + ", " +
               std::to_string(back.value) + ") with no other writer: deleted although " +
               std::to_string(kHigh) + " is not below value_below " + std::to_string(kBelow);
  }
  stop.store(true);
  forget.join();
  EXPECT_EQ(broken, "");
  EXPECT_GT(highs.load(), 0) << "the writer never got its value in";
}

}  // namespace
}  // namespace conveyor::conformance
