// ServedKinds: the job kinds some consumer of this engine runs. The dispatcher
// claims only these (storage ABI 1.1 claim_kinds), so a job of a kind nobody
// here serves stays pending instead of failing. Counted per consumer: the
// local handler registry adds its kinds, and consumers that come and go at
// run time (remote workers) add and remove theirs; a kind stays served until
// every consumer that added it removed it.
//
// Thread-safe. The dispatcher reads a snapshot per poll: one atomic load
// while nothing changed.
#pragma once

#include <conveyor/internal/mutex.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor {

class ServedKinds {
 public:
  using Snapshot = std::shared_ptr<const std::vector<std::string>>;  // sorted, unique

  // One more consumer of kind.
  void add(const std::string& kind) EXCLUDES(mu_);
  // One consumer fewer of kind (no-op when it was not added).
  void remove(const std::string& kind) EXCLUDES(mu_);
  bool contains(std::string_view kind) const EXCLUDES(mu_);
  // The served kinds now, sorted.
  Snapshot snapshot() const EXCLUDES(mu_);
  // Changes whenever the set of kinds does.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  void publish() REQUIRES(mu_);

  // Guarded by mu_.
  mutable Mutex mu_;
  std::map<std::string, uint32_t, std::less<>> consumers_ GUARDED_BY(mu_);  // kind -> consumers
  Snapshot snapshot_ GUARDED_BY(mu_) = std::make_shared<const std::vector<std::string>>();

  // Atomic: written under mu_, read without it.
  std::atomic<uint64_t> generation_{0};
};

}  // namespace conveyor
