#include "reader_pool.hpp"

#include <utility>

#include "connection.hpp"

namespace conveyor::sqlite {

ReaderPool::ReaderPool() = default;
ReaderPool::~ReaderPool() = default;

std::unique_ptr<Connection> ReaderPool::take() {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.empty()) return nullptr;
  std::unique_ptr<Connection> c = std::move(idle_.back());
  idle_.pop_back();
  return c;
}

void ReaderPool::give_back(std::unique_ptr<Connection> conn) noexcept {
  std::unique_ptr<Connection> drop;  // closed outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < kMaxIdle) {
      try {
        idle_.push_back(std::move(conn));
      } catch (...) {
        drop = std::move(conn);
      }
    } else {
      drop = std::move(conn);
    }
  }
}

}  // namespace conveyor::sqlite
