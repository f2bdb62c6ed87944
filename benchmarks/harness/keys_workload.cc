// The job-key workloads (issue 36), each on fresh storage per run:
//   keys-noisy     one key's deep backlog of slow jobs, then many small keys:
//                  the small keys' pickup latency, fair and FIFO; the big key
//                  alone.
//   keys-accuracy  many keys with a key_rate_limit each: every key within its
//                  bound, the aggregate rate; then a queue limit on top.
//   keys-many      the same jobs drained with a key each and with none.
//   keys-idle      keys with one job each, drained and purged: memory and
//                  storage before and after.
// Sizes are scaled by --keys-scale (0.1 quick, 1 full).
#include "bench_engine.hpp"
#include "key_accuracy.hpp"
#include "pickup_log.hpp"
#include "postgres_probe.hpp"
#include "process_stats.hpp"
#include "rate_accuracy.hpp"
#include "sample_stats.hpp"
#include "stall_watch.hpp"
#include "workloads.hpp"

#include <conveyor/internal/storage.hpp>

#include <SQLiteCpp/SQLiteCpp.h>
#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <thread>

namespace conveyor::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kKeyedKind = "bench-keyed";

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// n scaled, at least min.
uint64_t scaled(uint64_t n, double scale, uint64_t min) {
  return std::max<uint64_t>(min,
                            static_cast<uint64_t>(std::llround(static_cast<double>(n) * scale)));
}

// "k000042": keys sort (bytewise, the turn order) as their indexes do.
std::string key_name(uint64_t i) { return fmt::format("k{:06d}", i); }
uint32_t key_index(const std::string& key) {
  uint32_t i = 0;
  if (key.size() > 1) std::from_chars(key.data() + 1, key.data() + key.size(), i);
  return i;
}

// Enqueues jobs in batches of `batch`; appends their ids to ids.
void enqueue_in_batches(Engine& engine, std::vector<NewJob>& jobs, uint32_t batch,
                        std::vector<int64_t>& ids) {
  for (size_t i = 0; i < jobs.size(); i += batch) {
    std::vector<NewJob> part(
        std::make_move_iterator(jobs.begin() + static_cast<ptrdiff_t>(i)),
        std::make_move_iterator(jobs.begin() +
                                static_cast<ptrdiff_t>(std::min<size_t>(jobs.size(), i + batch))));
    const std::vector<int64_t> got = engine.enqueue_batch(std::move(part));
    ids.insert(ids.end(), got.begin(), got.end());
  }
}

// per_key jobs of each of `keys` keys, round-robin (key 0, 1, ..., 0, 1, ...),
// as many producers would; keyed false: the same jobs with the empty key.
std::vector<NewJob> round_robin_jobs(const std::string& queue, const std::string& kind,
                                     uint64_t keys, uint64_t per_key, bool keyed) {
  std::vector<NewJob> jobs = make_jobs(queue, kind, keys * per_key);
  if (keyed)
    for (size_t i = 0; i < jobs.size(); ++i) jobs[i].key = key_name(i % keys);
  return jobs;
}

void trim_heap() { malloc_trim(0); }

// ---- keys-noisy ----

constexpr uint32_t kNoisyWorkers = 20;
constexpr auto kNoisyHandler = std::chrono::milliseconds(10);
constexpr const char* kBigKey = "A";

struct NoisyShape {
  uint64_t big_jobs = 0;
  uint32_t small_keys = 0;
  uint32_t small_per_key = 5;
  std::chrono::milliseconds small_after{500};
};

struct NoisyRun {
  PickupSummary small;
  double big_jobs_per_sec = 0, big_window_s = 0;
};

