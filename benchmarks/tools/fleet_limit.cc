// conveyor-fleet-bench: one rate-limited queue drained by N processes on the
// same storage, each an engine of its own (a separate process, connections
// and dispatcher, as N `conveyor serve` would be). From every job's start
// time across the N processes (CLOCK_REALTIME, one clock on one host) it
// reports the fleet's achieved rate and the worst window: the largest
// k - (burst + rate * t) over any k consecutive starts spanning t. With
// scope "fleet" that must stay near 0 (the documented slack); with scope
// "process" the fleet runs at about N times the rate.
//
//   conveyor-fleet-bench --plugin sqlite|postgres|postgres-queue [--dsn DSN]
//       [--processes 3] [--rate 50] [--burst 10] [--scope fleet|process]
//       [--seconds 20] [--cost 1] [--kill-switch-at S --kill-switch-for S]
//       [--conveyor PATH]
//   conveyor-fleet-bench --plugin ... --keys 100 [--key-rate 5] [--key-burst 1]
//       [--processes 3] [--seconds 20]
//
// Keyed mode (--keys N): no queue limit; the queue's key_rate_limit (scope
// fleet, in the config the processes load) gives each of N keys its own
// bucket shared by the fleet, and every key has jobs for the whole run
// (enqueued round-robin). It reports each key's steady rate (min, median,
// max over the keys and the worst deviation from the key's rate), the worst
// window of any key (k - (burst + rate * t) over any k consecutive starts of
// one key), the aggregate rate, and the storage calls per claim (the claim,
// one add_shared_states call for the buckets of every key it serves, and
// the key listings).
//
// The limit is stored as an override (conveyor ratelimit set), so the kill
// switch run also shows that overrides survive it. --kill-switch-at flips
// `conveyor ratelimit disable` (the real CLI) S seconds in and `enable`
// --kill-switch-for seconds later, and reports how long each process took
// to follow each flip and the rate while disabled.
#include "key_accuracy.hpp"
#include "postgres_probe.hpp"
#include "rate_accuracy.hpp"
#include "spawned_process.hpp"

#include <conveyor/config.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/internal/engine_internals.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using conveyor::bench::analyze_keys;
using conveyor::bench::KeyStart;
using conveyor::bench::worst_window_excess;
using conveyor::bench_tools::spawn;
using conveyor::bench_tools::wait_for;

constexpr const char* kQueue = "fleet";
constexpr const char* kKind = "fleet-noop";

int64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

void sleep_until_ns(int64_t at) {
  const int64_t left = at - realtime_ns();
  if (left > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(left));
}

struct Options {
  std::string plugin = "sqlite";
  std::string dsn;
  int processes = 3;
  double rate = 50;
  uint32_t burst = 10;
  std::string scope = "fleet";
  double seconds = 20;
  int cost = 1;
  double kill_at = 0;  // 0: no kill-switch flip
  double kill_for = 5;
  std::string conveyor;
  // Keyed mode (keys > 0): every key's own fleet bucket, no queue limit.
  uint32_t keys = 0;
  double key_rate = 5;
  uint32_t key_burst = 1;
  // Child only.
  std::string config, out;
  int64_t start_ns = 0, stop_ns = 0;
};

// The PostgreSQL schema of this run (the parent's pid: its children share it).
std::string run_schema() { return fmt::format("fleet_{}", getpid()); }

std::string config_text(const Options& o, const fs::path& dir) {
  std::string storage;
  if (o.plugin == "sqlite") {
    storage = fmt::format("[storage]\nplugin = \"sqlite\"\n[storage.options]\npath = \"{}\"\n",
                          (dir / "fleet.db").string());
  } else {
    storage = fmt::format(
        "[storage]\nplugin = \"{}\"\n[storage.options]\ndsn = \"{}\"\nschema = \"{}\"\n", o.plugin,
        o.dsn, run_schema());
  }
  // Enough workers and batch that only the limit throttles.
  std::string text = storage +
                     "[engine]\npoll_interval_ms = 200\nclaim_batch_max = 100\nworker_threads = "
                     "64\nretention_s = 3600\n[queues.fleet]\nmax_workers = 500\n";
  if (o.keys > 0)
    text += fmt::format("key_rate_limit = {{ rate = {}, burst = {}, scope = \"fleet\" }}\n",
                        o.key_rate, o.key_burst);
  return text;
}

