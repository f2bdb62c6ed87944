// What the commands print, human or --json: one formatting path whether the
// data came from storage or from a server's API, so both modes print the same.
#pragma once

#include "commands.hpp"

#include <conveyor/api_messages.hpp>
#include <conveyor/queue_report.hpp>
#include <conveyor/rate_limit.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace conveyor::cli {

// ids in the order storage returned them (one per job, at least one).
void print_enqueued(const GlobalOptions& g, const std::string& queue, const std::string& kind,
                    const std::vector<int64_t>& ids);
void print_rate_limit_set(const GlobalOptions& g, const std::string& queue, const RateLimit& limit);
void print_rate_limits(const GlobalOptions& g, const api::RateLimitListing& listing);
void print_rate_limit_cleared(const GlobalOptions& g, const std::string& queue);
void print_queues(const GlobalOptions& g, const std::vector<QueueReport>& reports);

}  // namespace conveyor::cli