// One run on fresh storage. with_small false: only the big key's jobs, for
// its throughput.
NoisyRun noisy_once(Backend& backend, const BenchOptions& options, Progress& progress,
                    const NoisyShape& shape, Fairness fairness, bool with_small) {
  const std::string variant =
      !with_small ? "alone" : (fairness == Fairness::kFifo ? "fifo" : "fair");
  const std::string workload = "keys-noisy-" + variant;
  WorkloadScope scope(backend, workload);
  Config config = backend.workload_config(workload);
  const std::string queue = backend.queue(workload);
  QueueConfig q;
  q.max_workers = kNoisyWorkers;
  q.fairness = fairness;
  config.queues[queue] = q;

  const uint64_t small_jobs = uint64_t{shape.small_keys} * shape.small_per_key;
  PickupLog small(small_jobs + 16);
  TimestampLog big(shape.big_jobs + 16);
  std::atomic<uint64_t> small_started{0};
  std::vector<int64_t> ids;
  Engine engine(config);
  engine.register_handler(kKeyedKind, [&](const Job& job) {
    if (job.key == kBigKey) {
      big.record(steady_ns());
    } else {
      small.record(job);
      small_started.fetch_add(1, std::memory_order_relaxed);
    }
    std::this_thread::sleep_for(kNoisyHandler);
  });
  {
    std::vector<NewJob> jobs = make_jobs(queue, kKeyedKind, shape.big_jobs);
    for (NewJob& j : jobs) j.key = kBigKey;
    enqueue_in_batches(engine, jobs, options.enqueue_batch, ids);
  }
  const auto t0 = Clock::now();
  engine.start();
  // The backlog drains at about workers / handler time.
  const double backlog_s = static_cast<double>(shape.big_jobs) *
                           std::chrono::duration<double>(kNoisyHandler).count() / kNoisyWorkers;
  const auto deadline =
      t0 + std::chrono::seconds(30) +
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(3 * backlog_s));
  auto last_report = t0;
  auto report = [&](const std::string& what) {
    if (Clock::now() - last_report < std::chrono::seconds(2)) return;
    last_report = Clock::now();
    progress.line("{}: {:.1f} s, key A {} started{}", variant, seconds_since(t0), big.size(), what);
  };

  NoisyRun r;
  if (!with_small) {
    // Skip the first wave (workers jobs at once), then time the next ones.
    const uint64_t skip = kNoisyWorkers;
    const uint64_t upto =
        std::min<uint64_t>(shape.big_jobs, std::max<uint64_t>(skip + 20, shape.big_jobs / 4));
    while (big.size() < upto) {
      if (Clock::now() > deadline)
        throw std::runtime_error(fmt::format(
            "key A alone: only {} of {} jobs started by the deadline", big.size(), upto));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      report("");
    }
    engine.stop();
    const std::vector<int64_t> t = big.sorted();
    r.big_window_s = static_cast<double>(t[upto - 1] - t[skip - 1]) / 1e9;
    if (r.big_window_s > 0) r.big_jobs_per_sec = static_cast<double>(upto - skip) / r.big_window_s;
    progress.line("key A alone: {:.0f} jobs/s over {:.2f} s ({} jobs of {} ms, {} workers)",
                  r.big_jobs_per_sec, r.big_window_s, upto - skip, kNoisyHandler.count(),
                  kNoisyWorkers);
  } else {
    std::this_thread::sleep_until(t0 + shape.small_after);
    // Each small key enqueues its jobs in one call, as its own producer would.
    for (uint32_t k = 0; k < shape.small_keys; ++k) {
      std::vector<NewJob> jobs = make_jobs(queue, kKeyedKind, shape.small_per_key);
      for (NewJob& j : jobs) j.key = key_name(k);
      const std::vector<int64_t> got = engine.enqueue_batch(std::move(jobs));
      ids.insert(ids.end(), got.begin(), got.end());
    }
    progress.line("{}: {} small keys enqueued {} jobs {:.2f} s after start, key A {} started",
                  variant, shape.small_keys, small_jobs, seconds_since(t0), big.size());
    while (small_started.load() < small_jobs) {
      if (Clock::now() > deadline)
        throw std::runtime_error(
            fmt::format("fairness {}: only {} of the small keys' {} jobs started within {:.0f} s",
                        variant, small_started.load(), small_jobs, seconds_since(t0)));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      report(fmt::format(", small keys {}/{}", small_started.load(), small_jobs));
    }
    const double done_s = seconds_since(t0);
    engine.stop();
    r.small = small.summary();
    progress.line(
        "{}: the small keys' {} jobs started by {:.2f} s: pickup p50 {} ms, p99 {} ms, max {} ms "
        "(key A {} started)",
        variant, r.small.samples, done_s, r.small.p50_ms, r.small.p99_ms, r.small.max_ms,
        big.size());
  }
  if (backend.isolation() == Isolation::kShared) cancel_unfinished(engine, ids);
  return r;
}

// ---- keys-accuracy ----

constexpr uint32_t kAccuracyWorkers = 200;
const RateLimit kKeyLimit{2, 1};
const RateLimit kQueueLimit{500, 500};

