// `conveyor serve` whose SQLite file is removed, or overwritten in place,
// while it runs: it must neither acknowledge writes into the lost file nor
// retry forever. It stops with exit 1 and a fatal message naming the file.
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace conveyor {
namespace {

namespace fs = std::filesystem;

enum class Loss { kRemoved, kOverwritten };

class ServeStorageLoss : public ::testing::TestWithParam<Loss> {};

TEST_P(ServeStorageLoss, ServeExitsOneWithAFatalMessageNamingTheFile) {
  test::TempDir dir;
  test::ServeProcess server(dir, "[engine]\npoll_interval_ms = 50\n",
                            "allow_unauthenticated = true\n");
  ASSERT_TRUE(server.ready()) << server.process().stderr_text();
  // A queue with a job: the dispatcher claims from it, maintenance runs too.
  const auto put =
      test::run_conveyor({"--config", (dir / "conveyor.toml").string(), "enqueue", "q", "noop"});
  ASSERT_EQ(put.exit_code, 0) << put.err;
  const fs::path db = dir / "conveyor.db";
  if (GetParam() == Loss::kRemoved) {
    ASSERT_TRUE(fs::remove(db));
  } else {
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.is_open());
    f << std::string(8192, 'g');  // same file, no truncation
  }
  // The engine declares storage broken after 10 failures in a row spanning at
  // least 5 s (claims back off up to 5 s apart): 90 s is a generous bound.
  const int code = server.process().wait(std::chrono::seconds(90));
  const std::string err = server.process().stderr_text();
  ASSERT_EQ(code, 1) << err;
  EXPECT_NE(err.find("storage cannot be used"), std::string::npos) << err;
  EXPECT_NE(err.find(GetParam() == Loss::kRemoved ? "was removed" : "was overwritten"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find(db.string()), std::string::npos) << err;
}

INSTANTIATE_TEST_SUITE_P(Sqlite, ServeStorageLoss,
                         ::testing::Values(Loss::kRemoved, Loss::kOverwritten),
                         [](const auto& info) {
                           return info.param == Loss::kRemoved ? "FileRemoved"
                                                               : "FileOverwrittenInPlace";
                         });

}  // namespace
}  // namespace conveyor
