// The lease slot memo (no server needed).
#include "lease_slots.hpp"

#include <gtest/gtest.h>

namespace conveyor::pgqueue {
namespace {

TEST(LeaseSlots, KnowsTheSlotOfEachOwnClaimUntilItIsForgotten) {
  LeaseSlots slots;
  EXPECT_EQ(slots.slot_of(1, 7), LeaseSlots::kUnknown);
  slots.remember(1, 7, 3);
  slots.remember(1, 8, 5);  // the same job claimed again under another token
  EXPECT_EQ(slots.slot_of(1, 7), 3);
  EXPECT_EQ(slots.slot_of(1, 8), 5);
  EXPECT_EQ(slots.slot_of(2, 7), LeaseSlots::kUnknown);
  slots.forget(1, 7);
  EXPECT_EQ(slots.slot_of(1, 7), LeaseSlots::kUnknown);
  EXPECT_EQ(slots.slot_of(1, 8), 5);
}

}  // namespace
}  // namespace conveyor::pgqueue
