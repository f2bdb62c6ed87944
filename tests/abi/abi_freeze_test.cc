// ABI 1.0 is frozen: every field of every 1.0 struct keeps its offset, size
// and type, every function pointer its exact signature, every constant its
// value (storage_plugin.h rules 1-5). The facts come from two builds of
// abi_facts.cc: one against the frozen copy of the 1.0 header in
// tests/abi/v1_0, one against the current sdk/include header.
#include "abi_facts.hpp"

#include <conveyor/storage_plugin.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace conveyor::abi_test {
namespace {

TEST(AbiFreeze, EveryFactOfVersion1_0HoldsInTheCurrentHeader) {
  const Facts frozen = facts_of_v1_0_header();
  const Facts current = facts_of_current_header();
  ASSERT_EQ(frozen.size(), current.size()) << "both builds read the same list of facts";
  for (const auto& [name, value] : frozen) {
    auto it = current.find(name);
    ASSERT_NE(it, current.end()) << name;
    EXPECT_EQ(it->second, value)
        << name << " changed since ABI 1.0. A plugin built against 1.0 would break: never "
        << "move, resize, retype or remove a 1.0 member, change a signature or a constant; "
        << "append new slots and fields at the end instead (storage_plugin.h rules 1-5)";
  }
}

// The facts must say something: a broken collector (empty types, wrong
// namespace handling) would make the comparison above vacuous.
TEST(AbiFreeze, FactsDescribeTypesAndSignaturesInFull) {
  const Facts frozen = facts_of_v1_0_header();
  EXPECT_EQ(frozen.at("conveyor_storage_plugin.struct_size"),
            "offset 0, size 4, type unsigned int");
  EXPECT_EQ(frozen.at("conveyor_storage_plugin.migrate"),
            "offset " + std::to_string(offsetof(conveyor_storage_plugin, migrate)) +
                ", size 8, type int (*)(conveyor_storage*, conveyor_error*)");
  EXPECT_EQ(frozen.at("conveyor_error.message"), "offset 4, size 1024, type char [1024]");
  EXPECT_EQ(frozen.at("type conveyor_notify_fn"), "void (*)(void*, int, conveyor_str)");
  EXPECT_EQ(frozen.at("CONVEYOR_PLUGIN_ENTRY_SYMBOL"), "conveyor_storage_plugin_entry");
  EXPECT_EQ(frozen.at("CONVEYOR_PLUGIN_V1_0_SIZE"), std::to_string(CONVEYOR_PLUGIN_V1_0_SIZE));
  EXPECT_EQ(frozen.at("CONVEYOR_ABI_MAJOR"), "1");
}

// ABI 1.2 only appends: its slots follow the last 1.1 slot in order, and its
// struct fields sit after every older field (rules 1 and 5), so a 1.1
// plugin's smaller table and structs read as a prefix.
TEST(AbiFreeze, Version1_2AppendsItsSlotsAndFieldsAtTheEnd) {
  constexpr size_t kSlot = sizeof(void (*)());
  EXPECT_EQ(offsetof(conveyor_storage_plugin, swap_shared_state), CONVEYOR_PLUGIN_V1_1_SIZE);
  EXPECT_EQ(offsetof(conveyor_storage_plugin, set_rate_limit_v2),
            CONVEYOR_PLUGIN_V1_1_SIZE + kSlot);
  EXPECT_EQ(offsetof(conveyor_storage_plugin, enqueue_v3), CONVEYOR_PLUGIN_V1_1_SIZE + 2 * kSlot);
  EXPECT_EQ(CONVEYOR_PLUGIN_V1_2_SIZE, CONVEYOR_PLUGIN_V1_1_SIZE + 3 * kSlot);

  EXPECT_EQ(offsetof(conveyor_job, cost),
            offsetof(conveyor_job, last_error) + sizeof(conveyor_str));
  EXPECT_EQ(offsetof(conveyor_job, reserved1), offsetof(conveyor_job, cost) + sizeof(int32_t));
  EXPECT_EQ(offsetof(conveyor_rate_limit, scope),
            offsetof(conveyor_rate_limit, updated_at_us) + sizeof(int64_t));
  EXPECT_EQ(sizeof(conveyor_rate_limit),
            offsetof(conveyor_rate_limit, reserved0) + sizeof(int32_t));
  EXPECT_EQ(offsetof(conveyor_new_job_v2, job), 0u);
  EXPECT_EQ(offsetof(conveyor_new_job_v2, cost), sizeof(conveyor_new_job));
  EXPECT_EQ(sizeof(conveyor_new_job_v2), sizeof(conveyor_new_job) + 2 * sizeof(int32_t));
}

// ABI 1.3 appends one slot after the last 1.2 slot.
TEST(AbiFreeze, Version1_3AppendsItsSlotAtTheEnd) {
  constexpr size_t kSlot = sizeof(void (*)());
  EXPECT_EQ(offsetof(conveyor_storage_plugin, add_shared_state), CONVEYOR_PLUGIN_V1_2_SIZE);
  EXPECT_EQ(CONVEYOR_PLUGIN_V1_3_SIZE, CONVEYOR_PLUGIN_V1_2_SIZE + kSlot);
}

// ABI 1.4 (job keys) appends three slots after add_shared_state, a field
// after conveyor_job's reserved1, and two structs of its own.
TEST(AbiFreeze, Version1_4AppendsItsSlotsAndFieldsAtTheEnd) {
  constexpr size_t kSlot = sizeof(void (*)());
  EXPECT_EQ(offsetof(conveyor_storage_plugin, enqueue_v4), CONVEYOR_PLUGIN_V1_3_SIZE);
  EXPECT_EQ(offsetof(conveyor_storage_plugin, claim_keys), CONVEYOR_PLUGIN_V1_3_SIZE + kSlot);
  EXPECT_EQ(offsetof(conveyor_storage_plugin, list_ready_keys),
            CONVEYOR_PLUGIN_V1_3_SIZE + 2 * kSlot);
  EXPECT_EQ(CONVEYOR_PLUGIN_V1_4_SIZE, CONVEYOR_PLUGIN_V1_3_SIZE + 3 * kSlot);

  EXPECT_EQ(offsetof(conveyor_job, key), offsetof(conveyor_job, reserved1) + sizeof(int32_t));
  EXPECT_EQ(offsetof(conveyor_new_job_v3, job), 0u);
  EXPECT_EQ(offsetof(conveyor_new_job_v3, key), sizeof(conveyor_new_job_v2));
  EXPECT_EQ(sizeof(conveyor_new_job_v3), sizeof(conveyor_new_job_v2) + sizeof(conveyor_str));
  EXPECT_EQ(offsetof(conveyor_key_claim, max_jobs), sizeof(conveyor_str));
  EXPECT_EQ(sizeof(conveyor_key_claim), sizeof(conveyor_str) + 2 * sizeof(uint32_t));
  EXPECT_EQ(offsetof(conveyor_ready_key, key), 2 * sizeof(uint32_t));
  EXPECT_EQ(sizeof(conveyor_ready_key), offsetof(conveyor_ready_key, ready) + sizeof(int64_t));
}

// ABI 1.5 (key settings, forgetting shared records, many adds in one call)
// appends five slots after list_ready_keys, with their signatures, three
// structs and the constants they use. Nothing older moves: the structs are
// new, no older struct grows.
TEST(AbiFreeze, Version1_5AppendsItsSlotsAtTheEnd) {
  constexpr size_t kSlot = sizeof(void (*)());
  EXPECT_EQ(offsetof(conveyor_storage_plugin, set_key_setting), CONVEYOR_PLUGIN_V1_4_SIZE);
  EXPECT_EQ(offsetof(conveyor_storage_plugin, delete_key_setting),
            CONVEYOR_PLUGIN_V1_4_SIZE + kSlot);
  EXPECT_EQ(offsetof(conveyor_storage_plugin, list_key_settings),
            CONVEYOR_PLUGIN_V1_4_SIZE + 2 * kSlot);
  EXPECT_EQ(offsetof(conveyor_storage_plugin, delete_shared_states),
            CONVEYOR_PLUGIN_V1_4_SIZE + 3 * kSlot);
  EXPECT_EQ(offsetof(conveyor_storage_plugin, add_shared_states),
            CONVEYOR_PLUGIN_V1_4_SIZE + 4 * kSlot);
  EXPECT_EQ(CONVEYOR_PLUGIN_V1_5_SIZE, CONVEYOR_PLUGIN_V1_4_SIZE + 5 * kSlot);
  EXPECT_GE(CONVEYOR_ABI_MINOR, 5);

  // The slots' exact signatures.
  static_assert(std::is_same_v<decltype(conveyor_storage_plugin::set_key_setting),
                               conveyor_status (*)(conveyor_storage*, const conveyor_key_setting*,
                                                   int64_t, conveyor_error*)>);
  static_assert(
      std::is_same_v<decltype(conveyor_storage_plugin::delete_key_setting),
                     conveyor_status (*)(conveyor_storage*, conveyor_str, int32_t, conveyor_str,
                                         uint32_t, int32_t*, conveyor_error*)>);
  static_assert(std::is_same_v<decltype(conveyor_storage_plugin::list_key_settings),
                               conveyor_status (*)(conveyor_storage*, conveyor_key_setting_fn,
                                                   void*, conveyor_error*)>);
  static_assert(std::is_same_v<decltype(conveyor_storage_plugin::delete_shared_states),
                               conveyor_status (*)(conveyor_storage*, conveyor_str, int64_t,
                                                   uint32_t, uint32_t*, conveyor_error*)>);
  static_assert(
      std::is_same_v<decltype(conveyor_storage_plugin::add_shared_states),
                     conveyor_status (*)(conveyor_storage*, const conveyor_shared_add*, size_t,
                                         conveyor_shared_added*, conveyor_error*)>);
  static_assert(
      std::is_same_v<conveyor_key_setting_fn, void (*)(void*, const conveyor_key_setting*)>);

  // conveyor_key_setting: struct_size first (rule 5), every field where it
  // was published, nothing after updated_at_us.
  EXPECT_EQ(offsetof(conveyor_key_setting, struct_size), 0u);
  EXPECT_EQ(offsetof(conveyor_key_setting, fields), 4u);
  EXPECT_EQ(offsetof(conveyor_key_setting, queue), 8u);
  EXPECT_EQ(offsetof(conveyor_key_setting, key), 8u + sizeof(conveyor_str));
  EXPECT_EQ(offsetof(conveyor_key_setting, target), 8u + 2 * sizeof(conveyor_str));
  EXPECT_EQ(offsetof(conveyor_key_setting, scope), offsetof(conveyor_key_setting, target) + 4);
  EXPECT_EQ(offsetof(conveyor_key_setting, rate_per_sec),
            offsetof(conveyor_key_setting, scope) + 4);
  EXPECT_EQ(offsetof(conveyor_key_setting, burst),
            offsetof(conveyor_key_setting, rate_per_sec) + 8);
  EXPECT_EQ(offsetof(conveyor_key_setting, weight), offsetof(conveyor_key_setting, burst) + 4);
  EXPECT_EQ(offsetof(conveyor_key_setting, updated_at_us),
            offsetof(conveyor_key_setting, weight) + 4);
  EXPECT_EQ(sizeof(conveyor_key_setting), offsetof(conveyor_key_setting, updated_at_us) + 8);
  static_assert(std::is_same_v<decltype(conveyor_key_setting::struct_size), uint32_t>);
  static_assert(std::is_same_v<decltype(conveyor_key_setting::fields), uint32_t>);
  static_assert(std::is_same_v<decltype(conveyor_key_setting::queue), conveyor_str>);
  static_assert(std::is_same_v<decltype(conveyor_key_setting::key), conveyor_str>);
  static_assert(std::is_same_v<decltype(conveyor_key_setting::target), int32_t>);
  static_assert(std::is_same_v<decltype(conveyor_key_setting::scope), int32_t>);
  static_assert(std::is_same_v<decltype(conveyor_key_setting::rate_per_sec), double>);
  static_assert(std::is_same_v<decltype(conveyor_key_setting::burst), uint32_t>);
  static_assert(std::is_same_v<decltype(conveyor_key_setting::weight), uint32_t>);
  static_assert(std::is_same_v<decltype(conveyor_key_setting::updated_at_us), int64_t>);

  EXPECT_EQ(CONVEYOR_KEY_FIELD_RATE, 1u);
  EXPECT_EQ(CONVEYOR_KEY_FIELD_WEIGHT, 2u);
  EXPECT_EQ(CONVEYOR_KEY_FIELDS_ALL, 3u);
  EXPECT_EQ(CONVEYOR_KEY_TARGET_ONE, 0);
  EXPECT_EQ(CONVEYOR_KEY_TARGET_EVERY, 1);
  EXPECT_EQ(CONVEYOR_KEY_WEIGHT_MAX, 1000);

  // conveyor_shared_add: the key, then add_shared_state's arguments in its
  // order; conveyor_shared_added: its out-parameters and a reserved word.
  EXPECT_EQ(offsetof(conveyor_shared_add, key), 0u);
  EXPECT_EQ(offsetof(conveyor_shared_add, credit), sizeof(conveyor_str));
  EXPECT_EQ(offsetof(conveyor_shared_add, low), sizeof(conveyor_str) + 8);
  EXPECT_EQ(offsetof(conveyor_shared_add, high), sizeof(conveyor_str) + 16);
  EXPECT_EQ(offsetof(conveyor_shared_add, unit), sizeof(conveyor_str) + 24);
  EXPECT_EQ(offsetof(conveyor_shared_add, min_count), sizeof(conveyor_str) + 32);
  EXPECT_EQ(offsetof(conveyor_shared_add, max_count), sizeof(conveyor_str) + 36);
  EXPECT_EQ(sizeof(conveyor_shared_add), sizeof(conveyor_str) + 40);
  static_assert(std::is_same_v<decltype(conveyor_shared_add::key), conveyor_str>);
  static_assert(std::is_same_v<decltype(conveyor_shared_add::credit), int64_t>);
  static_assert(std::is_same_v<decltype(conveyor_shared_add::low), int64_t>);
  static_assert(std::is_same_v<decltype(conveyor_shared_add::high), int64_t>);
  static_assert(std::is_same_v<decltype(conveyor_shared_add::unit), int64_t>);
  static_assert(std::is_same_v<decltype(conveyor_shared_add::min_count), uint32_t>);
  static_assert(std::is_same_v<decltype(conveyor_shared_add::max_count), uint32_t>);
  EXPECT_EQ(offsetof(conveyor_shared_added, version), 0u);
  EXPECT_EQ(offsetof(conveyor_shared_added, value), 8u);
  EXPECT_EQ(offsetof(conveyor_shared_added, count), 16u);
  EXPECT_EQ(offsetof(conveyor_shared_added, reserved0), 20u);
  EXPECT_EQ(sizeof(conveyor_shared_added), 24u);
  static_assert(std::is_same_v<decltype(conveyor_shared_added::version), int64_t>);
  static_assert(std::is_same_v<decltype(conveyor_shared_added::value), int64_t>);
  static_assert(std::is_same_v<decltype(conveyor_shared_added::count), uint32_t>);
  static_assert(std::is_same_v<decltype(conveyor_shared_added::reserved0), uint32_t>);
  EXPECT_EQ(CONVEYOR_SHARED_ADDS_MAX, 1000);
}

// ABI 1.6 (a job's own timeout, when its attempt started) appends one slot
// after add_shared_states, two fields after conveyor_job's key, and a struct
// of its own that wraps the 1.4 one.
TEST(AbiFreeze, Version1_6AppendsItsSlotAndFieldsAtTheEnd) {
  constexpr size_t kSlot = sizeof(void (*)());
  EXPECT_EQ(offsetof(conveyor_storage_plugin, enqueue_v5), CONVEYOR_PLUGIN_V1_5_SIZE);
  EXPECT_EQ(CONVEYOR_PLUGIN_V1_6_SIZE, CONVEYOR_PLUGIN_V1_5_SIZE + kSlot);
  EXPECT_EQ(CONVEYOR_PLUGIN_V1_6_SIZE, sizeof(conveyor_storage_plugin))
      << "a slot after enqueue_v5 belongs to a new minor with a size macro of its own";
  EXPECT_EQ(CONVEYOR_ABI_MINOR, 6);
  static_assert(std::is_same_v<decltype(conveyor_storage_plugin::enqueue_v5),
                               conveyor_status (*)(conveyor_storage*, const conveyor_new_job_v4*,
                                                   size_t, int64_t, int64_t*, conveyor_error*)>);

  EXPECT_EQ(offsetof(conveyor_job, started_at_us), offsetof(conveyor_job, key) + sizeof(conveyor_str));
  EXPECT_EQ(offsetof(conveyor_job, timeout_ms), offsetof(conveyor_job, started_at_us) + 8);
  EXPECT_EQ(sizeof(conveyor_job), offsetof(conveyor_job, timeout_ms) + 8);
  static_assert(std::is_same_v<decltype(conveyor_job::started_at_us), int64_t>);
  static_assert(std::is_same_v<decltype(conveyor_job::timeout_ms), int64_t>);
  EXPECT_EQ(offsetof(conveyor_new_job_v4, job), 0u);
  EXPECT_EQ(offsetof(conveyor_new_job_v4, timeout_ms), sizeof(conveyor_new_job_v3));
  EXPECT_EQ(sizeof(conveyor_new_job_v4), sizeof(conveyor_new_job_v3) + 8);
  static_assert(std::is_same_v<decltype(conveyor_new_job_v4::job), conveyor_new_job_v3>);
  static_assert(std::is_same_v<decltype(conveyor_new_job_v4::timeout_ms), int64_t>);
  EXPECT_EQ(CONVEYOR_JOB_TIMEOUT_MAX_MS, int64_t{604'800'000});
}

}  // namespace
}  // namespace conveyor::abi_test
