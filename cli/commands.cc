#include "commands.hpp"

#include "table.hpp"

#include <conveyor/config.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/plugin_loader.hpp>
#include <conveyor/validation.hpp>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cmath>
#include <iostream>
#include <pthread.h>

namespace conveyor::cli {
namespace {

using nlohmann::json;

Config load(const GlobalOptions& g) { return load_config_file(resolve_config_path(g.config_path)); }

std::string iso8601(int64_t us) {
  std::time_t secs = static_cast<std::time_t>(us / 1'000'000);
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(secs));
}

// "50", "2.5", "0.333333"
std::string rate_text(double rate) { return fmt::format("{}", rate); }

json limit_json(const EffectiveLimit& l) {
  return json{{"rate", l.limit ? json(l.limit->rate_per_sec) : json(nullptr)},
              {"burst", l.limit ? json(l.limit->burst) : json(nullptr)},
              {"source", to_string(l.source)}};
}

void print(const json& j) { std::cout << j.dump(2) << "\n"; }

}  // namespace

int serve(const GlobalOptions& g) {
  Config config = load(g);
  // Block the stop signals in every thread; this thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Engine engine(config);
  register_builtin_handlers(engine);
  engine.start();
  std::string where;
  for (const auto& [k, v] : config.storage.options)
    if (k == "path") where = " at " + v;
  spdlog::info("conveyor serving: storage '{}'{}, config {}; Ctrl-C to stop", config.storage.plugin,
               where, config.source);
  if (!config.server.listen.empty())
    spdlog::warn("[server] listen = {} is set, but this build has no admin server yet",
                 config.server.listen);
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("received {}, stopping: no new claims, waiting up to {} ms for running jobs",
               sig == SIGINT ? "SIGINT" : "SIGTERM", config.engine.shutdown_timeout_ms);
  uint32_t released = engine.stop();
  if (released > 0) {
    // Handlers still running own pool threads we cannot join; their leases
    // were given back, so leave without waiting for them.
    spdlog::warn("{} jobs were still running and were released for another worker", released);
    spdlog::shutdown();
    std::_Exit(0);
  }
  return 0;
}

int enqueue(const GlobalOptions& g, const EnqueueArgs& a) {
  validate_queue_name(a.queue);
  validate_job_kind(a.kind);
  if (!json::accept(a.payload))
    throw ValidationError("payload", "--payload is not valid JSON: " + a.payload.substr(0, 80));
  if (a.count < 1 || a.count > 10'000'000)
    throw ValidationError("count", fmt::format("--count must be between 1 and 10000000, got {}", a.count));
  if (!(a.delay_s >= 0) || !std::isfinite(a.delay_s) || a.delay_s > 365.0 * 86400)
    throw ValidationError("delay", "--delay must be a number of seconds between 0 and 31536000");
  if (a.max_attempts && *a.max_attempts < 1)
    throw ValidationError("max_attempts", "--max-attempts must be >= 1");

  Engine engine(load(g));
  const int64_t now = SystemClock::instance().wall_now_us();
  const int64_t run_at = now + static_cast<int64_t>(std::llround(a.delay_s * 1e6));
  constexpr int64_t kBatch = 5000;
  int64_t first = 0, last = 0;
  for (int64_t done = 0; done < a.count;) {
    const int64_t n = std::min(kBatch, a.count - done);
    std::vector<NewJob> jobs(static_cast<size_t>(n));
    for (auto& j : jobs) {
      j.queue = a.queue;
      j.kind = a.kind;
      j.payload = a.payload;
      j.priority = a.priority;
      j.max_attempts = a.max_attempts.value_or(0);
      j.run_at_us = run_at;
    }
    auto ids = engine.enqueue_batch(std::move(jobs));
    if (done == 0) first = ids.front();
    last = ids.back();
    done += n;
  }
  if (g.json) {
    print(json{{"queue", a.queue}, {"kind", a.kind}, {"count", a.count}, {"first_id", first}, {"last_id", last}});
  } else if (a.count == 1) {
    std::cout << fmt::format("enqueued job {} on queue {}\n", first, a.queue);
  } else {
    std::cout << fmt::format("enqueued {} jobs on queue {} (ids {}..{})\n", a.count, a.queue, first, last);
  }
  return 0;
}

int ratelimit_set(const GlobalOptions& g, const std::string& queue, double rate,
                  std::optional<int64_t> burst) {
  validate_queue_name(queue);
  validate_rate(rate);
  if (burst) validate_burst(*burst, false);
  const RateLimit limit = make_rate_limit(rate, burst.value_or(0));
  Engine engine(load(g));
  engine.set_rate_limit(queue, limit);
  if (g.json) {
    print(json{{"queue", queue}, {"rate", limit.rate_per_sec}, {"burst", limit.burst}});
  } else {
    std::cout << fmt::format("queue {} limited to {}/s (burst {})\n", queue,
                             rate_text(limit.rate_per_sec), limit.burst);
  }
  return 0;
}

