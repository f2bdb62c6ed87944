// list_ready_keys: the keys of a queue with ready jobs, for the host's fair
// turns between keys (ABI 1.4).
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "arguments.hpp"
#include "sqlite_storage.hpp"
#include "values.hpp"

namespace conveyor::sqlite {

using sdk::OwnedReadyKey;

uint32_t SqliteStorage::list_ready_keys(std::string_view queue,
                                        std::optional<std::string_view> after_key, uint32_t limit,
                                        uint32_t count_limit, int64_t now_us,
                                        const sdk::ReadyKeySink& sink) {
  require_queue(queue, "list_ready_keys");
  // kReadyKeys' lower bound: every key from the empty one, or the keys after
  // after_key (after_key + NUL is the least key above it, bytewise).
  std::string from;
  if (after_key) {
    from.assign(*after_key);
    from.push_back('\0');
  }
  std::vector<OwnedReadyKey> keys;
  db_.read("list_ready_keys", [&](Connection& c) {
    keys.clear();
    SQLite::Statement& st = c.get<sql::kReadyKeys>();
    ResetOnExit reset(st);
    bind_text(st, 1, queue);
    bind_text(st, 2, from);
    st.bind(3, static_cast<int64_t>(now_us));
    st.bind(4, static_cast<int64_t>(count_limit));
    // The walk goes one key further per row stepped: it stops here.
    while (keys.size() < limit && st.executeStep()) {
      const int64_t ready = st.getColumn(1).getInt64();
      if (ready == 0) continue;  // available jobs, all scheduled for later
      keys.push_back(OwnedReadyKey{column_text(st, 0), ready});
    }
  });
  for (const OwnedReadyKey& k : keys) {
    conveyor_ready_key v = k.view();
    sink(v);
  }
  return static_cast<uint32_t>(keys.size());
}

}  // namespace conveyor::sqlite
