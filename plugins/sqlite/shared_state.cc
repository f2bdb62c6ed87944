// swap_shared_state, add_shared_state, add_shared_states and
// delete_shared_states: key -> (version, value) records, changed atomically
// across processes by the file's write lock.
#include <cstddef>
#include <span>
#include <string>
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

// add_shared_state's step on key's record, inside the caller's write
// transaction: the record as it is after the add, and the count.
sdk::SharedAddResult apply_add(Connection& c, std::string_view key, const sdk::SharedAdd& add) {
  const sdk::SharedRecord cur = read_shared(c, key);
  const sdk::SharedAddOutcome o = sdk::apply_shared_add(cur.value, add);
  if (o.count == 0) return sdk::SharedAddResult{cur.version, cur.value, 0};
  write_shared(c, key, cur.version + 1, o.value);
  return sdk::SharedAddResult{cur.version + 1, o.value, o.count};
}

// The least string above every string that starts with prefix (bytewise):
// prefix without its trailing 0xff bytes, its last byte then incremented.
// A prefix of 0xff bytes only has no such string: then 0xff repeated
// CONVEYOR_SHARED_KEY_MAX + 1 times, above every key (keys have at most
// CONVEYOR_SHARED_KEY_MAX bytes), and every key from the prefix on starts
// with it.
std::string prefix_successor(std::string_view prefix) {
  std::string s(prefix);
  while (!s.empty() && static_cast<unsigned char>(s.back()) == 0xff) s.pop_back();
  if (s.empty()) return std::string(CONVEYOR_SHARED_KEY_MAX + 1, '\xff');
  s.back() = static_cast<char>(static_cast<unsigned char>(s.back()) + 1);
  return s;
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
  db_.write_txn("add_shared_state", [&](Connection& c) { r = apply_add(c, key, add); });
  return r;
}

void SqliteStorage::add_shared_states(std::span<const sdk::KeyedAdd> adds,
                                      std::span<sdk::SharedAddResult> out) {
  if (adds.empty()) return;
  // Every add in one write transaction (one commit, one fsync): each is
  // atomic on its key as add_shared_state's, and an add that gets nothing
  // changes nothing and stops no other. The adapter checked the arguments
  // and that the keys are distinct. On a busy retry fn runs again from the
  // start and writes every out[i] again.
  db_.write_txn("add_shared_states", [&](Connection& c) {
    for (std::size_t i = 0; i < adds.size(); ++i) out[i] = apply_add(c, adds[i].key, adds[i].add);
  });
}

uint32_t SqliteStorage::delete_shared_states(std::string_view prefix, int64_t value_below,
                                             uint32_t limit) {
  if (prefix.empty()) throw sdk::Error(CONVEYOR_E_INVALID, "delete_shared_states: prefix is empty");
  if (limit == 0) return 0;
  const std::string upper = prefix_successor(prefix);
  uint32_t deleted = 0;
  // One DELETE in a write transaction: a swap or an add on the same key is
  // wholly before it (a record moved to value_below or above stays) or
  // wholly after (it finds no record: (0, 0)).
  db_.write_txn("delete_shared_states", [&](Connection& c) {
    SQLite::Statement& st = c.get<sql::kDeleteSharedStates>();
    ResetOnExit reset(st);
    bind_text(st, 1, prefix);
    bind_text(st, 2, upper);
    st.bind(3, static_cast<int64_t>(value_below));
    st.bind(4, static_cast<int64_t>(limit));
    deleted = static_cast<uint32_t>(st.exec());
  });
  return deleted;
}

}  // namespace conveyor::sqlite
