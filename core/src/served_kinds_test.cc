#include "served_kinds.hpp"

#include <gtest/gtest.h>

namespace conveyor {
namespace {

TEST(ServedKinds, AKindStaysServedUntilEveryConsumerOfItIsGone) {
  ServedKinds served;
  const uint64_t g0 = served.generation();
  EXPECT_TRUE(served.snapshot()->empty());
  served.add("email");
  served.add("resize");
  served.add("email");  // a second consumer (say a remote worker)
  EXPECT_EQ(*served.snapshot(), (std::vector<std::string>{"email", "resize"}));
  const uint64_t g1 = served.generation();
  EXPECT_NE(g1, g0);
  served.remove("email");
  EXPECT_TRUE(served.contains("email")) << "one consumer left";
  EXPECT_EQ(served.generation(), g1) << "the set did not change";
  served.remove("email");
  EXPECT_FALSE(served.contains("email"));
  EXPECT_NE(served.generation(), g1);
  EXPECT_EQ(*served.snapshot(), (std::vector<std::string>{"resize"}));
  served.remove("never-added");
  EXPECT_EQ(*served.snapshot(), (std::vector<std::string>{"resize"}));
}

TEST(ServedKinds, ASnapshotDoesNotChangeUnderItsReader) {
  ServedKinds served;
  served.add("a");
  const ServedKinds::Snapshot before = served.snapshot();
  served.add("b");
  EXPECT_EQ(*before, (std::vector<std::string>{"a"}));
  EXPECT_EQ(*served.snapshot(), (std::vector<std::string>{"a", "b"}));
}

}  // namespace
}  // namespace conveyor
