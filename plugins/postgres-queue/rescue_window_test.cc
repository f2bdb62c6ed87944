// The rescue window: which expired claims a rescue looks at (no server).
#include "rescue_window.hpp"

#include <gtest/gtest.h>

namespace conveyor::pgqueue {
namespace {

using namespace std::chrono_literals;
constexpr int64_t kSec = 1'000'000;

TEST(RescueWindow, LooksAtLeasesExpiredSinceTheLastCompleteRescueAndAllOfThemEachMinute) {
  RescueWindow::Clock::time_point now{};
  RescueWindow w([&] { return now; });
  const int64_t t = 1'800'000'000 * kSec;
  // The first rescue looks at every claim.
  ASSERT_EQ(w.floor(t), RescueWindow::kAll);
  w.scanned(RescueWindow::kAll, t, true);
  // The next ones from where the last complete one got to, less the overlap.
  now += 1s;
  EXPECT_EQ(w.floor(t + kSec), t - RescueWindow::kOverlapUs);
  w.scanned(t - RescueWindow::kOverlapUs, t + kSec, true);
  now += 1s;
  EXPECT_EQ(w.floor(t + 2 * kSec), t + kSec - RescueWindow::kOverlapUs);
  // One that stopped at its limit moves nothing: the next starts there again.
  w.scanned(t + kSec - RescueWindow::kOverlapUs, t + 2 * kSec, false);
  EXPECT_EQ(w.floor(t + 3 * kSec), t + kSec - RescueWindow::kOverlapUs);
  // A host clock that went back never makes the window start after now.
  EXPECT_EQ(w.floor(t), t - RescueWindow::kOverlapUs);
  // A minute after the last full scan, a full one again.
  now += RescueWindow::kFullScanPeriod;
  EXPECT_EQ(w.floor(t + 62 * kSec), RescueWindow::kAll);
  // Until it completes, every rescue is a full one.
  w.scanned(RescueWindow::kAll, t + 62 * kSec, false);
  EXPECT_EQ(w.floor(t + 63 * kSec), RescueWindow::kAll);
  w.scanned(RescueWindow::kAll, t + 63 * kSec, true);
  EXPECT_EQ(w.floor(t + 64 * kSec), t + 63 * kSec - RescueWindow::kOverlapUs);
}

}  // namespace
}  // namespace conveyor::pgqueue
