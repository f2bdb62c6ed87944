// Prometheus text exposition (prometheus.hpp).
#include "prometheus.hpp"

#include <conveyor/internal/engine_internals.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#ifndef CONVEYOR_VERSION
#define CONVEYOR_VERSION "unknown"
#endif

namespace conveyor {
namespace {

// Said in the HELP text of every counter: Prometheus sums processes itself.
constexpr std::string_view kPerProcess =
    " Per process: counts what this process did since it started (sum over processes).";

// A sample value: integers as such, floats shortest, specials as Prometheus spells them.
std::string value_text(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);  // shortest round-trip text, "0.0005" rather than "5e-04"
}

struct Row {
  const QueueCountersSnapshot* counters = nullptr;
  const QueueStats* stats = nullptr;
  const EffectiveLimit* limit = nullptr;
};

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help,
            bool per_process = false) {
  out.append("# HELP ").append(name).append(" ").append(help);
  if (per_process) out.append(kPerProcess);
  out.append("\n# TYPE ").append(name).append(" ").append(type).append("\n");
}

void sample(std::string& out, std::string_view name, std::string_view labels,
            std::string_view value) {
  out.append(name);
  if (!labels.empty()) out.append("{").append(labels).append("}");
  out.append(" ").append(value).append("\n");
}

std::string queue_label(const std::string& queue) {
  return "queue=\"" + escape_label_value(queue) + "\"";
}

void histogram(std::string& out, std::string_view name, std::string_view help,
               const std::map<std::string, Row>& rows,
               Histogram::Snapshot QueueCountersSnapshot::*which) {
  family(out, name, "histogram", help, true);
  const Histogram::Snapshot empty;
  const std::string bucket = std::string(name) + "_bucket";
  for (const auto& [queue, row] : rows) {
    const Histogram::Snapshot& h = row.counters ? row.counters->*which : empty;
    const std::string q = queue_label(queue);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < Histogram::kBounds.size(); ++i) {
      cumulative += h.buckets[i];
      sample(out, bucket, q + ",le=\"" + value_text(Histogram::kBounds[i]) + "\"",
             std::to_string(cumulative));
    }
    cumulative += h.buckets.back();
    // +Inf must equal _count: the snapshot's count is read apart from its
    // buckets, so both come from the buckets here.
    sample(out, bucket, q + ",le=\"+Inf\"", std::to_string(cumulative));
    sample(out, std::string(name) + "_sum", q, value_text(h.sum));
    sample(out, std::string(name) + "_count", q, std::to_string(cumulative));
  }
}

void process_metrics(std::string& out, const ProcessStats& p) {
  const struct {
    const char* name;
    const char* type;
    const char* help;
    double value;
  } kRows[] = {
      {"process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
       p.cpu_seconds},
      {"process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
       p.resident_memory_bytes},
      {"process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
       p.virtual_memory_bytes},
      {"process_start_time_seconds", "gauge",
       "Start time of the process since unix epoch in seconds.", p.start_time_seconds},
      {"process_open_fds", "gauge", "Number of open file descriptors.", p.open_fds},
      {"process_max_fds", "gauge", "Maximum number of open file descriptors.", p.max_fds},
      {"process_threads", "gauge", "Number of OS threads in the process.", p.threads},
  };
  for (const auto& r : kRows) {
    family(out, r.name, r.type, r.help);
    sample(out, r.name, "", value_text(r.value));
  }
}

// Every queue the page names.
std::set<std::string, std::less<>> page_queues(const MetricsPage& page) {
  std::set<std::string, std::less<>> out;
  for (const auto& c : page.counters) out.insert(c.queue);
  for (const auto& s : page.stats) out.insert(s.queue);
  for (const auto& [queue, limit] : page.limits) out.insert(queue);
  for (const auto& [queue, kinds] : page.unserved) out.insert(queue);
  for (const auto& [queue, until] : page.backoff_until_us) out.insert(queue);
  for (const auto& [queue, keys] : page.key_counts) out.insert(queue);
  return out;
}

