// The fixture of every conformance test: the plugin under test (loaded once
// through the production loader) and a fresh storage per test (the user's
// options with their placeholders expanded for this test).
#pragma once

#include "fresh_storage.hpp"
#include "handle.hpp"

#include <conveyor/host/plugin_loader.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>

namespace conveyor::conformance {

// The CONVEYOR_CAP_* bit's name, e.g. "multi-process (CONVEYOR_CAP_MULTI_PROCESS)".
std::string capability_label(uint64_t capability);

// Comparisons that name the codes: "r[0] is CONVEYOR_OK (0), expected
// CONVEYOR_E_LEASE_LOST (3)". Use through EXPECT_STATUS / EXPECT_STATE.
::testing::AssertionResult status_is(const char* actual_expr, const char* expected_expr,
                                     conveyor_status actual, conveyor_status expected);
::testing::AssertionResult state_is(const char* actual_expr, const char* expected_expr,
                                    int32_t actual, int32_t expected);

class ConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  const PluginInfo& info() const { return plugin_->info(); }
  const conveyor_storage_plugin& table() const { return plugin_->table(); }
  bool has(uint64_t capability) const { return (info().capabilities & capability) != 0; }
  const OptionList& options() const { return storage_->options(); }

  // Opens a handle on this test's storage and (by default) migrates it. The
  // first handle of a test also checks that the storage starts empty. Throws
  // CallFailed when open or migrate fails.
  std::unique_ptr<Handle> open(bool migrate = true);
  // open's raw outcome with options() + extra; *out as the plugin left it.
  Status open_raw(const OptionList& extra, conveyor_storage** out);

  std::shared_ptr<const Plugin> plugin_;
  std::unique_ptr<FreshStorage> storage_;

 private:
  int opened_ = 0;
};

}  // namespace conveyor::conformance

#define EXPECT_STATUS(actual, expected) \
  EXPECT_PRED_FORMAT2(::conveyor::conformance::status_is, actual, expected)
#define ASSERT_STATUS(actual, expected) \
  ASSERT_PRED_FORMAT2(::conveyor::conformance::status_is, actual, expected)
#define EXPECT_STATE(actual, expected) \
  EXPECT_PRED_FORMAT2(::conveyor::conformance::state_is, actual, expected)

// Skips a test of an optional slot unless the plugin implements the minor
// that introduced it and fills the slot (every slot after 1.0 is optional:
// storage_plugin.h rule 2). member is the slot's name in
// conveyor_storage_plugin: a name the slot list (storage_slots.hpp) lacks
// does not compile, and the minor comes from that list.
#define CONFORMANCE_REQUIRE_SLOT(handle, member)                                             \
  do {                                                                                       \
    constexpr ::conveyor::host::StorageSlot conformance_slot_ =                              \
        ::conveyor::host::slot_named(#member);                                               \
    constexpr uint32_t conformance_minor_ = ::conveyor::host::slot_minor(conformance_slot_); \
    if (info().abi_minor < conformance_minor_)                                               \
      GTEST_SKIP() << "needs ABI 1." << conformance_minor_ << " (slot " #member              \
                   << "); the plugin implements ABI " << info().abi_major << "."             \
                   << info().abi_minor;                                                      \
    if (!(handle)->has_slot(conformance_slot_))                                              \
      GTEST_SKIP() << "needs slot " #member " (ABI 1." << conformance_minor_                 \
                   << "), which the plugin leaves NULL";                                     \
  } while (0)

// Skips the test, saying which capability it needs, unless the plugin
// advertises it. Tests are chosen by capabilities, never by plugin name.
#define CONFORMANCE_REQUIRE(capability)                                                            \
  do {                                                                                             \
    if (!has(capability))                                                                          \
      GTEST_SKIP() << "needs capability " << ::conveyor::conformance::capability_label(capability) \
                   << ", which the plugin does not advertise";                                     \
  } while (0)
