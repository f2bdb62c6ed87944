// Where the jobs this handle claimed are stored, so that completing them
// needs no lookup by id.
#ifndef CONVEYOR_PLUGINS_SQLITE_CLAIMED_PLACES_HPP
#define CONVEYOR_PLUGINS_SQLITE_CLAIMED_PLACES_HPP

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace conveyor::sqlite {

// The queue and place (pos) of each job this handle claimed and has not yet
// finalized: complete adds its jobs to job_counts per queue from here and
// completes them by place, reading rows again only for jobs claimed
// elsewhere. A job's queue and place never change and ids and places are
// never reused, so an entry is never wrong, only possibly unused (the lease
// guard in the SQL still decides). Not thread-safe: used only inside write
// transactions, under the writer's mutex.
class ClaimedPlaces {
 public:
  struct Place {
    uint32_t queue;  // an index into the queue names
    int64_t pos;     // where the row is stored
  };
  using Map = std::unordered_map<int64_t, Place>;  // job id -> place

  // The index of queue's name; forgets everything first when the map has
  // grown past its bound (misses are counted in SQL instead).
  uint32_t queue_index(std::string_view queue);
  void remember(int64_t job_id, uint32_t queue, int64_t pos) {
    places_[job_id] = Place{queue, pos};
  }
  Map::iterator find(int64_t job_id) { return places_.find(job_id); }
  Map::iterator end() { return places_.end(); }
  void forget(Map::iterator entry) { places_.erase(entry); }
  void forget(int64_t job_id) { places_.erase(job_id); }

  size_t queue_count() const { return queue_names_.size(); }
  const std::string& queue_name(size_t index) const { return queue_names_[index]; }

 private:
  // Entries (a map node of about 48 bytes each) kept before all are dropped.
  static constexpr size_t kMaxEntries = 1 << 20;
  Map places_;
  std::vector<std::string> queue_names_;                 // Place::queue indexes this
  std::unordered_map<std::string, uint32_t> queue_ids_;  // queue_names_ inverted
};

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_CLAIMED_PLACES_HPP