int ratelimit_ls(const GlobalOptions& g) {
  Engine engine(load(g));
  const LimitResolver& limits = engine.limits();
  const auto overrides = limits.overrides();
  const auto& def = limits.default_limit();
  if (g.json) {
    json list = json::array();
    for (const auto& o : overrides)
      list.push_back(json{{"queue", o.queue},
                          {"rate", o.limit.rate_per_sec},
                          {"burst", o.limit.burst},
                          {"updated_at", iso8601(o.updated_at_us)}});
    print(json{{"enabled", limits.enabled()},
               {"default", json{{"rate", def ? json(def->rate_per_sec) : json(nullptr)},
                                {"burst", def ? json(def->burst) : json(nullptr)}}},
               {"overrides", list}});
    return 0;
  }
  Table t({"QUEUE", "RATE", "BURST", "UPDATED"});
  for (const auto& o : overrides)
    t.add({o.queue, rate_text(o.limit.rate_per_sec), std::to_string(o.limit.burst), iso8601(o.updated_at_us)});
  if (overrides.empty()) std::cout << "no per-queue overrides\n";
  else std::cout << t.render();
  std::cout << fmt::format("default: {}\n", def ? fmt::format("{}/s (burst {})", rate_text(def->rate_per_sec), def->burst)
                                                : std::string("none (queues without a limit are unlimited)"));
  std::cout << fmt::format("rate limiting: {}\n", limits.enabled() ? "enabled" : "DISABLED (rate_limit_enabled = false: every limit is ignored)");
  return 0;
}

int ratelimit_rm(const GlobalOptions& g, const std::string& queue) {
  validate_queue_name(queue);
  Engine engine(load(g));
  if (!engine.delete_rate_limit(queue))
    throw NotFound(fmt::format("queue {} has no rate-limit override (see: conveyor ratelimit ls)", queue));
  if (g.json) print(json{{"queue", queue}, {"cleared", true}});
  else std::cout << fmt::format("queue {} rate limit cleared\n", queue);
  return 0;
}

int queues(const GlobalOptions& g) {
  Engine engine(load(g));
  const auto reports = engine.queues();
  if (g.json) {
    json list = json::array();
    for (const auto& r : reports)
      list.push_back(json{{"queue", r.stats.queue},
                          {"paused", r.stats.paused},
                          {"pending", r.stats.pending},
                          {"scheduled", r.stats.scheduled},
                          {"running", r.stats.running},
                          {"completed", r.stats.completed},
                          {"failed", r.stats.failed},
                          {"cancelled", r.stats.cancelled},
                          {"limit", limit_json(r.limit)}});
    print(list);
    return 0;
  }
  if (reports.empty()) {
    std::cout << "no queues yet (enqueue a job: conveyor enqueue QUEUE noop)\n";
    return 0;
  }
  Table t({"QUEUE", "PENDING", "SCHEDULED", "RUNNING", "COMPLETED", "FAILED", "LIMIT", "SOURCE"});
  for (const auto& r : reports) {
    const auto& s = r.stats;
    std::string limit = r.limit.limit ? fmt::format("{}/s burst {}", rate_text(r.limit.limit->rate_per_sec),
                                                    r.limit.limit->burst)
                                      : "unlimited";
    t.add({s.queue + (s.paused ? " (paused)" : ""), std::to_string(s.pending), std::to_string(s.scheduled),
           std::to_string(s.running), std::to_string(s.completed), std::to_string(s.failed), limit,
           to_string(r.limit.source)});
  }
  std::cout << t.render();
  return 0;
}

int plugin_info(const GlobalOptions& g, const std::string& plugin) {
  std::string dir;
  if (g.config_path || std::getenv("CONVEYOR_CONFIG")) dir = load(g).storage.plugin_dir;
  const auto path = resolve_plugin_path(plugin, dir);
  const auto loaded = load_plugin(path);
  const PluginInfo& i = loaded->info();
  if (g.json) {
    print(json{{"name", i.name},
               {"kind", kind_name(i.kind)},
               {"version", i.version},
               {"abi_version", fmt::format("{}.{}", i.abi_major, i.abi_minor)},
               {"host_abi_version", fmt::format("{}.{}", CONVEYOR_ABI_MAJOR, CONVEYOR_ABI_MINOR)},
               {"capabilities", capability_names(i.capabilities)},
               {"path", i.path.string()},
               {"entry_symbol", CONVEYOR_PLUGIN_ENTRY_SYMBOL},
               {"table_size", i.struct_size},
               {"optional_slots_missing", i.optional_slots_missing}});
    return 0;
  }
  std::cout << fmt::format(
      "name:          {}\nkind:          {}\nversion:       {}\nABI version:   {}.{} (host speaks {}.{})\n"
      "capabilities:  {}\npath:          {}\nentry symbol:  {} (found)\ntable size:    {} bytes\n",
      i.name, kind_name(i.kind), i.version, i.abi_major, i.abi_minor, CONVEYOR_ABI_MAJOR,
      CONVEYOR_ABI_MINOR, capability_names(i.capabilities), i.path.string(),
      CONVEYOR_PLUGIN_ENTRY_SYMBOL, i.struct_size);
  if (!i.optional_slots_missing.empty())
    std::cout << fmt::format("optional slots not provided: {}\n", fmt::join(i.optional_slots_missing, ", "));
  return 0;
}

}  // namespace conveyor::cli
