// The wakes a PostgreSQL listener owes for delayed jobs: the later channel's
// payload, and the bounded set that hands each queue back once its time came.
#include "due_wakes.hpp"

#include <gtest/gtest.h>

namespace conveyor::postgres {
namespace {

TEST(LaterPayload, RoundTripsTimeAndQueueWithSpaces) {
  const std::string p = later_payload(1'700'000'000'123'456, "mail out");
  EXPECT_EQ(p, "1700000000123456 mail out");
  auto parsed = parse_later_payload(p);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->first, 1'700'000'000'123'456);
  EXPECT_EQ(parsed->second, "mail out");
}

TEST(LaterPayload, AnythingElseIsIgnored) {
  for (const char* bad :
       {"", "mail", " mail", "12 ", "12x mail", "x12 mail", "99999999999999999999 q"})
    EXPECT_FALSE(parse_later_payload(bad)) << "'" << bad << "'";
}

TEST(DueWakes, HandsEachQueueBackOnceItsTimeCame) {
  DueWakes w;
  EXPECT_FALSE(w.next());
  w.add(300, "b");
  w.add(100, "a");
  w.add(200, "a");
  w.add(100, "a");  // a repeat is one entry
  EXPECT_EQ(w.size(), 3u);
  EXPECT_EQ(w.next(), 100);
  EXPECT_TRUE(w.take_due(99).empty());
  EXPECT_EQ(w.take_due(250), (std::vector<std::string>{"a"})) << "once, though owed twice";
  EXPECT_EQ(w.next(), 300);
  EXPECT_EQ(w.take_due(300), (std::vector<std::string>{"b"}));
  EXPECT_FALSE(w.next());
}

TEST(DueWakes, PastTheBoundTheLatestAreDropped) {
  DueWakes w;
  for (size_t i = 0; i < DueWakes::kMaxEntries; ++i) w.add(static_cast<int64_t>(i) + 10, "q");
  w.add(5, "early");  // kept: the latest goes instead
  w.add(static_cast<int64_t>(DueWakes::kMaxEntries) + 100, "late");  // dropped at once
  EXPECT_EQ(w.size(), DueWakes::kMaxEntries);
  EXPECT_EQ(w.dropped(), 2u);
  EXPECT_EQ(w.next(), 5);
  auto all = w.take_due(INT64_MAX);
  EXPECT_EQ(all, (std::vector<std::string>{"early", "q"}));
}

}  // namespace
}  // namespace conveyor::postgres
