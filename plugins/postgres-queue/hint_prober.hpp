// The periodic claim-hint probe (claim_hints.hpp), on a thread of its own so
// that no claim waits for it: every tick it asks ClaimHints which queues are
// due, finds each one's first unclaimed entry from the beginning of the
// queue's claim order (stmt::kProbe, a read: no lock, no new tuple) and hands
// it back with what the walk cost.
#ifndef CONVEYOR_PLUGINS_POSTGRES_QUEUE_HINT_PROBER_HPP
#define CONVEYOR_PLUGINS_POSTGRES_QUEUE_HINT_PROBER_HPP

#include "claim_hints.hpp"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

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
  ~HintProber();
  HintProber(const HintProber&) = delete;
  HintProber& operator=(const HintProber&) = delete;

 private:
  void loop();
  void probe(const std::string& queue);

  postgres::ConnectionPool& pool_;
  ClaimHints& hints_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // mu_
  std::thread thread_;
};

}  // namespace conveyor::pgqueue

#endif  // CONVEYOR_PLUGINS_POSTGRES_QUEUE_HINT_PROBER_HPP
