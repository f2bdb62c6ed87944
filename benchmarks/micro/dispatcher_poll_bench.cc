// The dispatcher's poll path against the real SQLite plugin, on a queue with
// no limit and on the same queue with a limit that never binds (rate 1e9/s,
// burst 1e9). The difference is what the limiter costs an unlimited queue;
// docs/design/rate-limits.md requires it to be lost in the noise of the
// storage call.
#include "dispatcher.hpp"

#include <conveyor/config.hpp>
#include <conveyor/internal/storage.hpp>

#include <benchmark/benchmark.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace conveyor {
namespace {

constexpr const char* kQueue = "bench";

// A dispatcher on a fresh SQLite file; Execute "runs" each claimed job by
// freeing its permit at once, as a worker with a no-op handler would.
class PollRig {
 public:
  explicit PollRig(bool limited)
      : dir_(std::filesystem::temp_directory_path() /
             ("conveyor-microbench-" + std::to_string(std::random_device{}()))) {
    std::filesystem::create_directories(dir_);
    StorageConfig sc;
    sc.plugin = "sqlite";
    sc.plugin_dir = CONVEYOR_BENCH_PLUGIN_DIR;
    sc.options = {{"path", (dir_ / "q.db").string()}};
    storage_ = open_storage(sc);
    std::map<std::string, QueueConfig> queues;
    // Never binds: a billion tokens, refilled at a billion per second.
    if (limited) queues[kQueue].rate_limit = RateLimit{1e9, 1'000'000'000};
    resolver_ = std::make_unique<LimitResolver>(EngineConfig{}, queues);
    Dispatcher::Options o;
    o.claim_batch_max = 100;
    o.max_in_flight = 1000;
    dispatcher_ =
        std::make_unique<Dispatcher>(*storage_, *resolver_, SystemClock::instance(), metrics_, o,
                                     [this](QueueRunner& r, std::vector<Job>&& jobs) {
                                       claimed_ += jobs.size();
                                       for (size_t i = 0; i < jobs.size(); ++i)
                                         dispatcher_->job_finished(r);
                                     });
    dispatcher_->add_queue(kQueue, 100);
  }
  ~PollRig() {
    dispatcher_.reset();
    storage_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void enqueue(int n) {
    const int64_t now = SystemClock::instance().wall_now_us();
    std::vector<NewJob> jobs(static_cast<size_t>(n));
    for (NewJob& j : jobs) {
      j.queue = kQueue;
      j.kind = "noop";
      j.payload = "{}";
      j.run_at_us = now;
    }
    storage_->enqueue(jobs, now);
  }
  // One poll of the queue, made due now.
  void poll() {
    dispatcher_->wake(kQueue);
    dispatcher_->run_due(SystemClock::instance().steady_now());
  }
  uint64_t claimed() const { return claimed_; }

 private:
  std::filesystem::path dir_;
  std::shared_ptr<Storage> storage_;
  Metrics metrics_;
  std::unique_ptr<LimitResolver> resolver_;
  std::unique_ptr<Dispatcher> dispatcher_;
  uint64_t claimed_ = 0;
};

// Nothing ready: the poll is a claim that finds nothing (and, when limited,
// a take and a full refund).
void BM_DispatcherPoll_EmptyQueue(benchmark::State& state, bool limited) {
  PollRig rig(limited);
  for (auto _ : state) rig.poll();
  if (rig.claimed() != 0) state.SkipWithError("claimed from an empty queue");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK_CAPTURE(BM_DispatcherPoll_EmptyQueue, unlimited, false);
BENCHMARK_CAPTURE(BM_DispatcherPoll_EmptyQueue, limited_never_binds, true);

// A deep backlog: every poll claims at least a batch of 100 and hands it
// over. A limited queue with tokens to spare may claim again in the same
// pass (the dispatcher's catch-up, up to 8 more batches), so the figure to
// compare is items (jobs claimed) per second, not time per poll.
void BM_DispatcherPoll_Claim100(benchmark::State& state, bool limited) {
  PollRig rig(limited);
  constexpr int kRefill = 20'000;
  constexpr uint64_t kMostPerPass = 100 * 9;
  uint64_t enqueued = 0;
  for (auto _ : state) {
    if (enqueued - rig.claimed() < kMostPerPass) {
      state.PauseTiming();
      rig.enqueue(kRefill);
      enqueued += kRefill;
      state.ResumeTiming();
    }
    rig.poll();
  }
  const uint64_t expected = static_cast<uint64_t>(state.iterations()) * 100;
  if (rig.claimed() < expected) state.SkipWithError("a poll claimed fewer than 100 jobs");
  state.SetItemsProcessed(static_cast<int64_t>(rig.claimed()));
}
BENCHMARK_CAPTURE(BM_DispatcherPoll_Claim100, unlimited, false);
BENCHMARK_CAPTURE(BM_DispatcherPoll_Claim100, limited_never_binds, true);

}  // namespace
}  // namespace conveyor