KeysAccuracyRun accuracy_once(Backend& backend, const BenchOptions& options, Progress& progress,
                              uint32_t keys, uint32_t per_key, bool queue_limited) {
  const std::string workload = queue_limited ? "keys-accuracy-queue" : "keys-accuracy";
  WorkloadScope scope(backend, workload);
  Config config = backend.workload_config(workload);
  const std::string queue = backend.queue(workload);
  QueueConfig q;
  q.max_workers = kAccuracyWorkers;
  q.key_rate_limit = kKeyLimit;
  if (queue_limited) q.rate_limit = kQueueLimit;
  config.queues[queue] = q;
  config.engine.worker_threads = std::max(config.engine.worker_threads, kAccuracyWorkers);

  const uint64_t n = uint64_t{keys} * per_key;
  KeyStartLog log(n + 16);
  int64_t t0 = 0;  // set before start(): no bucket exists earlier
  std::vector<int64_t> ids;
  Engine engine(config);
  engine.register_handler(
      kKeyedKind, [&](const Job& job) { log.record(key_index(job.key), steady_ns() - t0); });
  {
    std::vector<NewJob> jobs = round_robin_jobs(queue, kKeyedKind, keys, per_key, true);
    enqueue_in_batches(engine, jobs, options.enqueue_batch, ids);
  }
  // Without a queue limit every job runs: (per_key - 1) / rate after each
  // key's first. With one, a window as long (at least 2 s) at the queue's rate.
  const double key_span_s = (per_key - 1) / kKeyLimit.rate_per_sec;
  const double limited_s = std::max(2.0, key_span_s + 1);
  const std::string what = queue_limited
                               ? fmt::format("{} keys @{}/s + queue {}/s", keys,
                                             kKeyLimit.rate_per_sec, kQueueLimit.rate_per_sec)
                               : fmt::format("{} keys @{}/s", keys, kKeyLimit.rate_per_sec);
  t0 = steady_ns();
  const auto start = Clock::now();
  engine.start();
  auto last_report = start;
  const auto deadline =
      start + std::chrono::seconds(60) +
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(2 * key_span_s));
  while (log.size() < n && (!queue_limited || seconds_since(start) < limited_s)) {
    if (!queue_limited && Clock::now() > deadline)
      throw std::runtime_error(fmt::format("{}: only {} of {} jobs started within {:.0f} s", what,
                                           log.size(), n, seconds_since(start)));
    std::this_thread::sleep_for(std::chrono::milliseconds(queue_limited ? 10 : 1));
    if (Clock::now() - last_report >= std::chrono::seconds(2)) {
      last_report = Clock::now();
      progress.line("{}: {:.1f} s, {}/{} started", what, seconds_since(start), log.size(), n);
    }
  }
  const double seconds = seconds_since(start);
  engine.stop();

  const std::vector<KeyStart> starts = log.entries();
  int64_t first = std::numeric_limits<int64_t>::max(), last = 0;
  for (const KeyStart& s : starts) {
    first = std::min(first, s.t_ns);
    last = std::max(last, s.t_ns);
  }
  KeysAccuracyRun r;
  r.keys = keys;
  r.jobs_per_key = per_key;
  r.key_rate = kKeyLimit.rate_per_sec;
  r.key_burst = kKeyLimit.burst;
  r.workers = kAccuracyWorkers;
  r.seconds = seconds;
  // The steady window. Per key only: from half a refill after the first
  // start (the bursts are spent) to half a refill before the keys run out.
  // With the queue limit: from 1 s (its burst spent) to the end, or to the
  // last start if every job ran before.
  const int64_t refill_ns = static_cast<int64_t>(1e9 / kKeyLimit.rate_per_sec);
  int64_t from_ns = first + refill_ns,
          to_ns = first + static_cast<int64_t>(key_span_s * 1e9) - refill_ns;
  if (queue_limited) {
    r.queue_rate = kQueueLimit.rate_per_sec;
    r.queue_burst = kQueueLimit.burst;
    from_ns = 1'000'000'000;
    to_ns = log.size() < n ? static_cast<int64_t>(seconds * 1e9) : last;
  }
  if (to_ns <= from_ns) to_ns = from_ns + 1;
  r.window_from_s = static_cast<double>(from_ns) / 1e9;
  r.window_to_s = static_cast<double>(to_ns) / 1e9;
  const KeyAccuracy a = analyze_keys(starts, keys, kKeyLimit, from_ns, to_ns);
  r.started = a.started;
  r.jobs_per_sec = a.jobs_per_sec;
  r.worst_key_excess = a.worst_excess_from_first;
  r.worst_key = a.worst_excess_from_first > 0 ? key_name(a.worst_key) : "";
  r.worst_key_excess_from_start = a.worst_excess_from_start;
  r.key_count_min = a.count_min;
  r.key_count_median = a.count_median;
  r.key_count_max = a.count_max;
  if (queue_limited) {
    std::vector<int64_t> all;
    all.reserve(starts.size());
    for (const KeyStart& s : starts) all.push_back(s.t_ns);
    std::sort(all.begin(), all.end());
    r.queue_worst_excess =
        analyze_rate(all, kQueueLimit, std::numeric_limits<int64_t>::max()).worst_excess;
  }
  progress.line(
      "{}: {} started in {:.2f} s; {:.0f} jobs/s in [{:.2f} s, {:.2f} s]; per key in the window "
      "min/median/max {:.0f}/{:.0f}/{:.0f}; worst key excess over burst + rate*t from its first "
      "start {:.3f}{}, from engine start {:.3f}{}",
      what, r.started, seconds, r.jobs_per_sec, r.window_from_s, r.window_to_s, r.key_count_min,
      r.key_count_median, r.key_count_max, r.worst_key_excess,
      r.worst_key.empty() ? "" : " (" + r.worst_key + ")", r.worst_key_excess_from_start,
      queue_limited ? fmt::format("; queue excess {:.3f}", r.queue_worst_excess) : "");
  if (log.dropped() > 0)
    throw std::runtime_error(
        fmt::format("{}: {} starts beyond the {} jobs enqueued", what, log.dropped(), n));
  if (backend.isolation() == Isolation::kShared) cancel_unfinished(engine, ids);
  return r;
}

