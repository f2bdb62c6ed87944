#include "pickup_log.hpp"

#include "sample_stats.hpp"

#include <thread>

namespace conveyor::bench {

PickupSummary PickupLog::summary() const {
  const std::vector<int64_t> us = latency_us_.sorted();
  std::vector<double> ms(us.size());
  for (size_t i = 0; i < us.size(); ++i) ms[i] = static_cast<double>(us[i]) / 1000.0;
  PickupSummary s;
  s.samples = ms.size();
  s.p50_ms = percentile(ms, 50);
  s.p95_ms = percentile(ms, 95);
  s.p99_ms = percentile(ms, 99);
  s.max_ms = ms.empty() ? 0 : ms.back();
  return s;
}

PacedProbes::PacedProbes(Engine& engine, double rate, double seconds)
    : rate_(rate),
      warm_up_(static_cast<uint64_t>(rate * std::chrono::duration<double>(kWarmUp).count())),
      measured_(static_cast<uint64_t>(rate * seconds)),
      pickup_(measured_ + 16) {
  pickup_.measure_from(INT64_MAX);  // until the warm-up is over
  engine.register_handler(kKind, [this](const Job& job) {
    pickup_.record(job);
    ran_.fetch_add(1, std::memory_order_relaxed);
  });
}

void PacedProbes::offer(const std::function<void()>& produce, Progress& progress,
                        const std::string& what) {
  using Clock = std::chrono::steady_clock;
  const auto interval =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / rate_));
  auto next = Clock::now();
  auto last_report = next;
  for (uint64_t sent = 0; sent < offered();) {
    if (sent == warm_up_) pickup_.measure_from(wall_us());
    std::this_thread::sleep_until(next);
    produce();
    ++sent;
    next += interval;
    if (Clock::now() - last_report >= std::chrono::seconds(2)) {
      last_report = Clock::now();
      progress.line("{}: {}/{} jobs offered at {:.0f}/s", what, sent, offered(), rate_);
    }
  }
}

bool PacedProbes::wait_for_all(std::chrono::milliseconds timeout, uint64_t extra) const {
  return wait_for([&] { return ran_.load() >= offered() + extra; }, timeout);
}

}  // namespace conveyor::bench
