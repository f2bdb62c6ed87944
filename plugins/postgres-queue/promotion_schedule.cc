#include "promotion_schedule.hpp"

#include <algorithm>

namespace conveyor::pgqueue {

bool PromotionSchedule::due(std::string_view queue, int64_t now_us, uint64_t* started) {
  std::lock_guard lock(mu_);
  auto it = queues_.find(std::string(queue));
  if (it == queues_.end()) {  // never checked: check now
    *started = 0;
    queues_.emplace(std::string(queue), Queue{});
    return true;
  }
  Queue& q = it->second;
  *started = q.adds;
  return now_us >= q.earliest || std::chrono::steady_clock::now() - q.checked_at >= check_period_;
}

void PromotionSchedule::promoted(std::string_view queue, uint64_t started,
                                 std::optional<int64_t> next_run_at) {
  std::lock_guard lock(mu_);
  Queue& q = queues_[std::string(queue)];
  const int64_t next = next_run_at.value_or(kNever);
  // A row added while the promotion ran may be missing from next_run_at.
  q.earliest = q.adds == started ? next : std::min(next, q.earliest);
  q.checked_at = std::chrono::steady_clock::now();
}

void PromotionSchedule::added(std::string_view queue, int64_t run_at) {
  std::lock_guard lock(mu_);
  Queue& q = queues_[std::string(queue)];
  ++q.adds;
  q.earliest = std::min(q.earliest, run_at);
}

void PromotionSchedule::added_somewhere(int64_t run_at) {
  std::lock_guard lock(mu_);
  for (auto& [name, q] : queues_) {
    ++q.adds;
    q.earliest = std::min(q.earliest, run_at);
  }
}

}  // namespace conveyor::pgqueue