// ---- keys-many ----

// The keys-many drains: a key per job, no key (the default, fair queue),
// and no key with fairness = "fifo" (claims without the key turns).
enum class ManyVariant { kKeyed, kUnkeyed, kUnkeyedFifo };

// One drain of keys * per_key noop jobs: seconds from engine start to the
// last completion.
double many_once(Backend& backend, const BenchOptions& options, Progress& progress, uint64_t keys,
                 uint64_t per_key, ManyVariant variant) {
  const bool keyed = variant == ManyVariant::kKeyed;
  const std::string workload = keyed                              ? "keys-many"
                               : variant == ManyVariant::kUnkeyed ? "keys-many-unkeyed"
                                                                  : "keys-many-fifo";
  WorkloadScope scope(backend, workload);
  Config config = backend.workload_config(workload);
  const std::string queue = backend.queue(workload);
  if (variant == ManyVariant::kUnkeyedFifo) {
    QueueConfig q;
    q.fairness = Fairness::kFifo;
    config.queues[queue] = q;
  }
  Engine engine(config);
  register_builtin_handlers(engine);
  std::vector<int64_t> ids;
  {
    std::vector<NewJob> jobs = round_robin_jobs(queue, "noop", keys, per_key, keyed);
    enqueue_in_batches(engine, jobs, options.enqueue_batch, ids);
  }
  const std::atomic<uint64_t>& completed = EngineInternals::metrics(engine).queue(queue).completed;
  const uint64_t total = keys * per_key;
  const auto t0 = Clock::now();
  engine.start();
  StallWatch stall(workload, t0);
  auto last_report = t0;
  for (uint64_t d = completed.load(); d < total; d = completed.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const auto now = Clock::now();
    stall.check(d, total, now);
    if (now - last_report >= std::chrono::seconds(2)) {
      last_report = now;
      progress.line("{}: drained {}/{}", keyed ? "keyed" : "unkeyed", d, total);
    }
  }
  const double seconds = seconds_since(t0);
  engine.stop();
  return seconds;
}

// ---- keys-idle ----

int64_t bytes_of_file(const std::filesystem::path& p) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(p, ec);
  return ec ? 0 : static_cast<int64_t>(n);
}

struct StorageSize {
  int64_t bytes = 0;
  std::optional<int64_t> sqlite_used;
};

