// UnservedKinds against the real SQLite plugin through the real loader, with
// a FaultInjectingStorage counting its list_jobs calls and a ManualClock.
#include "unserved_kinds.hpp"

#include "testing/fault_injecting_storage.hpp"

#include <conveyor/host/plugin_loader.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using testing::FaultInjectingStorage;
using testing::StorageOp;

TEST(UnservedKinds, AQueueWhosePendingJobsAreAllYoungerThanTheGraceIsNotListed) {
  const fs::path dir =
      fs::temp_directory_path() / ("conveyor-unserved-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    const auto plugin = load_plugin(fs::path(CONVEYOR_TEST_PLUGIN_DIR) / "libconveyor-sqlite.so");
    FaultInjectingStorage storage(Storage::open(plugin, {{"path", (dir / "q.db").string()}}));
    ManualClock clock;
    ServedKinds served;
    served.add("work");
    UnservedKinds unserved(storage, served, clock, 60s);
    std::vector<NewJob> jobs(3);
    for (NewJob& j : jobs) {
      j.queue = "mail";
      j.kind = "send_email";
      j.run_at_us = clock.wall_now_us();
    }
    storage.enqueue(jobs, clock.wall_now_us());

    unserved.scan();
    clock.advance(59s);
    unserved.scan();
    EXPECT_EQ(storage.calls(StorageOp::kListJobs), 0u) << "every pending job is within the grace";
    EXPECT_TRUE(unserved.report().empty());

    clock.advance(1s);
    unserved.scan();
    EXPECT_EQ(storage.calls(StorageOp::kListJobs), 1u);
    const auto report = unserved.report();
    ASSERT_EQ(report.count("mail"), 1u);
    EXPECT_EQ(report.at("mail"), (std::vector<KindCount>{{"send_email", 3}}));
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace conveyor
