#include "claimed_places.hpp"

namespace conveyor::sqlite {

uint32_t ClaimedPlaces::queue_index(std::string_view queue) {
  if (places_.size() >= kMaxEntries) {
    places_.clear();
    queue_names_.clear();
    queue_ids_.clear();
  }
  auto [it, added] =
      queue_ids_.try_emplace(std::string(queue), static_cast<uint32_t>(queue_names_.size()));
  if (added) queue_names_.emplace_back(queue);
  return it->second;
}

}  // namespace conveyor::sqlite