void add_histogram(Histogram::Snapshot& to, const Histogram::Snapshot& h) {
  for (size_t i = 0; i < to.buckets.size(); ++i) to.buckets[i] += h.buckets[i];
  to.count += h.count;
  to.sum += h.sum;
}

// The page with the queues past its cap summed into one "_other" queue.
struct Folded {
  MetricsPage page;
  size_t other_queues = 0;    // how many queues "_other" sums
  uint64_t other_paused = 0;  // how many of them are paused
};

// nullopt: every queue keeps its own series (no cap, or not over it).
std::optional<Folded> fold_queues(const MetricsPage& page) {
  if (page.max_queues == 0) return std::nullopt;
  const auto all = page_queues(page);
  std::set<std::string, std::less<>> own;
  if (page.own_series) {
    own = *page.own_series;
  } else {
    if (all.size() <= page.max_queues) return std::nullopt;
    std::vector<std::string> ranked = rank_metrics_queues(page);
    ranked.resize(page.max_queues);
    own.insert(ranked.begin(), ranked.end());
  }
  const auto other = [&](const std::string& queue) { return !own.contains(queue); };
  Folded f;
  f.other_queues = static_cast<size_t>(std::count_if(all.begin(), all.end(), other));
  if (f.other_queues == 0) return std::nullopt;
  const std::string other_label(kOtherQueuesLabel);
  MetricsPage& out = f.page;
  out.stats_age_seconds = page.stats_age_seconds;
  out.rate_limit_enabled = page.rate_limit_enabled;
  out.rescued_unattributed = page.rescued_unattributed;
  out.now_us = page.now_us;
  out.storage_errors = page.storage_errors;
  out.build_info = page.build_info;
  out.process = page.process;
  out.remote_workers = page.remote_workers;
  out.remote_jobs_held = page.remote_jobs_held;
  out.max_queues = 0;  // folded already

  // Counters and histograms: sums (so sum() over queues stays exact).
  QueueCountersSnapshot oc;
  oc.queue = other_label;
  for (const auto& c : page.counters) {
    if (!other(c.queue)) {
      out.counters.push_back(c);
      continue;
    }
    for (uint64_t QueueCountersSnapshot::*field :
         {&QueueCountersSnapshot::enqueued, &QueueCountersSnapshot::dispatched,
          &QueueCountersSnapshot::completed, &QueueCountersSnapshot::failed,
          &QueueCountersSnapshot::retried, &QueueCountersSnapshot::throttled,
          &QueueCountersSnapshot::leases_lost, &QueueCountersSnapshot::rescued,
          &QueueCountersSnapshot::backoffs, &QueueCountersSnapshot::claims,
          &QueueCountersSnapshot::fleet_swaps, &QueueCountersSnapshot::fleet_conflicts,
          &QueueCountersSnapshot::key_throttled, &QueueCountersSnapshot::timed_out})
      oc.*field += c.*field;
    add_histogram(oc.pickup_latency, c.pickup_latency);
    add_histogram(oc.duration, c.duration);
  }
  out.counters.push_back(std::move(oc));  // zeros when none has counters: the row is there

  // Storage's counts: sums; the oldest pending job of them all.
  QueueStats os;
  os.queue = other_label;
  bool any_stats = false;
  for (const auto& s : page.stats) {
    if (!other(s.queue)) {
      out.stats.push_back(s);
      continue;
    }
    any_stats = true;
    if (s.paused) ++f.other_paused;
    for (int64_t QueueStats::*field :
         {&QueueStats::pending, &QueueStats::scheduled, &QueueStats::running,
          &QueueStats::completed, &QueueStats::failed, &QueueStats::cancelled})
      os.*field += s.*field;
    if (!s.oldest_pending_known) continue;
    os.oldest_pending_known = true;
    if (s.oldest_pending_run_at_us > 0 &&
        (os.oldest_pending_run_at_us == 0 ||
         s.oldest_pending_run_at_us < os.oldest_pending_run_at_us))
      os.oldest_pending_run_at_us = s.oldest_pending_run_at_us;
  }
  if (any_stats) out.stats.push_back(std::move(os));

  // Limits: per queue only (a sum of limits means nothing).
  for (const auto& [queue, limit] : page.limits)
    if (!other(queue)) out.limits.emplace(queue, limit);

  std::map<std::string, int64_t, std::less<>> unserved;  // by kind
  for (const auto& [queue, kinds] : page.unserved) {
    if (!other(queue)) {
      out.unserved.emplace(queue, kinds);
      continue;
    }
    for (const KindCount& k : kinds) unserved[k.kind] += k.pending;
  }
  if (!unserved.empty()) {
    auto& kinds = out.unserved[other_label];
    for (const auto& [kind, n] : unserved) kinds.push_back(KindCount{kind, n});
  }

  std::optional<int64_t> backoff;  // the last hold to end
  for (const auto& [queue, until_us] : page.backoff_until_us) {
    if (!other(queue))
      out.backoff_until_us.emplace(queue, until_us);
    else
      backoff = std::max(backoff.value_or(until_us), until_us);
  }
  if (backoff) out.backoff_until_us[other_label] = *backoff;

  std::optional<QueueKeyCounts> keys;
  for (const auto& [queue, c] : page.key_counts) {
    if (!other(queue)) {
      out.key_counts.emplace(queue, c);
      continue;
    }
    if (!keys) keys.emplace();
    keys->ready += c.ready;
    keys->running += c.running;
  }
  if (keys) out.key_counts[other_label] = *keys;
  return f;
}

}  // namespace

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::optional<ProcessStats> read_process_stats() {
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces and ')': fields follow the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(close + 2));
  std::vector<std::string> f{std::istream_iterator<std::string>(fields),
                             std::istream_iterator<std::string>()};
  // f[0] is field 3 (state): field N is f[N - 3].
  if (f.size() < 22) return std::nullopt;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  ProcessStats p;
  p.cpu_seconds = (std::stod(f[14 - 3]) + std::stod(f[15 - 3])) / ticks;
  p.threads = std::stod(f[20 - 3]);
  p.virtual_memory_bytes = std::stod(f[23 - 3]);
  p.resident_memory_bytes = std::stod(f[24 - 3]) * page;
  // Start time is in ticks after boot; boot time is /proc/stat's btime.
  std::ifstream proc_stat("/proc/stat");
  for (std::string line; std::getline(proc_stat, line);)
    if (line.rfind("btime ", 0) == 0) p.start_time_seconds = std::stod(line.substr(6));
  p.start_time_seconds += std::stod(f[22 - 3]) / ticks;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    p.open_fds += 1;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) p.max_fds = static_cast<double>(limit.rlim_cur);
  return p;
}

