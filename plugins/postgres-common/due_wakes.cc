#include "due_wakes.hpp"

#include <algorithm>
#include <charconv>
#include <iterator>

namespace conveyor::postgres {

std::string later_payload(int64_t run_at_us, std::string_view queue) {
  std::string out = std::to_string(run_at_us);
  out += ' ';
  out += queue;
  return out;
}

std::optional<std::pair<int64_t, std::string>> parse_later_payload(std::string_view payload) {
  const size_t space = payload.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 == payload.size())
    return std::nullopt;
  int64_t run_at = 0;
  const char* end = payload.data() + space;
  auto [ptr, ec] = std::from_chars(payload.data(), end, run_at);
  if (ec != std::errc{} || ptr != end) return std::nullopt;
  return std::make_pair(run_at, std::string(payload.substr(space + 1)));
}

void DueWakes::add(int64_t run_at_us, std::string queue) {
  entries_.emplace(run_at_us, std::move(queue));
  if (entries_.size() > kMaxEntries) {
    entries_.erase(std::prev(entries_.end()));
    ++dropped_;
  }
}

std::optional<int64_t> DueWakes::next() const {
  if (entries_.empty()) return std::nullopt;
  return entries_.begin()->first;
}

std::vector<std::string> DueWakes::take_due(int64_t now_us) {
  std::vector<std::string> queues;
  while (!entries_.empty() && entries_.begin()->first <= now_us) {
    auto node = entries_.extract(entries_.begin());
    queues.push_back(std::move(node.value().second));
  }
  std::sort(queues.begin(), queues.end());
  queues.erase(std::unique(queues.begin(), queues.end()), queues.end());
  return queues;
}

}  // namespace conveyor::postgres
