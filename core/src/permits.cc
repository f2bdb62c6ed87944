#include "permits.hpp"

namespace conveyor {

Permits::Free Permits::free(const QueueRunner& r) const {
  const uint32_t in_flight = r.in_flight.load(std::memory_order_acquire);
  const uint32_t total = slots_taken_.load(std::memory_order_acquire);
  return {in_flight >= r.max_workers ? 0 : r.max_workers - in_flight,
          total >= max_in_flight_ ? 0 : max_in_flight_ - total};
}

void Permits::take(QueueRunner& r, uint32_t n, bool local) {
  r.in_flight.fetch_add(n, std::memory_order_acq_rel);
  if (local) slots_taken_.fetch_add(n, std::memory_order_acq_rel);
}

void Permits::release(QueueRunner& r, bool local) {
  const uint32_t in_flight = r.in_flight.fetch_sub(1, std::memory_order_acq_rel) - 1;
  uint32_t wake_below = r.wake_below.load(std::memory_order_acquire);
  bool wake = wake_below != 0 && in_flight < wake_below &&
              r.wake_below.compare_exchange_strong(wake_below, 0, std::memory_order_acq_rel);
  // seq_cst: Engine::stop() reads it after a store, and wait_for_slot's
  // re-check pairs with it. Remote jobs hold no engine-wide slot.
  if (local) slots_taken_.fetch_sub(1);
  wake = r.parked.exchange(false, std::memory_order_acq_rel) || wake;
  if (wake) scheduler_.wake(r);
  if (local) scheduler_.slot_freed();
}

void Permits::release_local(QueueRunner& r, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) release(r, true);
}

void Permits::left_slot() {
  slots_taken_.fetch_sub(1);  // seq_cst: see release
  scheduler_.slot_freed();
}

void Permits::park(QueueRunner& r) {
  r.parked.store(true, std::memory_order_release);
  if (r.in_flight.load(std::memory_order_acquire) < r.max_workers &&
      r.parked.exchange(false, std::memory_order_acq_rel))
    scheduler_.wake(r);
}

void Permits::wait_for_slot(QueueRunner& r) {
  scheduler_.wait_for_slot(r, [this] { return slots_taken_.load() < max_in_flight_; });
}

}  // namespace conveyor
