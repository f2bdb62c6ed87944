// Idle reader connections kept for reuse.
#ifndef CONVEYOR_PLUGINS_SQLITE_READER_POOL_HPP
#define CONVEYOR_PLUGINS_SQLITE_READER_POOL_HPP

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace conveyor::sqlite {

class Connection;

class ReaderPool {
 public:
  ReaderPool();
  ~ReaderPool();
  ReaderPool(const ReaderPool&) = delete;
  ReaderPool& operator=(const ReaderPool&) = delete;

  // An idle connection, or null when there is none (the caller opens one).
  std::unique_ptr<Connection> take();
  // Keeps conn for reuse, or closes it when enough are idle.
  void give_back(std::unique_ptr<Connection> conn) noexcept;

 private:
  static constexpr size_t kMaxIdle = 8;
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_READER_POOL_HPP
