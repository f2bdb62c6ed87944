// swap_shared_state and add_shared_state: key -> (version, value) records,
// changed atomically across processes by the file's write lock.
#include <string_view>

#include "sqlite_storage.hpp"
#include "values.hpp"

namespace conveyor::sqlite {
namespace {

// key's record, (0, 0) when never written.
sdk::SharedRecord read_shared(Connection& c, std::string_view key) {
  SQLite::Statement& st = c.get<sql::kSharedGet>();
  ResetOnExit reset(st);
  bind_text(st, 1, key);
  sdk::SharedRecord r;
  if (st.executeStep()) {
    r.version = st.getColumn(0).getInt64();
    r.value = st.getColumn(1).getInt64();
  }
  return r;
}

void write_shared(Connection& c, std::string_view key, int64_t version, int64_t value) {
  SQLite::Statement& put = c.get<sql::kSharedPut>();
  ResetOnExit reset(put);
  bind_text(put, 1, key);
  put.bind(2, static_cast<int64_t>(version));
  put.bind(3, static_cast<int64_t>(value));
  put.exec();
}

}  // namespace

sdk::SharedRecord SqliteStorage::swap_shared_state(std::string_view key, int64_t expected_version,
                                                   int64_t new_value) {
  sdk::SharedRecord r;
  if (expected_version < 0) {
    db_.read("swap_shared_state", [&](Connection& c) { r = read_shared(c, key); });
    return r;
  }
  // BEGIN IMMEDIATE takes the file's write lock first: the read and the write
  // below are one step for every connection in every process.
  db_.write_txn("swap_shared_state", [&](Connection& c) {
    r = read_shared(c, key);
    if (r.version != expected_version) return;
    write_shared(c, key, expected_version + 1, new_value);
    r = sdk::SharedRecord{expected_version + 1, new_value, true};
  });
  return r;
}

sdk::SharedAddResult SqliteStorage::add_shared_state(std::string_view key,
                                                     const sdk::SharedAdd& add) {
  sdk::SharedAddResult r;
  // One write transaction, as a swap: atomic across processes.
  db_.write_txn("add_shared_state", [&](Connection& c) {
    const sdk::SharedRecord cur = read_shared(c, key);
    const sdk::SharedAddOutcome o = sdk::apply_shared_add(cur.value, add);
    r = sdk::SharedAddResult{cur.version, cur.value, 0};
    if (o.count == 0) return;
    write_shared(c, key, cur.version + 1, o.value);
    r = sdk::SharedAddResult{cur.version + 1, o.value, o.count};
  });
  return r;
}

}  // namespace conveyor::sqlite
