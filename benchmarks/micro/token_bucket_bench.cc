// The token bucket on its own: what a limited queue's poll adds before it
// reaches storage. Time is fed in by hand (no clock reads are measured).
#include <conveyor/internal/token_bucket.hpp>

#include <benchmark/benchmark.h>

#include <chrono>

namespace conveyor {
namespace {

using std::chrono::nanoseconds;

// A poll of a limited queue: refill from elapsed time, take a batch, give
// back what storage did not fill.
void BM_TokenBucket_TakeAndRefund(benchmark::State& state) {
  TokenBucket bucket(RateLimit{5000, 500}, SteadyTime{});
  SteadyTime now{};
  for (auto _ : state) {
    now += nanoseconds(20'000'000);  // 20 ms: 100 tokens of credit at 5,000/s
    const uint32_t taken = bucket.take(100, now);
    bucket.refund(taken / 4);
    benchmark::DoNotOptimize(taken);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TokenBucket_TakeAndRefund);

// Refill alone: how many whole tokens are there now.
void BM_TokenBucket_Refill(benchmark::State& state) {
  TokenBucket bucket(RateLimit{5000, 500}, SteadyTime{});
  SteadyTime now{};
  for (auto _ : state) {
    now += nanoseconds(137);
    benchmark::DoNotOptimize(bucket.available(now));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TokenBucket_Refill);

// An exhausted bucket: take finds nothing and the dispatcher asks when the
// next token is due (the throttled path).
void BM_TokenBucket_EmptyTakeAndWait(benchmark::State& state) {
  TokenBucket bucket(RateLimit{0.001, 1}, SteadyTime{});  // one token per 1,000 s
  SteadyTime now{};
  bucket.take(1, now);
  for (auto _ : state) {
    now += nanoseconds(1);  // never reaches the next whole token within a run
    benchmark::DoNotOptimize(bucket.take(1, now));
    benchmark::DoNotOptimize(bucket.time_until_next(now));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TokenBucket_EmptyTakeAndWait);

}  // namespace
}  // namespace conveyor