// ---- child: one engine, recording when each job started ----

int run_child(const Options& o) {
  spdlog::set_level(spdlog::level::warn);
  conveyor::Config config = conveyor::load_config_file(o.config);
  conveyor::Engine engine(config);
  std::mutex mu;
  std::vector<int64_t> starts;
  std::vector<uint32_t> keys;  // keyed mode: each start's key (an index)
  starts.reserve(1 << 20);
  if (o.keys > 0) keys.reserve(1 << 20);
  engine.register_handler(kKind, [&](const conveyor::Job& job) {
    const int64_t t = realtime_ns();
    const auto key = o.keys > 0 ? static_cast<uint32_t>(std::stoul(job.key)) : 0;
    std::lock_guard lock(mu);
    starts.push_back(t);
    if (o.keys > 0) keys.push_back(key);
  });
  // When this engine saw the kill switch change (its follower's view).
  std::vector<std::pair<int64_t, bool>> flips;
  std::atomic<bool> done{false};
  sleep_until_ns(o.start_ns);
  engine.start();
  std::thread watch([&] {
    bool enabled = engine.rate_limiting().enabled;
    while (!done.load()) {
      const bool now = engine.rate_limiting().enabled;
      if (now != enabled) flips.emplace_back(realtime_ns(), now);
      enabled = now;
      std::this_thread::sleep_for(2ms);
    }
  });
  sleep_until_ns(o.stop_ns);
  engine.stop();
  done = true;
  watch.join();
  conveyor::Metrics& m = conveyor::EngineInternals::metrics(engine);
  conveyor::QueueCounters& c = m.queue(kQueue);
  std::ofstream out(o.out);
  out << fmt::format(
      "claims {} swaps {} conflicts {} throttled {} key_throttled {} key_calls {} listings {}\n",
      c.claims.load(), c.fleet_swaps.load(), c.fleet_conflicts.load(), c.throttled.load(),
      c.key_throttled.load(), c.key_bucket_calls.load(), c.key_listings.load());
  out << "flips";
  for (const auto& [t, enabled] : flips) out << ' ' << t << ' ' << (enabled ? 1 : 0);
  out << "\nstarts";
  for (int64_t t : starts) out << ' ' << t;
  out << "\nkeys";
  for (uint32_t k : keys) out << ' ' << k;
  out << '\n';
  return 0;
}

// ---- parent ----

struct ChildResult {
  uint64_t claims = 0, swaps = 0, conflicts = 0, throttled = 0, key_throttled = 0;
  uint64_t key_calls = 0, listings = 0;  // keyed mode: storage calls for the keys
  std::vector<std::pair<int64_t, bool>> flips;
  std::vector<int64_t> starts;
  std::vector<uint32_t> keys;  // keyed mode: starts[i]'s key
};

ChildResult read_child(const fs::path& file) {
  std::ifstream in(file);
  ChildResult r;
  std::string word;
  in >> word >> r.claims >> word >> r.swaps >> word >> r.conflicts >> word >> r.throttled >> word >>
      r.key_throttled >> word >> r.key_calls >> word >> r.listings;
  std::string line;
  std::getline(in, line);
  std::getline(in, line);
  std::istringstream flips(line);
  flips >> word;
  int64_t t = 0;
  int e = 0;
  while (flips >> t >> e) r.flips.emplace_back(t, e != 0);
  std::getline(in, line);
  std::istringstream starts(line);
  starts >> word;
  while (starts >> t) r.starts.push_back(t);
  std::getline(in, line);
  std::istringstream keys(line);
  keys >> word;
  uint32_t k = 0;
  while (keys >> k) r.keys.push_back(k);
  if (!r.keys.empty() && r.keys.size() != r.starts.size())
    throw std::runtime_error("a child's keys do not match its starts: " + file.string());
  return r;
}

