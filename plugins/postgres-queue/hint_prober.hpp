// The periodic claim-hint probe (claim_hints.hpp), on a thread of its own so
// that no claim waits for it: every tick it asks ClaimHints for the queues
// due, one at a time (ClaimHints paces them), finds each one's first
// unclaimed entry from the beginning of the queue's claim order
// (stmt::kProbe, a read: no lock, no new tuple) and hands it back with what
// the walk cost.
#ifndef CONVEYOR_PLUGINS_POSTGRES_QUEUE_HINT_PROBER_HPP
#define CONVEYOR_PLUGINS_POSTGRES_QUEUE_HINT_PROBER_HPP

#include "claim_hints.hpp"
#include "periodic_thread.hpp"

#include <chrono>
#include <string>

namespace conveyor::postgres {
class ConnectionPool;
}

namespace conveyor::pgqueue {

// Runs the due probes every tick until destroyed. A probe that fails (the
// server is away) is simply due again later: a hint is only a shortcut.
class HintProber {
 public:
  static constexpr std::chrono::milliseconds kTick{100};

  HintProber(postgres::ConnectionPool& pool, ClaimHints& hints);

 private:
  void probe(const std::string& queue) noexcept;

  postgres::ConnectionPool& pool_;
  ClaimHints& hints_;
  PeriodicThread thread_;  // last: stopped before the members it uses go
};

}  // namespace conveyor::pgqueue

#endif  // CONVEYOR_PLUGINS_POSTGRES_QUEUE_HINT_PROBER_HPP