QueueStatsCache::QueueStatsCache(Read read, const Clock& clock, std::chrono::milliseconds max_age)
    : read_(std::move(read)), clock_(clock), max_age_(max_age) {}

QueueStatsCache::~QueueStatsCache() {
  std::lock_guard lock(mu_);
  if (in_flight_.valid()) in_flight_.wait();
}

void QueueStatsCache::take_finished() {
  if (!in_flight_.valid() ||
      in_flight_.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
    return;
  Done done = in_flight_.get();
  if (!done.error.empty()) {
    spdlog::warn("/metrics: reading queue counts failed: {}", done.error);
    return;
  }
  stats_ = std::move(done.stats);
  read_at_ = done.started;
}

QueueStatsCache::Counts QueueStatsCache::get() {
  std::lock_guard lock(mu_);
  take_finished();
  const SteadyTime now = clock_.steady_now();
  if (!in_flight_.valid() && (!read_at_ || now - *read_at_ >= max_age_)) {
    in_flight_ = std::async(std::launch::async, [this, now] {
      Done done{{}, now, {}};
      try {
        done.stats = read_();
      } catch (const std::exception& e) {
        done.error = e.what();
        if (done.error.empty()) done.error = "unknown error";
      }
      return done;
    });
    // Nothing to show yet: the first scrape waits for its counts.
    if (!read_at_) {
      in_flight_.wait();
      take_finished();
    }
  }
  Counts out{stats_, std::nullopt};
  if (read_at_) out.age_seconds = std::chrono::duration<double>(now - *read_at_).count();
  return out;
}

MetricsPage collect_metrics_page(Engine& engine, QueueStatsCache::Counts counts) {
  MetricsPage page;
  std::vector<QueueStats> stats = std::move(counts.stats);
  page.stats_age_seconds = counts.age_seconds;
  Metrics& metrics = EngineInternals::metrics(engine);
  const LimitResolver& limits = EngineInternals::limits(engine);
  page.counters = metrics.snapshot();
  page.stats = std::move(stats);
  // The live switch (storage, else the config), as this engine follows it.
  page.rate_limit_enabled = engine.rate_limiting().enabled;
  page.rescued_unattributed = metrics.rescued_unattributed.load(std::memory_order_relaxed);
  page.now_us = EngineInternals::clock(engine).wall_now_us();
  page.storage_errors = metrics.storage_errors_snapshot();
  for (const auto& c : page.counters) page.limits[c.queue] = limits.resolve(c.queue);
  for (const auto& s : page.stats) page.limits[s.queue] = limits.resolve(s.queue);
  for (const auto& [name, q] : engine.config().queues) page.limits[name] = limits.resolve(name);
  for (const auto& o : limits.overrides()) page.limits[o.queue] = limits.resolve(o.queue);
  const PluginInfo& plugin = EngineInternals::plugin_info(engine);
  page.build_info = {{"version", CONVEYOR_VERSION},
                     {"storage_plugin", plugin.name},
                     {"storage_plugin_version", plugin.version},
                     {"abi", fmt::format("{}.{}", plugin.abi_major, plugin.abi_minor)}};
  page.process = read_process_stats();
  page.unserved = EngineInternals::unserved_kinds(engine);
  page.backoff_until_us = EngineInternals::backoffs(engine);
  page.key_counts = EngineInternals::key_counts(engine);
  const RemoteWorkers& remote = EngineInternals::remote_workers(engine);
  page.remote_workers = remote.connected_workers();
  page.remote_jobs_held = remote.jobs_held();
  page.max_queues = engine.config().server.metrics_max_queues;
  for (const auto& [name, q] : engine.config().queues) page.configured_queues.insert(name);
  // Chosen once and kept: series neither come and go nor do "_other"'s sums drop.
  if (page.max_queues > 0)
    page.own_series = metrics.keep_series_queues(rank_metrics_queues(page), page.max_queues);
  return page;
}

std::vector<std::string> rank_metrics_queues(const MetricsPage& page) {
  std::map<std::string, uint64_t, std::less<>> activity;
  for (const std::string& queue : page_queues(page)) activity[queue] = 0;
  for (const auto& c : page.counters) activity[c.queue] += c.enqueued + c.dispatched;
  for (const auto& s : page.stats)
    activity[s.queue] += static_cast<uint64_t>(std::max<int64_t>(0, s.pending)) +
                         static_cast<uint64_t>(std::max<int64_t>(0, s.scheduled)) +
                         static_cast<uint64_t>(std::max<int64_t>(0, s.running));
  std::vector<std::pair<std::string, uint64_t>> rows(activity.begin(), activity.end());
  std::stable_sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) {
    const bool ac = page.configured_queues.contains(a.first);
    const bool bc = page.configured_queues.contains(b.first);
    if (ac != bc) return ac;
    return a.second > b.second;  // then by name: the map's order, kept by stable_sort
  });
  std::vector<std::string> out;
  out.reserve(rows.size());
  for (auto& [queue, n] : rows) out.push_back(std::move(queue));
  return out;
}