// Starts in [from, to), as a fleet rate (jobs/s).
double rate_between(const std::vector<int64_t>& s, int64_t from, int64_t to) {
  const auto a = std::lower_bound(s.begin(), s.end(), from);
  const auto b = std::lower_bound(s.begin(), s.end(), to);
  return static_cast<double>(b - a) / (static_cast<double>(to - from) / 1e9);
}

std::vector<int64_t> slice(const std::vector<int64_t>& s, int64_t from, int64_t to) {
  return {std::lower_bound(s.begin(), s.end(), from), std::lower_bound(s.begin(), s.end(), to)};
}

// Keyed mode's report: each key's starts against its own fleet bucket.
void report_keys(const Options& o, const std::vector<ChildResult>& results, int64_t start,
                 int64_t stop, size_t backlog) {
  const conveyor::RateLimit per_key =
      conveyor::make_rate_limit(o.key_rate, o.key_burst, conveyor::LimitScope::kFleet);
  std::vector<KeyStart> starts;  // ns since the run's start
  std::vector<std::vector<int64_t>> by_key(o.keys);
  uint64_t claims = 0, swaps = 0, conflicts = 0, key_throttled = 0, key_calls = 0, listings = 0;
  std::string per;
  for (const ChildResult& r : results) {
    key_calls += r.key_calls;
    listings += r.listings;
    for (size_t i = 0; i < r.starts.size(); ++i) {
      starts.push_back(KeyStart{r.keys[i], r.starts[i] - start});
      if (r.keys[i] < o.keys) by_key[r.keys[i]].push_back(r.starts[i]);
    }
    claims += r.claims;
    swaps += r.swaps;
    conflicts += r.conflicts;
    key_throttled += r.key_throttled;
    per += fmt::format(" {} ({} claims, {} bucket takes in {} calls)", r.starts.size(), r.claims,
                       r.swaps, r.key_calls);
  }
  std::cout << fmt::format(
      "{} processes on {} ({}), {} keys, key_rate_limit {}/s burst {} scope fleet each (no "
      "queue limit), {} s; backlog {} jobs ({} per key)\n",
      o.processes, o.plugin, o.plugin == "sqlite" ? "one file" : "one database", o.keys,
      per_key.rate_per_sec, per_key.burst, o.seconds, backlog, backlog / o.keys);
  std::cout << fmt::format("started: {} in all; per process:{}\n", starts.size(), per);
  // The steady window leaves out the first second (each key's burst).
  const int64_t from = 1'000'000'000, to = stop - start;
  const double window_s = static_cast<double>(to - from) / 1e9;
  const conveyor::bench::KeyAccuracy a = analyze_keys(starts, o.keys, per_key, from, to - 1);
  const double target = per_key.rate_per_sec;
  const auto pct = [&](double rate) { return (rate - target) / target * 100; };
  const double lo = a.count_min / window_s, mid = a.count_median / window_s,
               hi = a.count_max / window_s;
  std::cout << fmt::format(
      "per key, steady ({:.0f} s from 1 s in): min {:.2f}/s ({:+.2f}%), median {:.2f}/s "
      "({:+.2f}%), max {:.2f}/s ({:+.2f}%) of {:.2f}/s; worst deviation {:.2f}%\n",
      window_s, lo, pct(lo), mid, pct(mid), hi, pct(hi), target,
      std::max(std::abs(pct(lo)), std::abs(pct(hi))));
  // Every window of each key (the processes' clocks are one clock).
  conveyor::bench::WindowExcess worst;
  uint32_t worst_key = 0;
  std::vector<std::pair<double, uint32_t>> off;  // keys over 10% off, by deviation
  for (uint32_t k = 0; k < o.keys; ++k) {
    std::vector<int64_t>& t = by_key[k];
    std::sort(t.begin(), t.end());
    const auto w = worst_window_excess(t, per_key);
    if (w.excess > worst.excess) {
      worst = w;
      worst_key = k;
    }
    const double dev = pct(rate_between(t, start + from, stop));
    if (std::abs(dev) > 10) off.emplace_back(dev, k);
  }
  std::cout << fmt::format(
      "worst window of any key: {:.2f} starts over burst + rate*t (= {:.1f} ms of the key's "
      "rate; key {}, the window {:.3f} s long, ending {:.3f} s into the run); from the run's "
      "start: {:.2f}\n",
      worst.excess, worst.excess / target * 1000, worst_key, worst.length_s,
      worst.excess > 0 ? worst.at_s - static_cast<double>(start) / 1e9 : 0.0,
      a.worst_excess_from_start);
  std::sort(off.begin(), off.end(),
            [](const auto& x, const auto& y) { return std::abs(x.first) > std::abs(y.first); });
  std::string list;
  for (size_t i = 0; i < off.size() && i < 10; ++i)
    list += fmt::format(" key {} {:+.1f}%", off[i].second, off[i].first);
  std::cout << fmt::format("keys over 10% off their rate: {}{}\n", off.size(), list);
  const double expected = target * o.keys;
  std::cout << fmt::format("aggregate: {:.2f}/s ({:+.2f}% of {:.2f}/s)\n", a.jobs_per_sec,
                           (a.jobs_per_sec - expected) / expected * 100, expected);
  const auto ratio = [](uint64_t n, uint64_t d) { return d ? static_cast<double>(n) / d : 0.0; };
  std::cout << fmt::format(
      "claims: {} ({:.1f} jobs each); key bucket takes: {} ({:.2f} per job, {} lost a race) in {} "
      "add_shared_states calls ({:.2f} per claim); key listings: {} ({:.2f} per claim); storage "
      "calls per claim: {:.2f} (the claim, the bucket call, the listings); key turns throttled: "
      "{}\n",
      claims, ratio(starts.size(), claims), swaps, ratio(swaps, starts.size()), conflicts,
      key_calls, ratio(key_calls, claims), listings, ratio(listings, claims),
      claims ? 1 + ratio(key_calls + listings, claims) : 0.0, key_throttled);
}

