#include "hint_prober.hpp"

#include "connection_pool.hpp"
#include "pg_rows.hpp"
#include "pg_run.hpp"
#include "queue_schema.hpp"

#include <pqxx/nontransaction>

#include <optional>

namespace conveyor::pgqueue {

HintProber::HintProber(postgres::ConnectionPool& pool, ClaimHints& hints)
    : pool_(pool), hints_(hints), thread_(kTick, [this] {
        while (std::optional<std::string> queue = hints_.next_probe()) probe(*queue);
      }) {}

void HintProber::probe(const std::string& queue) noexcept {
  const auto started = ClaimHints::Clock::now();
  std::optional<ClaimKey> lowest;
  int64_t moves = -1;
  try {
    postgres::run_on_pool(
        pool_, "probing the claim order", postgres::Retry::kNever, [&](pqxx::connection& c) {
          pqxx::nontransaction tx(c);
          pqxx::result r = tx.exec_prepared(stmt::kProbe, queue);
          moves = postgres::int_at(r[0], 0);
          lowest.reset();
          if (!r[0][1].is_null())
            lowest = ClaimKey{postgres::int32_at(r[0], 1), postgres::int_at(r[0], 2),
                              postgres::int_at(r[0], 3)};
        });
  } catch (...) {
    return;  // due again after its period; claims go on from their hints
  }
  hints_.probed(queue, lowest ? &*lowest : nullptr, moves, ClaimHints::Clock::now() - started);
}

}  // namespace conveyor::pgqueue
