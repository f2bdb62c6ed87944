#include "lease_table.hpp"

namespace conveyor {

LeaseTable::Map::iterator LeaseTable::find(const conveyor_lease& lease) {
  auto [first, last] = entries_.equal_range(lease.job_id);
  for (auto it = first; it != last; ++it)
    if (it->second.lease_token == lease.lease_token) return it;
  return entries_.end();
}

LeaseTable::Map::const_iterator LeaseTable::find(const conveyor_lease& lease) const {
  auto [first, last] = entries_.equal_range(lease.job_id);
  for (auto it = first; it != last; ++it)
    if (it->second.lease_token == lease.lease_token) return it;
  return entries_.end();
}

void LeaseTable::add(std::span<const Job> jobs) {
  MutexLock lock(mu_);
  for (const Job& job : jobs)
    entries_.emplace(job.id, Entry{job.lease_token, false, job.queue, job.kind});
}

void LeaseTable::mark_handler_done(const conveyor_lease& lease) {
  MutexLock lock(mu_);
  if (auto it = find(lease); it != entries_.end()) it->second.handler_done = true;
}

bool LeaseTable::settle(const conveyor_lease& lease) {
  MutexLock lock(mu_);
  auto it = find(lease);
  if (it == entries_.end()) return false;
  entries_.erase(it);
  return true;
}

std::vector<conveyor_lease> LeaseTable::running() const {
  MutexLock lock(mu_);
  std::vector<conveyor_lease> out;
  out.reserve(entries_.size());
  for (const auto& [id, e] : entries_)
    if (!e.handler_done) out.push_back({id, e.lease_token});
  return out;
}

std::vector<conveyor_lease> LeaseTable::held() const {
  MutexLock lock(mu_);
  std::vector<conveyor_lease> out;
  out.reserve(entries_.size());
  for (const auto& [id, e] : entries_) out.push_back({id, e.lease_token});
  return out;
}

std::vector<LeaseTable::Running> LeaseTable::running_jobs() const {
  MutexLock lock(mu_);
  std::vector<Running> out;
  for (const auto& [id, e] : entries_)
    if (!e.handler_done) out.push_back({{id, e.lease_token}, e.queue, e.kind});
  return out;
}

bool LeaseTable::handler_running(const conveyor_lease& lease) const {
  MutexLock lock(mu_);
  auto it = find(lease);
  return it != entries_.end() && !it->second.handler_done;
}

size_t LeaseTable::size() const {
  MutexLock lock(mu_);
  return entries_.size();
}

}  // namespace conveyor
