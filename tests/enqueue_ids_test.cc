// `conveyor enqueue --count` prints the ids it committed, and only calls them
// a range when they are one: two enqueues at once on PostgreSQL share the id
// sequence, so their ids can interleave. Checked against the rows stored.
//
// Needs CONVEYOR_TEST_PG_DSN (skipped without it, failed without it when
// CI=true) and psql to read the ids back.
#include "pg_test_env.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <thread>
#include <vector>

namespace conveyor {
namespace {

using nlohmann::json;

class EnqueueIds : public ::testing::Test {
 protected:
  void SetUp() override {
    CONVEYOR_NEED_PG_DSN();
    dsn_ = *test::pg_dsn();
    schema_ = test::fresh_schema_name("ids_");
    config_ = test::write_postgres_config(dir_, "postgres", dsn_, schema_);
  }
  void TearDown() override { test::drop_schema(dsn_, schema_); }

  // The stored ids of queue as runs [first, last] of consecutive ids.
  json stored_runs(const std::string& queue) {
    json runs = json::array();
    for (const std::string& line :
         test::psql(dsn_, "SELECT id FROM \"" + schema_ + "\".jobs WHERE queue = '" + queue +
                              "' ORDER BY id")) {
      const int64_t id = std::stoll(line);
      if (!runs.empty() && runs.back()[1].get<int64_t>() + 1 == id) {
        runs.back()[1] = id;
      } else {
        runs.push_back(json::array({id, id}));
      }
    }
    return runs;
  }

  test::TempDir dir_;
  std::string dsn_, schema_;
  std::filesystem::path config_;
};

TEST_F(EnqueueIds, ConcurrentCountEnqueuesPrintTheIdsTheyGot) {
  ASSERT_EQ(test::run_conveyor({"--config", config_.string(), "queues"}).exit_code, 0);
  constexpr int kCount = 20000;
  test::CommandResult out[2];
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] {
      out[i] = test::run_conveyor({"--config", config_.string(), "--json", "enqueue",
                                   i == 0 ? "a" : "b", "noop", "--count", std::to_string(kCount)});
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 2; ++i) {
    const std::string queue = i == 0 ? "a" : "b";
    SCOPED_TRACE(queue);
    ASSERT_EQ(out[i].exit_code, 0) << out[i].err;
    const json printed = json::parse(out[i].out);
    const json stored = stored_runs(queue);
    EXPECT_EQ(printed["count"], kCount);
    EXPECT_EQ(printed["first_id"], stored.front()[0]);
    EXPECT_EQ(printed["last_id"], stored.back()[1]);
    EXPECT_EQ(printed.value("contiguous", true), stored.size() == 1) << printed.dump();
    if (stored.size() > 1) {
      EXPECT_EQ(printed["id_ranges"], stored);
    }
  }
  // And as text: "ids A..B" only for one range.
  auto r =
      test::run_conveyor({"--config", config_.string(), "enqueue", "c", "noop", "--count", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json c = stored_runs("c");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(r.out, "enqueued 3 jobs on queue c (ids " + std::to_string(c[0][0].get<int64_t>()) +
                       ".." + std::to_string(c[0][1].get<int64_t>()) + ")\n");
}

}  // namespace
}  // namespace conveyor
