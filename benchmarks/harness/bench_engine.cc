#include "bench_engine.hpp"

#include <algorithm>
#include <thread>

namespace conveyor::bench {

std::vector<NewJob> make_jobs(const std::string& queue, const std::string& kind, size_t n) {
  std::vector<NewJob> jobs(n);
  for (NewJob& j : jobs) {
    j.queue = queue;
    j.kind = kind;
    j.payload = "{}";
  }
  return jobs;
}

std::vector<int64_t> enqueue_batched(Engine& engine, const std::string& queue,
                                     const std::string& kind, uint64_t n, uint32_t batch,
                                     Progress& progress) {
  std::vector<int64_t> ids;
  ids.reserve(n);
  auto last_report = std::chrono::steady_clock::now();
  while (ids.size() < n) {
    const size_t k = std::min<uint64_t>(batch, n - ids.size());
    auto got = engine.enqueue_batch(make_jobs(queue, kind, k));
    ids.insert(ids.end(), got.begin(), got.end());
    if (std::chrono::steady_clock::now() - last_report > std::chrono::seconds(2)) {
      last_report = std::chrono::steady_clock::now();
      progress.line("enqueued {}/{}", ids.size(), n);
    }
  }
  return ids;
}

void cancel_unfinished(Engine& engine, std::span<const int64_t> ids) {
  for (int64_t id : ids) engine.cancel_job(id);
}

TimestampLog::TimestampLog(size_t capacity)
    : values_(std::make_unique<std::atomic<int64_t>[]>(capacity)), capacity_(capacity) {}

void TimestampLog::record(int64_t value) noexcept {
  const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
  if (i < capacity_) {
    values_[i].store(value, std::memory_order_relaxed);
  } else {
    dropped_.fetch_add(1, std::memory_order_relaxed);
  }
}

size_t TimestampLog::size() const { return std::min(next_.load(), capacity_); }

std::vector<int64_t> TimestampLog::sorted() const {
  std::vector<int64_t> out(size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = values_[i].load(std::memory_order_relaxed);
  std::sort(out.begin(), out.end());
  return out;
}

bool wait_for(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace conveyor::bench
