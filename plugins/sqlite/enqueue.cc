// enqueue, enqueue_at, enqueue_costed and enqueue_keyed: new jobs get
// increasing ids and a place in their queue's block of places.
#include <algorithm>
#include <chrono>
#include <climits>
#include <string>
#include <string_view>
#include <vector>

#include "sqlite_storage.hpp"
#include "values.hpp"

namespace conveyor::sqlite {
namespace {

using sdk::Error;

// A queue's free places: next_pos up to (not including) end_pos; empty
// (next_pos == end_pos) until its first enqueue takes a block.
struct PlaceBlock {
  int64_t next_pos = 0;
  int64_t end_pos = 0;
};

int64_t wall_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void SqliteStorage::enqueue(std::span<const conveyor_new_job> jobs, std::span<int64_t> out_ids) {
  insert_jobs(jobs, {}, {}, wall_clock_us(), out_ids);
}

void SqliteStorage::enqueue_at(std::span<const conveyor_new_job> jobs, int64_t now_us,
                               std::span<int64_t> out_ids) {
  insert_jobs(jobs, {}, {}, now_us, out_ids);
}

void SqliteStorage::enqueue_costed(std::span<const conveyor_new_job_v2> jobs, int64_t now_us,
                                   std::span<int64_t> out_ids) {
  std::vector<conveyor_new_job> plain;
  std::vector<int32_t> costs;
  plain.reserve(jobs.size());
  costs.reserve(jobs.size());
  for (const conveyor_new_job_v2& j : jobs) {
    plain.push_back(j.job);
    costs.push_back(j.cost);
  }
  insert_jobs(plain, costs, {}, now_us, out_ids);
}

void SqliteStorage::enqueue_keyed(std::span<const conveyor_new_job_v3> jobs, int64_t now_us,
                                  std::span<int64_t> out_ids) {
  std::vector<conveyor_new_job> plain;
  std::vector<int32_t> costs;
  std::vector<std::string_view> keys;
  plain.reserve(jobs.size());
  costs.reserve(jobs.size());
  keys.reserve(jobs.size());
  for (const conveyor_new_job_v3& j : jobs) {
    plain.push_back(j.job.job);
    costs.push_back(j.job.cost);
    keys.push_back(sdk::view(j.key));  // its length checked by the adapter
  }
  insert_jobs(plain, costs, keys, now_us, out_ids);
}

void SqliteStorage::enqueue_timed(std::span<const conveyor_new_job_v4> jobs, int64_t now_us,
                                  std::span<int64_t> out_ids) {
  std::vector<conveyor_new_job> plain;
  std::vector<int32_t> costs;
  std::vector<std::string_view> keys;
  std::vector<int64_t> timeouts;
  plain.reserve(jobs.size());
  costs.reserve(jobs.size());
  keys.reserve(jobs.size());
  timeouts.reserve(jobs.size());
  for (const conveyor_new_job_v4& j : jobs) {
    plain.push_back(j.job.job.job);
    costs.push_back(j.job.job.cost);
    keys.push_back(sdk::view(j.job.key));  // lengths and ranges checked by the adapter
    timeouts.push_back(j.timeout_ms);
  }
  insert_jobs(plain, costs, keys, now_us, out_ids, timeouts);
}

void SqliteStorage::insert_jobs(std::span<const conveyor_new_job> jobs,
                                std::span<const int32_t> costs,
                                std::span<const std::string_view> keys, int64_t created,
                                std::span<int64_t> out_ids, std::span<const int64_t> timeouts) {
  for (size_t i = 0; i < jobs.size(); ++i) {
    const conveyor_new_job& j = jobs[i];
    const std::string where = "enqueue: job " + std::to_string(i) + ": ";
    if (sdk::view(j.queue).empty()) throw Error(CONVEYOR_E_INVALID, where + "queue is empty");
    if (sdk::view(j.kind).empty()) throw Error(CONVEYOR_E_INVALID, where + "kind is empty");
    if (j.max_attempts < 1)
      throw Error(CONVEYOR_E_INVALID,
                  where + "max_attempts must be >= 1, got " + std::to_string(j.max_attempts));
    if ((j.payload.data == nullptr && j.payload.len != 0) ||
        (j.queue.data == nullptr && j.queue.len != 0) ||
        (j.kind.data == nullptr && j.kind.len != 0))
      throw Error(CONVEYOR_E_INVALID, where + "NULL string with non-zero length");
    if (j.payload.len > static_cast<size_t>(INT_MAX))
      throw Error(CONVEYOR_E_INVALID, where + "payload larger than 2 GiB");
  }
  // The distinct queues of the batch, registered for list_queues.
  std::vector<std::string_view> queues;
  for (const conveyor_new_job& j : jobs) {
    std::string_view q = sdk::view(j.queue);
    if (queues.empty() || queues.back() != q) queues.push_back(q);
  }
  std::sort(queues.begin(), queues.end());
  queues.erase(std::unique(queues.begin(), queues.end()), queues.end());
  std::vector<int64_t> ids(jobs.size());
  db_.write_txn("enqueue", [&](Connection& c) {
    // Each queue's free places, read once per batch and written back after.
    std::vector<PlaceBlock> blocks(queues.size());
    for (size_t q = 0; q < queues.size(); ++q) {
      {
        SQLite::Statement& reg = c.get<sql::kRegisterQueue>();
        ResetOnExit reset(reg);
        bind_text(reg, 1, queues[q]);
        reg.exec();
      }
      SQLite::Statement& st = c.get<sql::kQueueBlock>();
      ResetOnExit reset(st);
      bind_text(st, 1, queues[q]);
      if (st.executeStep()) blocks[q] = {st.getColumn(0).getInt64(), st.getColumn(1).getInt64()};
    }
    int64_t first_id = 0;
    {
      SQLite::Statement& st = c.get<sql::kTakeIds>();
      ResetOnExit reset(st);
      st.bind(1, static_cast<int64_t>(jobs.size()));
      if (!st.executeStep()) throw Error(CONVEYOR_E_INTERNAL, "enqueue: meta.last_job_id missing");
      first_id = st.getColumn(0).getInt64() - static_cast<int64_t>(jobs.size()) + 1;
    }
    SQLite::Statement& st = c.get<sql::kInsertJob>();
    for (size_t i = 0; i < jobs.size(); ++i) {
      const conveyor_new_job& j = jobs[i];
      PlaceBlock& block = blocks[static_cast<size_t>(
          std::lower_bound(queues.begin(), queues.end(), sdk::view(j.queue)) - queues.begin())];
      if (block.next_pos == block.end_pos) {
        const int64_t n = query_int<sql::kTakeBlock>(c);
        block.next_pos = n << kBlockBits;
        block.end_pos = (n + 1) << kBlockBits;
      }
      ids[i] = first_id + static_cast<int64_t>(i);
      ResetOnExit reset(st);
      st.bind(9, block.next_pos++);
      st.bind(10, ids[i]);
      bind_text(st, 1, sdk::view(j.queue));
      bind_text(st, 2, sdk::view(j.kind));
      bind_blob(st, 3, sdk::view(j.payload));
      st.bind(4, j.priority);
      st.bind(5, j.max_attempts);
      st.bind(6, static_cast<int64_t>(j.run_at_us));
      st.bind(7, static_cast<int64_t>(created));
      st.bind(8, costs.empty() ? 1 : costs[i]);
      bind_text(st, 11, keys.empty() ? std::string_view{} : keys[i]);
      st.bind(12, timeouts.empty() ? int64_t{0} : timeouts[i]);
      st.exec();
    }
    SQLite::Statement& set = c.get<sql::kSetQueueBlock>();
    for (size_t q = 0; q < queues.size(); ++q) {
      ResetOnExit reset(set);
      bind_text(set, 1, queues[q]);
      set.bind(2, blocks[q].next_pos);
      set.bind(3, blocks[q].end_pos);
      set.exec();
    }
  });
  std::copy(ids.begin(), ids.end(), out_ids.begin());
}

}  // namespace conveyor::sqlite
