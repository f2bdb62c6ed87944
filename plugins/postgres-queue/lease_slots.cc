#include "lease_slots.hpp"

#include "pg_rows.hpp"
#include "pg_run.hpp"
#include "pg_text.hpp"

#include <pqxx/nontransaction>
#include <pqxx/result>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

namespace conveyor::pgqueue {

void LeaseSlots::remember(int64_t job_id, int64_t lease_token, int32_t slot) {
  std::lock_guard lock(mu_);
  if (slots_.size() >= kMaxRemembered) slots_.clear();
  slots_[{job_id, lease_token}] = slot;
}

int32_t LeaseSlots::slot_of(int64_t job_id, int64_t lease_token) {
  std::lock_guard lock(mu_);
  auto it = slots_.find({job_id, lease_token});
  return it == slots_.end() ? kUnknown : it->second;
}

void LeaseSlots::forget(int64_t job_id, int64_t lease_token) {
  std::lock_guard lock(mu_);
  slots_.erase({job_id, lease_token});
}

void run_slotted_lease_batch(postgres::ConnectionPool& pool, LeaseSlots& slots, const char* op,
                             const char* statement, std::span<const conveyor_lease> leases,
                             int64_t value, bool close, std::span<conveyor_status> results) {
  // Sorted by job id: concurrent batches over the same jobs lock them in one
  // order.
  std::vector<std::tuple<int64_t, int64_t, int64_t>> sorted;
  sorted.reserve(leases.size());
  for (const conveyor_lease& l : leases)
    sorted.emplace_back(l.job_id, l.lease_token, slots.slot_of(l.job_id, l.lease_token));
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> ids, tokens, slot_of;
  for (const auto& [id, token, slot] : sorted) {
    ids.push_back(id);
    tokens.push_back(token);
    slot_of.push_back(slot);
  }
  const std::string ids_text = postgres::bigint_array(ids),
                    tokens_text = postgres::bigint_array(tokens),
                    slots_text = postgres::bigint_array(slot_of);
  std::vector<std::pair<int64_t, int64_t>> current;  // (id, token) the statement applied to
  postgres::run_on_pool(pool, op, postgres::Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(statement, value, ids_text, tokens_text, slots_text);
    current.clear();
    current.reserve(r.size());
    for (const auto& row : r)
      current.emplace_back(postgres::int_at(row, 0), postgres::int_at(row, 1));
  });
  std::sort(current.begin(), current.end());
  for (size_t i = 0; i < leases.size(); ++i) {
    const bool applied = std::binary_search(current.begin(), current.end(),
                                            std::pair(leases[i].job_id, leases[i].lease_token));
    results[i] = applied ? CONVEYOR_OK : CONVEYOR_E_LEASE_LOST;
    if (close) slots.forget(leases[i].job_id, leases[i].lease_token);
  }
}

}  // namespace conveyor::pgqueue
