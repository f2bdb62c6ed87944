// A session that holds a transaction open: BEGIN; SELECT txid_current(); and
// then nothing until it is closed. While it is open, PostgreSQL can remove no
// row version deleted after it began (the MVCC horizon is pinned), which is
// what a forgotten psql session or a long report does to a job queue.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace conveyor::bench {

class HeldTransaction {
 public:
  // Connects, begins, takes an xid. Throws std::runtime_error.
  explicit HeldTransaction(const std::string& dsn);
  // Rolls back and disconnects.
  ~HeldTransaction();
  HeldTransaction(const HeldTransaction&) = delete;
  HeldTransaction& operator=(const HeldTransaction&) = delete;

  int64_t xid() const { return xid_; }
  int pid() const { return pid_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t xid_ = 0;
  int pid_ = 0;
};

}  // namespace conveyor::bench