std::string render_prometheus(const std::vector<QueueCountersSnapshot>& counters,
                              const std::vector<QueueStats>& stats) {
  MetricsPage page;
  page.counters = counters;
  page.stats = stats;
  return render_prometheus(page);
}

std::string render_prometheus(const MetricsPage& full_page) {
  // Past the cap, the page with the other queues summed into "_other".
  const std::optional<Folded> folded = fold_queues(full_page);
  const MetricsPage& page = folded ? folded->page : full_page;
  std::map<std::string, Row> rows;
  for (const auto& c : page.counters) rows[c.queue].counters = &c;
  for (const auto& s : page.stats) rows[s.queue].stats = &s;
  for (const auto& [queue, limit] : page.limits) rows[queue].limit = &limit;

  std::string out;
  struct Counter {
    const char* name;
    const char* help;
    uint64_t QueueCountersSnapshot::*field;
  };
  static constexpr Counter kCounters[] = {
      {"conveyor_ratelimit_throttled_total",
       "Times the queue deferred dispatch because its rate limit was exhausted.",
       &QueueCountersSnapshot::throttled},
      {"conveyor_jobs_enqueued_total",
       "Jobs enqueued through this process (its API and embedded enqueue calls; not `conveyor "
       "enqueue` without --server, a process of its own: see conveyor_queue_jobs).",
       &QueueCountersSnapshot::enqueued},
      {"conveyor_jobs_dispatched_total", "Jobs claimed and handed to a worker by this process.",
       &QueueCountersSnapshot::dispatched},
      {"conveyor_jobs_completed_total", "Jobs that succeeded in this process.",
       &QueueCountersSnapshot::completed},
      {"conveyor_jobs_failed_total",
       "Jobs that failed for good in this process (attempts exhausted or permanent error).",
       &QueueCountersSnapshot::failed},
      {"conveyor_jobs_retried_total", "Failed attempts scheduled for a retry by this process.",
       &QueueCountersSnapshot::retried},
      {"conveyor_jobs_timed_out_total",
       "Attempts this process failed because they ran past their time limit (job_timeout_s, or "
       "the job's own timeout): its handlers' and its remote workers' jobs. Each is also a "
       "failed attempt (conveyor_jobs_retried_total or conveyor_jobs_failed_total).",
       &QueueCountersSnapshot::timed_out},
      {"conveyor_leases_lost_total",
       "Job outcomes storage refused because the job's lease was gone (it expired and was "
       "rescued, or the job was cancelled); the job's result was discarded.",
       &QueueCountersSnapshot::leases_lost},
      {"conveyor_jobs_rescued_total",
       "Running jobs whose lease had expired (their worker died or stalled) that this process's "
       "rescue step made runnable again or failed (no attempts left). A series with queue=\"\" "
       "counts rescues a storage plugin of ABI 1.0 reports without their queues.",
       &QueueCountersSnapshot::rescued},
      {"conveyor_claims_total",
       "Claim calls this process made to storage for the queue (one per batch, empty ones "
       "included).",
       &QueueCountersSnapshot::claims},
      {"conveyor_ratelimit_fleet_calls_total",
       "Storage calls this process made for the queue's fleet-scoped bucket (takes, reads, "
       "holds): about one per claimed batch (conveyor_claims_total), plus a waiting process's "
       "checks.",
       &QueueCountersSnapshot::fleet_swaps},
      {"conveyor_ratelimit_fleet_conflicts_total",
       "Fleet bucket calls of this process that found another process had taken the tokens "
       "its cached state promised (a lost race; the process then backs off).",
       &QueueCountersSnapshot::fleet_conflicts},
      {"conveyor_ratelimit_key_throttled_total",
       "Times a key of the queue with ready jobs was passed over in its turn, or was left with "
       "jobs by a claim that spent its last token, because its own bucket (key_rate_limit) was "
       "empty.",
       &QueueCountersSnapshot::key_throttled},
      {"conveyor_ratelimit_backoff_total",
       "Times a handler or remote worker of this process said the downstream asked to wait "
       "(backpressure: RetryAfter, a worker's backpressure fail); each holds the queue.",
       &QueueCountersSnapshot::backoffs},
  };
  for (const Counter& c : kCounters) {
    family(out, c.name, "counter", c.help, true);
    for (const auto& [queue, row] : rows)
      sample(out, c.name, queue_label(queue),
             std::to_string(row.counters ? row.counters->*c.field : 0));
    if (c.field == &QueueCountersSnapshot::rescued && page.rescued_unattributed > 0)
      sample(out, c.name, queue_label(""), std::to_string(page.rescued_unattributed));
  }
  family(out, "conveyor_storage_errors_total", "counter",
         "Failed storage calls of the engine's background work, by operation (claims, recording "
         "outcomes, maintenance steps); transient errors included.",
         true);
  for (const auto& [operation, n] : page.storage_errors)
    sample(out, "conveyor_storage_errors_total",
           "operation=\"" + escape_label_value(operation) + "\"", std::to_string(n));

  struct State {
    const char* name;
    int64_t QueueStats::*field;
  };
  static constexpr State kStates[] = {
      {"pending", &QueueStats::pending}, {"scheduled", &QueueStats::scheduled},
      {"running", &QueueStats::running}, {"completed", &QueueStats::completed},
      {"failed", &QueueStats::failed},   {"cancelled", &QueueStats::cancelled},
  };
  family(out, "conveyor_queue_jobs", "gauge",
         "Jobs per queue and state as storage counts them, all processes: pending (ready now), "
         "scheduled (run later), running, and the retained completed, failed and cancelled ones "
         "(until purged). Read from storage at most once a second, in the background.");
  for (const auto& [queue, row] : rows)
    for (const State& s : kStates)
      sample(out, "conveyor_queue_jobs", queue_label(queue) + ",state=\"" + s.name + "\"",
             std::to_string(row.stats ? row.stats->*s.field : 0));
  if (page.stats_age_seconds) {
    family(out, "conveyor_queue_stats_age_seconds", "gauge",
           "How old the conveyor_queue_jobs counts are (read from storage in the background, "
           "at most once a second).");
    sample(out, "conveyor_queue_stats_age_seconds", "", value_text(*page.stats_age_seconds));
  }
  // Only queues whose plugin reports it (ABI 1.1): a 1.0 plugin's zero
  // would read as "nothing waiting".
  bool any_oldest = false;
  for (const auto& [queue, row] : rows) any_oldest |= row.stats && row.stats->oldest_pending_known;
  if (any_oldest) {
    family(out, "conveyor_queue_oldest_pending_age_seconds", "gauge",
           "Seconds since the queue's longest-waiting pending job became ready (its run_at); 0 "
           "when none is pending. From storage's counts (at most a second old).");
    for (const auto& [queue, row] : rows) {
      if (row.stats && !row.stats->oldest_pending_known) continue;
      const int64_t ready = row.stats ? row.stats->oldest_pending_run_at_us : 0;  // no jobs: 0
      const double age = ready > 0 && page.now_us > ready ? (page.now_us - ready) / 1e6 : 0.0;
      sample(out, "conveyor_queue_oldest_pending_age_seconds", queue_label(queue), value_text(age));
    }
  }
  family(out, "conveyor_queue_pending", "gauge",
         "Jobs ready to run now, as storage counts them (conveyor_queue_jobs{state=\"pending\"}).");
  for (const auto& [queue, row] : rows)
    sample(out, "conveyor_queue_pending", queue_label(queue),
           std::to_string(row.stats ? row.stats->pending : 0));
  family(out, "conveyor_queue_paused", "gauge", "1 when the queue is paused.");
  for (const auto& [queue, row] : rows)
    sample(out, "conveyor_queue_paused", queue_label(queue),
           folded && queue == kOtherQueuesLabel ? std::to_string(folded->other_paused)
           : row.stats && row.stats->paused     ? "1"
                                                : "0");

  family(out, "conveyor_queue_unserved_jobs", "gauge",
         "Pending jobs, ready longer than engine.unknown_kind_grace_s, whose kind no consumer of "
         "this process serves: they wait until one does. Counted among the first 1000 such jobs "
         "of the queue, rescanned every few seconds; no series: none.");
  for (const auto& [queue, kinds] : page.unserved)
    for (const KindCount& k : kinds)
      sample(out, "conveyor_queue_unserved_jobs",
             queue_label(queue) + ",kind=\"" + escape_label_value(k.kind) + "\"",
             std::to_string(k.pending));

  family(out, "conveyor_queue_keys", "gauge",
         "Keys of a keyed queue as this process's dispatch knows them: state=\"ready\" keys "
         "with ready jobs (as last read from storage, less what was claimed since), "
         "state=\"running\" keys with jobs running in this process. No series: the queue is "
         "not keyed here (fairness = \"fifo\", a plugin before ABI 1.4) or not dispatched yet.");
  for (const auto& [queue, c] : page.key_counts) {
    sample(out, "conveyor_queue_keys", queue_label(queue) + ",state=\"ready\"",
           std::to_string(c.ready));
    sample(out, "conveyor_queue_keys", queue_label(queue) + ",state=\"running\"",
           std::to_string(c.running));
  }

  family(out, "conveyor_ratelimit_enabled", "gauge",
         "1 when rate limits apply, 0 when the kill switch is off (conveyor ratelimit disable, "
         "else [engine] rate_limit_enabled).");
  sample(out, "conveyor_ratelimit_enabled", "", page.rate_limit_enabled ? "1" : "0");
  for (const bool rate : {true, false}) {
    const char* name = rate ? "conveyor_ratelimit_rate" : "conveyor_ratelimit_burst";
    family(out, name, "gauge",
           rate ? "The queue's effective rate limit in jobs per second, and where it comes "
                  "from (source: override, queue-config, default), and its scope (process: this "
                  "process's bucket; fleet: one bucket for every process on the storage). No "
                  "series: unlimited."
                : "The queue's effective burst in jobs (see conveyor_ratelimit_rate).");
    for (const auto& [queue, row] : rows) {
      if (!row.limit || !row.limit->limit) continue;
      const RateLimit& limit = *row.limit->limit;
      sample(out, name,
             queue_label(queue) + ",source=\"" + to_string(row.limit->source) + "\",scope=\"" +
                 to_string(limit.scope) + "\"",
             rate ? value_text(limit.rate_per_sec) : std::to_string(limit.burst));
    }
  }

  family(out, "conveyor_ratelimit_backoff_until_seconds", "gauge",
         "When the queue's backpressure hold ends (Unix time): the downstream asked it to wait "
         "and this process dispatches nothing of it until then. No series: not held.",
         true);
  for (const auto& [queue, until_us] : page.backoff_until_us)
    sample(out, "conveyor_ratelimit_backoff_until_seconds", queue_label(queue),
           value_text(static_cast<double>(until_us) / 1e6));

  histogram(out, "conveyor_job_pickup_latency_seconds",
            "Time from when a job could run to when this process claimed it.", rows,
            &QueueCountersSnapshot::pickup_latency);
  histogram(out, "conveyor_job_duration_seconds", "Time a handler ran, per attempt.", rows,
            &QueueCountersSnapshot::duration);

  if (folded) {
    family(out, "conveyor_metrics_other_queues", "gauge",
           "Queues past [server] metrics_max_queues whose series are summed into "
           "queue=\"_other\" (their limits are left out). No series: every queue has its own.");
    sample(out, "conveyor_metrics_other_queues", "", std::to_string(folded->other_queues));
  }
  if (!page.build_info.empty()) {
    family(out, "conveyor_build_info", "gauge",
           "Always 1; the labels say which conveyor and storage plugin this process runs.");
    std::string labels;
    for (const auto& [k, v] : page.build_info)
      labels += (labels.empty() ? "" : ",") + k + "=\"" + escape_label_value(v) + "\"";
    sample(out, "conveyor_build_info", labels, "1");
  }
  if (page.remote_workers) {
    family(out, "conveyor_remote_workers", "gauge",
           "Remote workers (WorkerService) that claimed in the last 60 s or hold jobs.");
    sample(out, "conveyor_remote_workers", "", std::to_string(*page.remote_workers));
  }
  if (page.remote_jobs_held) {
    family(out, "conveyor_remote_jobs_held", "gauge",
           "Jobs granted to remote workers and not yet completed, failed, released or expired; "
           "each holds one of its queue's max_workers permits.");
    sample(out, "conveyor_remote_jobs_held", "", std::to_string(*page.remote_jobs_held));
  }
  if (page.process) process_metrics(out, *page.process);
  return out;
}

}  // namespace conveyor
