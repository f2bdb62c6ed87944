// Builds the QueueReports that `conveyor queues`, the API and the dashboard
// show, from storage's counts, the effective limits and this process's
// counters.
#pragma once

#include <conveyor/config.hpp>
#include <conveyor/internal/limit_resolver.hpp>
#include <conveyor/internal/metrics.hpp>
#include <conveyor/internal/storage.hpp>
#include <conveyor/queue_report.hpp>

#include <map>
#include <string>
#include <vector>

namespace conveyor {

// Every queue storage reports, plus queues that only have a static limit or
// an override (so a configured, empty queue still shows). Sorted by name.
// metrics may be null (the CLI has no engine); so may unserved (per queue,
// the pending kinds no consumer serves: QueueReport::unserved_kinds).
std::vector<QueueReport> build_queue_reports(
    Storage& storage, const LimitResolver& limits,
    const std::map<std::string, QueueConfig>& configured, const Metrics* metrics, int64_t now_us,
    const std::map<std::string, std::vector<KindCount>, std::less<>>* unserved = nullptr);

}  // namespace conveyor
