#include "final_counts.hpp"

#include "connection.hpp"
#include "values.hpp"

namespace conveyor::sqlite {

void FinalCounts::apply(Connection& c) {
  SQLite::Statement& st = c.get<sql::kAddCount>();
  for (const auto& [key, n] : delta_) {
    if (n == 0) continue;
    ResetOnExit reset(st);
    bind_text(st, 1, key.first);
    st.bind(2, key.second);
    st.bind(3, static_cast<int64_t>(n));
    st.exec();
  }
  delta_.clear();
}

}  // namespace conveyor::sqlite
