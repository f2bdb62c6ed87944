// Permits: a unit's jobs in flight (at most its max_workers) and the
// engine-wide worker slots (at most max_in_flight; local jobs only, and an
// asynchronous handler's job only until it started). A freed permit wakes
// a parked unit, or a coalescing one once a batch of permits is free; a
// freed slot wakes the units waiting for one. Thread-safe unless noted.
#pragma once

#include "dispatch_unit.hpp"
#include "unit_scheduler.hpp"

#include <atomic>
#include <cstdint>

namespace conveyor {

class Permits {
 public:
  Permits(uint32_t max_in_flight, UnitScheduler& scheduler)
      : max_in_flight_(max_in_flight), scheduler_(scheduler) {}

  // What r may take now: of its own permits, and of the engine's slots.
  struct Free {
    uint32_t unit = 0;
    uint32_t engine = 0;
  };
  Free free(const QueueRunner& r) const;
  // Takes n of r's permits, and for local jobs n engine-wide slots.
  void take(QueueRunner& r, uint32_t n, bool local);
  // Frees one of r's permits (and, for a local job, its slot).
  void release(QueueRunner& r, bool local);
  // Frees n of r's permits of local jobs.
  void release_local(QueueRunner& r, uint32_t n);
  // A local job left its engine-wide slot (its permit is kept).
  void left_slot();
  // Dispatcher thread: r waits for one of its permits (kParked), or for an
  // engine-wide slot (kWaitingForSlot). Each re-checks after listing r, so
  // a permit or slot freed meanwhile still wakes it.
  void park(QueueRunner& r);
  void wait_for_slot(QueueRunner& r);

  uint32_t slots_taken() const { return slots_taken_.load(); }

 private:
  const uint32_t max_in_flight_;
  UnitScheduler& scheduler_;
  std::atomic<uint32_t> slots_taken_{0};
};

}  // namespace conveyor
