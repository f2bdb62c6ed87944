// ABI 1.0 is frozen: every field of every 1.0 struct keeps its offset, size
// and type, every function pointer its exact signature, every constant its
// value (storage_plugin.h rules 1-5). The facts come from two builds of
// abi_facts.cc: one against the frozen copy of the 1.0 header in
// tests/abi/v1_0, one against the current sdk/include header.
#include "abi_facts.hpp"

#include <conveyor/storage_plugin.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <string>

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

}  // namespace
}  // namespace conveyor::abi_test
