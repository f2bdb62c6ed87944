// Changes to job_counts made in one write transaction.
#ifndef CONVEYOR_PLUGINS_SQLITE_FINAL_COUNTS_HPP
#define CONVEYOR_PLUGINS_SQLITE_FINAL_COUNTS_HPP

#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace conveyor::sqlite {

class Connection;

// Collects count changes per (queue, final state) and applies them at the
// transaction's end, one upsert per key, instead of one per job.
class FinalCounts {
 public:
  void add(std::string queue, int state, int64_t n) { delta_[{std::move(queue), state}] += n; }
  void apply(Connection& c);

 private:
  std::map<std::pair<std::string, int>, int64_t> delta_;
};

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_FINAL_COUNTS_HPP