KeysIdleRun idle_once(Backend& backend, const BenchOptions& options, Progress& progress,
                      uint64_t keys, bool keyed) {
  const std::string workload = keyed ? "keys-idle" : "keys-idle-unkeyed";
  WorkloadScope scope(backend, workload);
  Config config = backend.workload_config(workload);
  const std::string queue = backend.queue(workload);
  KeysIdleRun r;
  r.keyed = keyed;

  std::optional<PostgresProbe> probe;
  if (backend.is_postgres()) probe.emplace(*backend.dsn());
  const std::filesystem::path db = backend.scratch_file(workload);
  auto storage_size = [&] {
    StorageSize s;
    if (backend.is_sqlite()) {
      s.bytes = bytes_of_file(db) + bytes_of_file(db.string() + "-wal");
      SQLite::Database c(db.string(), SQLite::OPEN_READONLY);
      const int64_t pages = c.execAndGet("PRAGMA page_count").getInt64();
      const int64_t free_pages = c.execAndGet("PRAGMA freelist_count").getInt64();
      const int64_t page = c.execAndGet("PRAGMA page_size").getInt64();
      s.sqlite_used = (pages - free_pages) * page;
    } else if (probe) {
      s.bytes = probe->relation_bytes(backend.schema(workload));
    }
    return s;
  };
  auto rss = [] {
    trim_heap();
    return process_rss_bytes();
  };

  std::vector<int64_t> ids;
  Engine engine(config);
  register_builtin_handlers(engine);
  // The purge goes through a handle of its own, opened now so that its
  // memory is in every reading; the engine keeps finished jobs a day.
  std::shared_ptr<Storage> purger = open_storage(config.storage);
  r.rss_before = rss();
  StorageSize size = storage_size();
  r.storage_before = size.bytes;
  r.sqlite_used_before = size.sqlite_used;

  {
    std::vector<NewJob> jobs = round_robin_jobs(queue, "noop", keys, 1, keyed);
    enqueue_in_batches(engine, jobs, options.enqueue_batch, ids);
  }
  const std::atomic<uint64_t>& completed = EngineInternals::metrics(engine).queue(queue).completed;
  const auto t0 = Clock::now();
  engine.start();
  StallWatch stall(workload, t0);
  auto last_report = t0, last_sample = t0;
  for (uint64_t d = completed.load(); d < keys; d = completed.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const auto now = Clock::now();
    stall.check(d, keys, now);
    if (now - last_sample >= std::chrono::milliseconds(100)) {
      last_sample = now;
      r.rss_peak = std::max(r.rss_peak, process_rss_bytes());
    }
    if (now - last_report >= std::chrono::seconds(2)) {
      last_report = now;
      progress.line("{}: drained {}/{}", keyed ? "keyed" : "no key", d, keys);
    }
  }
  r.drain_seconds = seconds_since(t0);
  r.rss_peak = std::max(r.rss_peak, process_rss_bytes());
  // Idle a while: the dispatcher reads the keys again and forgets drained ones.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  r.rss_drained = rss();
  size = storage_size();
  r.storage_drained = size.bytes;
  r.sqlite_used_drained = size.sqlite_used;

  for (uint64_t n = 1; n > 0;) {
    n = purger->purge_finished(wall_us() + 1, 10'000);
    r.purged += n;
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  r.rss_purged = rss();
  size = storage_size();
  r.storage_purged = size.bytes;
  r.sqlite_used_purged = size.sqlite_used;
  engine.stop();

  auto mib = [](int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  progress.line(
      "{} jobs, {}: drained in {:.2f} s; RSS {:.1f} -> {:.1f} (peak {:.1f}) -> {:.1f} MiB after "
      "purging {}; storage {:.1f} -> {:.1f} -> {:.1f} MiB{}",
      keys, keyed ? "a key each" : "no key", r.drain_seconds, mib(r.rss_before), mib(r.rss_drained),
      mib(r.rss_peak), mib(r.rss_purged), r.purged, mib(r.storage_before), mib(r.storage_drained),
      mib(r.storage_purged),
      r.sqlite_used_before ? fmt::format("; SQLite pages in use {:.1f} -> {:.1f} -> {:.1f} MiB",
                                         mib(*r.sqlite_used_before), mib(*r.sqlite_used_drained),
                                         mib(*r.sqlite_used_purged))
                           : "");
  if (r.purged < keys)
    throw std::runtime_error(
        fmt::format("the purge deleted {} of the {} finished jobs", r.purged, keys));
  return r;
}

}  // namespace

KeysNoisyResult run_keys_noisy(Backend& backend, const BenchOptions& options, Progress& progress) {
  NoisyShape shape;
  shape.big_jobs = scaled(20'000, options.keys_scale, kNoisyWorkers + 40);
  shape.small_keys = static_cast<uint32_t>(scaled(100, options.keys_scale, 2));
  shape.small_after = std::chrono::milliseconds(scaled(500, options.keys_scale, 10));
  KeysNoisyResult r;
  r.workers = kNoisyWorkers;
  r.handler_ms = static_cast<double>(kNoisyHandler.count());
  r.big_jobs = shape.big_jobs;
  r.small_keys = shape.small_keys;
  r.small_jobs_per_key = shape.small_per_key;
  r.small_after_ms = static_cast<double>(shape.small_after.count());
  r.fair = noisy_once(backend, options, progress, shape, Fairness::kFair, true).small;
  r.fifo = noisy_once(backend, options, progress, shape, Fairness::kFifo, true).small;
  const NoisyRun alone = noisy_once(backend, options, progress, shape, Fairness::kFair, false);
  r.big_alone_jobs_per_sec = alone.big_jobs_per_sec;
  r.big_alone_window_s = alone.big_window_s;
  return r;
}

std::vector<KeysAccuracyRun> run_keys_accuracy(Backend& backend, const BenchOptions& options,
                                               Progress& progress) {
  const auto keys = static_cast<uint32_t>(scaled(1000, options.keys_scale, 2));
  const auto per_key = static_cast<uint32_t>(scaled(20, options.keys_scale, 5));
  return {accuracy_once(backend, options, progress, keys, per_key, false),
          accuracy_once(backend, options, progress, keys, per_key, true)};
}

KeysManyResult run_keys_many(Backend& backend, const BenchOptions& options, Progress& progress) {
  KeysManyResult r;
  r.keys = static_cast<uint32_t>(scaled(10'000, options.keys_scale, 10));
  r.jobs_per_key = 10;
  r.jobs = uint64_t{r.keys} * r.jobs_per_key;
  std::vector<double> keyed_s, unkeyed_s, fifo_s;
  // Alternated, so that a machine getting busier or quieter moves all alike.
  for (uint32_t i = 1; i <= options.repeat; ++i)
    for (const ManyVariant v :
         {ManyVariant::kKeyed, ManyVariant::kUnkeyed, ManyVariant::kUnkeyedFifo}) {
      const double s = many_once(backend, options, progress, r.keys, r.jobs_per_key, v);
      const double rate = static_cast<double>(r.jobs) / s;
      if (v == ManyVariant::kKeyed) {
        keyed_s.push_back(s);
        r.keyed_runs_jobs_per_sec.push_back(rate);
      } else if (v == ManyVariant::kUnkeyed) {
        unkeyed_s.push_back(s);
        r.unkeyed_runs_jobs_per_sec.push_back(rate);
      } else {
        fifo_s.push_back(s);
        r.unkeyed_fifo_runs_jobs_per_sec.push_back(rate);
      }
      progress.line("{} jobs, {}, run {}/{}: {:.2f} s, {:.0f} jobs/s", r.jobs,
                    v == ManyVariant::kKeyed ? fmt::format("{} keys x {}", r.keys, r.jobs_per_key)
                    : v == ManyVariant::kUnkeyed ? "no key"
                                                 : "no key, fifo",
                    i, options.repeat, s, rate);
    }
  r.keyed_jobs_per_sec = median(r.keyed_runs_jobs_per_sec);
  r.unkeyed_jobs_per_sec = median(r.unkeyed_runs_jobs_per_sec);
  r.unkeyed_fifo_jobs_per_sec = median(r.unkeyed_fifo_runs_jobs_per_sec);
  r.keyed_seconds = median(keyed_s);
  r.unkeyed_seconds = median(unkeyed_s);
  r.unkeyed_fifo_seconds = median(fifo_s);
  return r;
}

KeysIdleResult run_keys_idle(Backend& backend, const BenchOptions& options, Progress& progress) {
  KeysIdleResult r;
  r.keys = scaled(100'000, options.keys_scale, 10);
  if (backend.is_sqlite()) r.storage_measure = "sqlite file + wal";
  if (backend.is_postgres()) r.storage_measure = "pg_total_relation_size";
  r.unkeyed = idle_once(backend, options, progress, r.keys, false);
  r.keyed = idle_once(backend, options, progress, r.keys, true);
  return r;
}

}  // namespace conveyor::bench