int run_parent(const Options& o, const std::string& self) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("conveyor-fleet-bench-{}", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string config_path = (dir / "conveyor.toml").string();
  std::ofstream(config_path) << config_text(o, dir);
  const conveyor::LimitScope scope = conveyor::parse_limit_scope(o.scope);
  const conveyor::RateLimit limit = conveyor::make_rate_limit(o.rate, o.burst, scope);
  const bool kill = o.kill_at > 0;
  // A backlog no run drains: the limit's share, times the processes for
  // scope "process", plus an unthrottled allowance while the switch is off.
  const double per_cost_rate = o.rate / o.cost;
  const double fleet_rate =
      scope == conveyor::LimitScope::kFleet ? per_cost_rate : per_cost_rate * o.processes;
  const bool keyed = o.keys > 0;
  // Keyed: as many per key, from its own limit, enqueued round-robin so
  // every key has jobs to the end.
  const auto per_key = static_cast<size_t>(o.key_rate * (o.seconds + 5) * 1.3 + o.key_burst * 4.0);
  const auto backlog = keyed ? per_key * o.keys
                             : static_cast<size_t>(fleet_rate * (o.seconds + 5) * 1.3 +
                                                   o.burst * 4 + (kill ? 50000 * o.kill_for : 0));
  {
    spdlog::set_level(spdlog::level::warn);
    conveyor::Engine producer(conveyor::load_config_file(config_path));
    if (!keyed) producer.set_rate_limit(kQueue, limit);
    std::vector<conveyor::NewJob> batch;
    for (size_t done = 0; done < backlog;) {
      batch.clear();
      for (size_t i = 0; i < 5000 && done < backlog; ++i, ++done) {
        conveyor::NewJob j;
        j.queue = kQueue;
        j.kind = kKind;
        j.cost = o.cost;
        if (keyed) j.key = std::to_string(done % o.keys);
        batch.push_back(std::move(j));
      }
      producer.enqueue_batch(batch);
    }
  }
  const int64_t start = realtime_ns() + 2'000'000'000;  // every child loaded by then
  const int64_t stop = start + static_cast<int64_t>(o.seconds * 1e9);
  std::vector<pid_t> children;
  const std::string log = (dir / "children.log").string();
  for (int i = 0; i < o.processes; ++i)
    children.push_back(
        spawn({self, "--child", "--config", config_path, "--out",
               (dir / fmt::format("child-{}.txt", i)).string(), "--start-ns", std::to_string(start),
               "--stop-ns", std::to_string(stop), "--keys", std::to_string(o.keys)},
              log));
  int64_t disabled_at = 0, enabled_at = 0;
  if (kill) {
    const std::string cli = o.conveyor;
    sleep_until_ns(start + static_cast<int64_t>(o.kill_at * 1e9));
    if (wait_for(spawn({cli, "--config", config_path, "ratelimit", "disable"}, log)) != 0)
      throw std::runtime_error("conveyor ratelimit disable failed; see " + log);
    disabled_at = realtime_ns();
    sleep_until_ns(start + static_cast<int64_t>((o.kill_at + o.kill_for) * 1e9));
    if (wait_for(spawn({cli, "--config", config_path, "ratelimit", "enable"}, log)) != 0)
      throw std::runtime_error("conveyor ratelimit enable failed; see " + log);
    enabled_at = realtime_ns();
  }
  for (pid_t pid : children)
    if (wait_for(pid) != 0) throw std::runtime_error("a child failed; see " + log);

  std::vector<int64_t> all;
  std::vector<ChildResult> results;
  uint64_t claims = 0, swaps = 0, conflicts = 0;
  for (int i = 0; i < o.processes; ++i) {
    results.push_back(read_child(dir / fmt::format("child-{}.txt", i)));
    const ChildResult& r = results.back();
    all.insert(all.end(), r.starts.begin(), r.starts.end());
    claims += r.claims;
    swaps += r.swaps;
    conflicts += r.conflicts;
  }
  std::sort(all.begin(), all.end());
  // The undrained backlog goes too: left behind, autovacuum of old runs'
  // schemas would load the server during the next run.
  const auto clean_up = [&] {
    if (o.plugin != "sqlite") conveyor::bench::PostgresProbe(o.dsn).drop_schema(run_schema());
    fs::remove_all(dir);
  };
  if (keyed) {
    report_keys(o, results, start, stop, backlog);
    clean_up();
    return 0;
  }
  std::cout << fmt::format(
      "{} processes on {} ({}), limit {}/s burst {} scope {}, job cost {}, {} s; backlog {} "
      "jobs\n",
      o.processes, o.plugin, o.plugin == "sqlite" ? "one file" : "one database", o.rate, o.burst,
      o.scope, o.cost, o.seconds, backlog);
  std::string per;
  for (const ChildResult& r : results)
    per += fmt::format(" {} ({} claims, {} bucket calls)", r.starts.size(), r.claims, r.swaps);
  std::cout << fmt::format("started: {} in all; per process:{}\n", all.size(), per);
  // Job starts against the token bound: cost tokens per start.
  const conveyor::RateLimit job_limit{o.rate / o.cost, static_cast<uint32_t>(o.burst / o.cost),
                                      scope};
  auto report = [&](const char* what, int64_t from, int64_t to) {
    const std::vector<int64_t> s = slice(all, from, to);
    // The steady rate leaves out the first second (the burst).
    const double steady = rate_between(all, from + 1'000'000'000, to);
    const auto w = worst_window_excess(s, job_limit);
    std::cout << fmt::format(
        "{}: fleet rate {:.2f}/s (steady, after the first second; {:+.2f}% of {:.2f}/s); "
        "worst window: {:.2f} starts over burst + rate*t (= {:.1f} ms of the rate; the window "
        "{:.3f} s long, ending {:.3f} s into the run)\n",
        what, steady, (steady - job_limit.rate_per_sec) / job_limit.rate_per_sec * 100,
        job_limit.rate_per_sec, w.excess, w.excess / job_limit.rate_per_sec * 1000, w.length_s,
        w.excess > 0 ? w.at_s - static_cast<double>(start) / 1e9 : 0.0);
  };
  if (!kill) {
    report("whole run", start, stop);
  } else {
    report("before the switch", start, disabled_at);
    std::cout << fmt::format("while disabled: fleet rate {:.0f}/s\n",
                             rate_between(all, disabled_at + 1'000'000'000, enabled_at));
    report("after re-enabling (from 1 s after)", enabled_at + 1'000'000'000, stop);
    for (size_t i = 0; i < results.size(); ++i) {
      int64_t saw_off = -1, saw_on = -1;
      for (const auto& [t, enabled] : results[i].flips) {
        if (!enabled && saw_off < 0) saw_off = t - disabled_at;
        if (enabled && t >= disabled_at && saw_on < 0) saw_on = t - enabled_at;
      }
      std::cout << fmt::format(
          "process {}: followed disable after {:.0f} ms, enable after {:.0f} ms\n", i,
          saw_off / 1e6, saw_on / 1e6);
    }
    conveyor::Engine check(conveyor::load_config_file(config_path));
    const auto& overrides = conveyor::EngineInternals::limits(check).overrides();
    std::cout << fmt::format(
        "override after the flips: {}\n",
        overrides.size() == 1 && overrides[0].limit == limit ? "unchanged" : "CHANGED OR GONE");
  }
  std::cout << fmt::format(
      "claims: {} ({:.1f} jobs each); fleet bucket calls: {} ({:.2f} per claim), of which {} "
      "lost a race\n",
      claims, claims ? static_cast<double>(all.size()) / claims : 0.0, swaps,
      claims ? static_cast<double>(swaps) / claims : 0.0, conflicts);
  clean_up();
  return 0;
}

int usage() {
  std::cerr << "usage: conveyor-fleet-bench --plugin sqlite|postgres|postgres-queue [--dsn DSN] "
               "[--processes 3] [--rate 50] [--burst 10] [--scope fleet|process] [--seconds 20] "
               "[--cost 1] [--kill-switch-at S --kill-switch-for S] [--conveyor PATH]\n"
               "       keyed: --keys N [--key-rate 5] [--key-burst 1] (no --rate/--burst/--scope/"
               "--cost/--kill-switch-at)\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.conveyor = (fs::path(argv[0]).parent_path() / "conveyor").string();
  bool child = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--child")
        child = true;
      else if (a == "--plugin")
        o.plugin = value();
      else if (a == "--dsn")
        o.dsn = value();
      else if (a == "--processes")
        o.processes = std::stoi(value());
      else if (a == "--rate")
        o.rate = std::stod(value());
      else if (a == "--burst")
        o.burst = static_cast<uint32_t>(std::stoul(value()));
      else if (a == "--scope")
        o.scope = value();
      else if (a == "--seconds")
        o.seconds = std::stod(value());
      else if (a == "--cost")
        o.cost = std::stoi(value());
      else if (a == "--kill-switch-at")
        o.kill_at = std::stod(value());
      else if (a == "--kill-switch-for")
        o.kill_for = std::stod(value());
      else if (a == "--keys")
        o.keys = static_cast<uint32_t>(std::stoul(value()));
      else if (a == "--key-rate")
        o.key_rate = std::stod(value());
      else if (a == "--key-burst")
        o.key_burst = static_cast<uint32_t>(std::stoul(value()));
      else if (a == "--conveyor")
        o.conveyor = value();
      else if (a == "--config")
        o.config = value();
      else if (a == "--out")
        o.out = value();
      else if (a == "--start-ns")
        o.start_ns = std::stoll(value());
      else if (a == "--stop-ns")
        o.stop_ns = std::stoll(value());
      else
        return usage();
    }
    if (child) return run_child(o);
    if (o.plugin != "sqlite" && o.dsn.empty()) {
      std::cerr << "--plugin " << o.plugin << " needs --dsn (a PostgreSQL connection string)\n";
      return 2;
    }
    if (o.processes < 1 || o.cost < 1 || o.burst < 1) return usage();
    if (o.keys > 0 && (o.key_rate <= 0 || o.key_burst < 1 || o.cost != 1 || o.kill_at > 0))
      return usage();
    return run_parent(o, fs::canonical("/proc/self/exe").string());
  } catch (const std::exception& e) {
    std::cerr << "conveyor-fleet-bench: " << e.what() << "\n";
    return 1;
  }
}
