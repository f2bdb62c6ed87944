#include "pickup_log.hpp"

#include "sample_stats.hpp"

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

}  // namespace conveyor::bench
