#include "commands.hpp"

#include "backend.hpp"
#include "output.hpp"

#include <conveyor/admin_server.hpp>
#include <conveyor/config.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/host/plugin_loader.hpp>
#include <conveyor/http_call.hpp>
#include <conveyor/http_jobs.hpp>
#include <conveyor/internal/log.hpp>
#include <conveyor/validation.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <pthread.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <span>

namespace conveyor::cli {
namespace {

using nlohmann::json;

// The config, with its [log] applied (CONVEYOR_LOG_LEVEL, if set, is in it).
Config load(const GlobalOptions& g, LogLevel default_level = LogLevel::kWarn) {
  Config config = load_config_file(resolve_config_path(g.config_path));
  setup_logging(config.log.level.value_or(default_level), config.log.format);
  return config;
}

void print(const json& j) { std::cout << j.dump(2) << "\n"; }

// How errors name --payload-file PATH.
std::string payload_file_name(const std::string& path) {
  return "--payload-file " +
         (path == "-" ? std::string("- (standard input)") : quote_for_message(path, 200));
}

// The payload of --payload-file PATH ("-": standard input), for payloads too
// large for the command line. Read up to a bound (a larger file is refused,
// not truncated); trailing whitespace (a file's final newline) is dropped,
// as `--payload "$(cat PATH)"` would, which leaves the JSON the same.
std::string read_payload_file(const std::string& path) {
  const auto fail = [&](const std::string& why) {
    return ValidationError("payload", payload_file_name(path) + ": " + why);
  };
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw fail("is a directory, not a file");
    file.open(path, std::ios::binary);
    if (!file) throw fail(std::string("cannot open it: ") + std::strerror(errno));
    in = &file;
  }
  // Room past the limit for trailing whitespace.
  constexpr size_t kMostRead = kMaxPayloadBytes + 65536;
  std::string payload;
  std::vector<char> buffer(65536);
  while (payload.size() <= kMostRead) {
    in->read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    payload.append(buffer.data(), static_cast<size_t>(in->gcount()));
    if (!*in) break;
  }
  if (in->bad()) throw fail(std::string("cannot read it: ") + std::strerror(errno));
  const bool whole = in->eof();
  while (!payload.empty() && std::string_view(" \t\r\n").find(payload.back()) != std::string::npos)
    payload.pop_back();
  if (!whole || payload.size() > kMaxPayloadBytes)
    throw fail(fmt::format("the payload is more than {} bytes, the limit", kMaxPayloadBytes));
  if (payload.empty()) throw fail("is empty (a payload is JSON, e.g. {})");
  return payload;
}

}  // namespace

int serve(const GlobalOptions& g) {
  if (g.server_url) throw UsageError("--server does not apply to serve (serve runs the server)");
  Config config = load(g, LogLevel::kInfo);
  const bool with_server = !config.server.listen.empty();
  // Refuse an unsafe [server] before anything starts.
  if (with_server) check_server_security(config.server);
  // Block the stop signals in every thread; this thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  // A closed terminal (or a supervisor's reload) must not kill the process
  // with leases held: SIGHUP is waited for too, and reloads the config file.
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const std::unique_ptr<Engine> engine_ptr = open_engine(config);
  Engine& engine = *engine_ptr;
  if (const std::optional<std::string> name = process_local_storage(engine))
    spdlog::warn(
        "storage plugin '{}' is neither durable nor multi-process: the jobs live in this "
        "process only and are lost when it stops, and other conveyor commands see them only "
        "through this server's API (conveyor --server URL ...){}",
        *name, with_server ? "" : "; set [server] listen to serve that API");
  register_builtin_handlers(engine);
  // Destroyed before the engine, after engine.stop() below has waited for
  // the deliveries in flight.
  const HttpJobs http_jobs(engine);
  std::unique_ptr<AdminServer> server;
  if (with_server) {
    server = std::make_unique<AdminServer>(engine, config.server);
#ifdef CONVEYOR_WITH_DASHBOARD
    server->set_static_files(dashboard_file);
#endif
    server->start();  // binds first: a taken port fails before any job runs
  }
  engine.start();
  std::string where;
  for (const auto& [k, v] : config.storage.options)
    if (k == "path") where = " at " + v;
  spdlog::info("conveyor serving: storage '{}'{}, config {}; Ctrl-C to stop", config.storage.plugin,
               where, config.source);
  // Wait for a stop signal, or for storage to turn out broken for good.
  const timespec poll{0, 250'000'000};
  int sig = -1;
  std::optional<std::string> broken;
  while (sig < 0 && !(broken = engine.storage_failure())) {
    sig = sigtimedwait(&signals, nullptr, &poll);
    if (sig == SIGHUP) {
      reload_config(g, config, server.get());
      sig = -1;
    }
  }
  if (broken)
    spdlog::critical("stopping: storage cannot be used: {}", *broken);
  else
    spdlog::info("received {}, stopping: no new claims, waiting up to {} ms for running jobs",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", config.engine.shutdown_timeout_ms);
  // No API calls into an engine that is stopping.
  if (server) server->stop();
  // Handlers that outlive the shutdown timeout are abandoned with their
  // leases released; the process exits normally while they run.
  engine.stop();
  if (broken) throw std::runtime_error("storage cannot be used: " + *broken);
  return 0;
}

int enqueue(const GlobalOptions& g, const EnqueueArgs& args) {
  EnqueueArgs a = args;
  if (a.payload_file) {
    if (a.payload_given)
      throw UsageError(
          "give the payload with --payload JSON or with --payload-file PATH, not both (see "
          "conveyor enqueue --help)");
    a.job.payload = read_payload_file(*a.payload_file);
  }
  try {
    validate_job_request(a.job);
  } catch (const ValidationError& e) {
    // The same checks as --payload; say where the payload came from.
    if (!a.payload_file || e.field() != "payload") throw;
    throw ValidationError("payload", payload_file_name(*a.payload_file) + ": " + e.what());
  }
  // Through a server, the server checks it against its own config.
  if (!g.server_url) validate_http_job(load(g), a.job.queue, a.job.kind, a.job.payload);
  // The built-in sleep's payload, as the server checks it (a bad one would
  // only fail when the job runs).
  if (a.job.kind == "sleep") {
    try {
      parse_sleep_payload(a.job.payload);
    } catch (const ValidationError& e) {
      if (!a.payload_file) throw;
      throw ValidationError("payload", payload_file_name(*a.payload_file) + ": " + e.what());
    }
  }
  // Every --count is one transaction (all or none), held in memory at once:
  // these bound its size.
  if (a.count < 1 || a.count > kMaxEnqueueCount)
    throw ValidationError("count", fmt::format("--count must be between 1 and {}, got {}",
                                               kMaxEnqueueCount, a.count));
  const uint64_t payload_bytes = static_cast<uint64_t>(a.count) * a.job.payload.size();
  if (payload_bytes > kMaxEnqueuePayloadBytes)
    throw ValidationError(
        "count",
        fmt::format("--count {} with a {}-byte payload is {} payload bytes in one "
                    "transaction; the most is {} (256 MiB): use a smaller --count",
                    a.count, a.job.payload.size(), payload_bytes, kMaxEnqueuePayloadBytes));
  auto backend = open_backend(g);
  const std::vector<int64_t> ids = backend->enqueue(a.job, a.count);
  print_enqueued(g, a.job.queue, a.job.kind, ids);
  return 0;
}

namespace {

// --key K / --per-key as the API's target; validates the key.
api::LimitTarget limit_target(const KeyTargetArgs& t) {
  if (t.key && t.per_key)
    throw UsageError(
        "give --key K (that key's own limit) or --per-key (the limit of every key of the queue), "
        "not both");
  if (t.key) validate_job_key(*t.key);
  return api::LimitTarget{t.key.has_value() || t.per_key, t.key};
}

}  // namespace

int ratelimit_set(const GlobalOptions& g, const std::string& queue, double rate,
                  std::optional<int64_t> burst, const std::string& scope_text,
                  const KeyTargetArgs& target_args) {
  validate_queue_name(queue);
  const api::LimitTarget target = limit_target(target_args);
  validate_rate(rate);
  if (burst) validate_burst(*burst, false);
  LimitScope scope = LimitScope::kProcess;
  try {
    scope = parse_limit_scope(scope_text);
  } catch (const ValidationError&) {
    throw ValidationError("scope",
                          "--scope must be process (each process has its own bucket, the default) "
                          "or fleet (one bucket per queue shared by every process on the same "
                          "storage), got " +
                              quote_for_message(scope_text));
  }
  const RateLimit limit = make_rate_limit(rate, burst.value_or(0), scope);
  if (target.keys)
    open_backend(g)->set_key_rate_limit(queue, target.key, limit);
  else
    open_backend(g)->set_rate_limit(queue, limit);
  print_rate_limit_set(g, queue, limit, target);
  return 0;
}

int ratelimit_switch(const GlobalOptions& g, bool enabled) {
  print_rate_limiting_switched(g, open_backend(g)->set_rate_limiting_enabled(enabled));
  return 0;
}

int ratelimit_ls(const GlobalOptions& g) {
  print_rate_limits(g, open_backend(g, /*read_only=*/true)->rate_limits());
  return 0;
}

int ratelimit_rm(const GlobalOptions& g, const std::string& queue,
                 const KeyTargetArgs& target_args) {
  validate_queue_name(queue);
  const api::LimitTarget target = limit_target(target_args);
  auto backend = open_backend(g);
  const bool deleted = target.keys ? backend->delete_key_rate_limit(queue, target.key)
                                   : backend->delete_rate_limit(queue);
  if (!deleted)
    throw NotFound(api::no_limit_message(queue, target) + " (see: conveyor ratelimit ls)");
  print_rate_limit_cleared(g, queue, target);
  return 0;
}

// Backpressure holds live in the serving process, not in storage.
constexpr const char* kHoldsLiveInTheServer =
    "note: read from storage; a serving process may hold a queue for backpressure (the "
    "downstream asked it to wait): add --server URL to see its holds";

int queues(const GlobalOptions& g) {
  print_queues(g, open_backend(g, /*read_only=*/true)->queues());
  if (!g.server_url && !g.json) std::cerr << kHoldsLiveInTheServer << "\n";
  return 0;
}

int queues_pause(const GlobalOptions& g, const std::string& queue, bool paused) {
  validate_queue_name(queue);
  open_backend(g)->set_queue_paused(queue, paused);
  print_queue_paused(g, queue, paused);
  // Through the API, resume also ends the server's backpressure hold.
  if (!paused && !g.server_url && !g.json)
    std::cerr << "note: a serving process's backpressure hold of the queue, if any, stays until "
                 "it ends; `conveyor queues resume "
              << queue << " --server URL` ends it at once\n";
  return 0;
}

int keys(const GlobalOptions& g, const std::string& queue, int64_t limit) {
  validate_queue_name(queue);
  if (limit < 1 || limit > static_cast<int64_t>(kKeysMax))
    throw UsageError(fmt::format("--limit must be from 1 to {} keys, got {}", kKeysMax, limit));
  const KeysReport report =
      open_backend(g, /*read_only=*/true)->keys(queue, static_cast<uint32_t>(limit));
  print_keys(g, report);
  if (!report.live && !g.json)
    std::cerr << "note: read from storage; running and throttled live in the serving process: "
                 "add --server URL to see them\n";
  return 0;
}

int keys_weight(const GlobalOptions& g, const std::string& queue, const std::string& key,
                std::optional<int64_t> weight, bool reset) {
  validate_queue_name(queue);
  validate_job_key(key);
  if (reset && weight)
    throw UsageError("give the key's weight W or --reset (back to the default, 1), not both");
  if (!reset && !weight)
    throw UsageError(fmt::format(
        "give the key's weight, 1..{} (conveyor keys weight QUEUE KEY W), or --reset to return "
        "it to the default, 1",
        kKeyWeightMax));
  if (weight && (*weight < 1 || *weight > static_cast<int64_t>(kKeyWeightMax)))
    throw ValidationError("weight",
                          fmt::format("weight must be 1..{}, got {}", kKeyWeightMax, *weight));
  auto backend = open_backend(g);
  if (reset) {
    if (!backend->delete_key_weight(queue, key))
      throw NotFound(api::no_key_weight_message(queue, key) + " (see: conveyor ratelimit ls)");
    print_key_weight(g, queue, key, std::nullopt);
    return 0;
  }
  const auto w = static_cast<uint32_t>(*weight);
  backend->set_key_weight(queue, key, w);
  print_key_weight(g, queue, key, w);
  return 0;
}

namespace {

// A job id or cursor as typed: digits only, in range.
int64_t parse_number(const std::string& text, const std::string& what, int64_t min) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < min)
    throw UsageError(
        fmt::format("{} must be a whole number >= {}, got {}", what, min, quote_for_message(text)));
  return value;
}

std::vector<int64_t> parse_ids(const std::vector<std::string>& texts) {
  if (texts.empty()) throw UsageError("give at least one job id (see conveyor jobs --help)");
  std::vector<int64_t> ids;
  for (const std::string& t : texts) ids.push_back(parse_number(t, "a job id", 1));
  return ids;
}

uint32_t checked_page(int64_t limit, const char* option) {
  if (limit < 1 || limit > static_cast<int64_t>(kListJobsMax))
    throw UsageError(fmt::format(
        "{} must be from 1 to {} (the most per call), got {}{}", option, kListJobsMax, limit,
        std::string_view(option) == "--limit" ? ": page with --after (the next cursor is printed)"
                                              : ""));
  return static_cast<uint32_t>(limit);
}

// Runs op on ids in batches the API takes (Engine::kJobBatchMax).
template <typename Op>
std::vector<JobOutcome> in_batches(const std::vector<int64_t>& ids, Op op) {
  std::vector<JobOutcome> out;
  for (size_t at = 0; at < ids.size(); at += Engine::kJobBatchMax) {
    const size_t n = std::min(Engine::kJobBatchMax, ids.size() - at);
    for (JobOutcome& o : op(std::span<const int64_t>(ids).subspan(at, n))) out.push_back(o);
  }
  return out;
}

int exit_code_of(const std::vector<JobOutcome>& outcomes) {
  for (const JobOutcome& o : outcomes)
    if (o.status != JobOutcome::Status::kOk) return 1;
  return 0;
}

// --state, repeated or comma-separated, as states without repeats; a name
// that is no state is exit 2 naming --state.
std::vector<JobState> parse_states(const std::vector<std::string>& lists) {
  std::vector<JobState> states;
  for (const std::string& list : lists) {
    size_t start = 0;
    while (start <= list.size()) {
      const size_t comma = std::min(list.find(',', start), list.size());
      JobState s;
      try {
        s = api::parse_job_state(list.substr(start, comma - start), "--state");
      } catch (const ValidationError& e) {
        throw UsageError(e.what());
      }
      if (std::find(states.begin(), states.end(), s) == states.end()) states.push_back(s);
      start = comma + 1;
    }
  }
  return states;
}

}  // namespace

int jobs_ls(const GlobalOptions& g, const JobsLsArgs& a) {
  JobQuery query;
  if (!a.queue.empty()) validate_queue_name(a.queue);
  query.states = parse_states(a.states);
  if (!a.kind.empty()) validate_job_kind(a.kind);
  query.kind = a.kind;
  query.limit = checked_page(a.limit, "--limit");
  query.after_id = parse_number(a.after, "--after", 0);
  auto backend = open_backend(g, /*read_only=*/true);
  JobPage page;
  if (!a.queue.empty()) {
    query.queue = a.queue;
    page = backend->list_jobs(query);
  } else {
    // Every queue: a page of each, merged in id order (ids are unique across
    // queues), so --after pages through the union as through one queue.
    bool more = false;
    for (const QueueReport& r : backend->queues()) {
      query.queue = r.stats.queue;
      JobPage one = backend->list_jobs(query);
      more = more || one.next_after_id != 0;
      for (Job& j : one.jobs) page.jobs.push_back(std::move(j));
    }
    std::sort(page.jobs.begin(), page.jobs.end(),
              [](const Job& x, const Job& y) { return x.id < y.id; });
    if (page.jobs.size() > query.limit) {
      page.jobs.resize(query.limit);
      more = true;
    }
    if (more && !page.jobs.empty()) page.next_after_id = page.jobs.back().id;
  }
  print_jobs(g, page);
  return 0;
}

int jobs_show(const GlobalOptions& g, const std::string& id_text) {
  const int64_t id = parse_number(id_text, "a job id", 1);
  const std::optional<Job> job = open_backend(g, /*read_only=*/true)->get_job(id);
  if (!job) throw NotFound(fmt::format("job {} not found", id));
  print_job(g, *job);
  return 0;
}

int jobs_retry(const GlobalOptions& g, const JobsRetryArgs& a) {
  if (!a.ids.empty()) {
    if (!a.queue.empty()) throw UsageError("give job ids or --queue (with --state), not both");
    const std::vector<int64_t> ids = parse_ids(a.ids);
    auto backend = open_backend(g);
    const auto outcomes =
        in_batches(ids, [&](std::span<const int64_t> b) { return backend->retry_jobs(b); });
    print_outcomes(g, "retry", outcomes);
    return exit_code_of(outcomes);
  }
  if (a.queue.empty())
    throw UsageError(
        "give job ids (conveyor jobs retry ID...) or a queue (conveyor jobs retry --queue Q "
        "--state failed)");
  validate_queue_name(a.queue);
  if (a.state != "failed" && a.state != "cancelled")
    throw UsageError("--state must be failed or cancelled (the states a retry takes), got " +
                     quote_for_message(a.state));
  const JobState state = a.state == "failed" ? JobState::kFailed : JobState::kCancelled;
  const uint32_t batch = checked_page(a.batch, "--batch");
  int64_t after = parse_number(a.after, "--after", 0);
  auto backend = open_backend(g);
  int64_t total = 0, batches = 0;
  // Bounded batches, each one call; the cursor printed with each lets an
  // interrupted run resume with --after.
  while (true) {
    const RetryBatch r = backend->retry_jobs_bulk(a.queue, state, after, batch);
    total += r.retried;
    ++batches;
    if (r.next_after_id == 0) break;
    after = r.next_after_id;
    if (!g.json)
      std::cerr << fmt::format("retried {} {} jobs of queue {} so far (resume with --after {})\n",
                               total, a.state, a.queue, after);
  }
  print_bulk_retried(g, a.queue, a.state, total, batches);
  return 0;
}

int jobs_cancel(const GlobalOptions& g, const std::vector<std::string>& id_texts) {
  const std::vector<int64_t> ids = parse_ids(id_texts);
  auto backend = open_backend(g);
  std::vector<CancelOutcome> outcomes;
  for (int64_t id : ids) {
    Backend::Cancelled c = backend->cancel_job(id);
    outcomes.push_back(CancelOutcome{id, c.status, std::move(c.job)});
  }
  print_cancelled(g, outcomes);
  for (const auto& o : outcomes)
    if (o.status != CONVEYOR_OK) return 1;
  return 0;
}

int jobs_rm(const GlobalOptions& g, const std::vector<std::string>& id_texts) {
  const std::vector<int64_t> ids = parse_ids(id_texts);
  auto backend = open_backend(g);
  const auto outcomes =
      in_batches(ids, [&](std::span<const int64_t> b) { return backend->delete_jobs(b); });
  print_outcomes(g, "rm", outcomes);
  return exit_code_of(outcomes);
}

namespace {

// --state of a bulk cancel or rm, repeated or comma-separated: each a state
// op takes (cancel: not final; rm: final), else exit 2 naming --state.
std::vector<JobState> bulk_states(const std::vector<std::string>& lists, bool cancel) {
  const std::vector<JobState> states = parse_states(lists);
  for (const JobState s : states) {
    const std::string name = to_string(s);
    const bool final_state =
        s == JobState::kCompleted || s == JobState::kFailed || s == JobState::kCancelled;
    if (cancel && final_state)
      throw UsageError(
          "--state of jobs cancel must be pending (= available), scheduled or running (jobs "
          "that are not final), got " +
          quote_for_message(name) + "; delete final jobs with conveyor jobs rm --queue Q --state " +
          name);
    if (!cancel && !final_state)
      throw UsageError(
          "--state of jobs rm must be completed, failed or cancelled (only final "
          "jobs are deleted), got " +
          quote_for_message(name) + "; cancel it first: conveyor jobs cancel " +
          "--queue Q --state " + name);
  }
  return states;
}

// The bulk form of jobs cancel / rm: batches until the cursor ends.
int jobs_bulk(const GlobalOptions& g, const JobsBulkArgs& a, bool cancel) {
  const char* op = cancel ? "cancel" : "rm";
  if (a.queue.empty())
    throw UsageError(fmt::format(
        "give job ids (conveyor jobs {0} ID...) or a queue (conveyor jobs {0} --queue Q {1}): "
        "a bulk {0} acts on one queue, never on every queue",
        op, cancel ? "[--state S]" : "--state S"));
  validate_queue_name(a.queue);
  std::vector<JobState> states = bulk_states(a.states, cancel);
  if (!cancel && states.empty())
    throw UsageError(
        "give --state: the final states to delete (completed, failed, cancelled; repeat or "
        "separate with commas), e.g. conveyor jobs rm --queue " +
        a.queue + " --state completed,failed");
  if (cancel && states.empty())
    states = {JobState::kAvailable, JobState::kScheduled, JobState::kRunning};
  JobQuery filter;
  filter.queue = a.queue;
  filter.states = states;
  filter.limit = checked_page(a.batch, "--batch");
  filter.after_id = parse_number(a.after, "--after", 0);
  auto backend = open_backend(g);
  int64_t done = 0, refused = 0, batches = 0;
  while (true) {
    const Engine::JobBatchResult r =
        cancel ? backend->cancel_jobs_bulk(filter) : backend->delete_jobs_bulk(filter);
    done += r.done;
    refused += r.refused;
    ++batches;
    if (r.next_after_id == 0) break;
    filter.after_id = r.next_after_id;
    if (!g.json)
      std::cerr << fmt::format("{} {} jobs of queue {} so far (resume with --after {})\n",
                               cancel ? "cancelled" : "deleted", done, a.queue, filter.after_id);
  }
  print_bulk_done(g, cancel ? "cancel" : "rm", a.queue, states, done, refused, batches);
  return 0;
}

}  // namespace

int jobs_cancel_bulk(const GlobalOptions& g, const JobsBulkArgs& a) {
  if (!a.ids.empty()) {
    if (!a.queue.empty() || !a.states.empty())
      throw UsageError("give job ids or --queue (with --state), not both");
    return jobs_cancel(g, a.ids);
  }
  return jobs_bulk(g, a, true);
}

int jobs_rm_bulk(const GlobalOptions& g, const JobsBulkArgs& a) {
  if (!a.ids.empty()) {
    if (!a.queue.empty() || !a.states.empty())
      throw UsageError("give job ids or --queue (with --state), not both");
    return jobs_rm(g, a.ids);
  }
  return jobs_bulk(g, a, false);
}

int queues_rm(const GlobalOptions& g, const std::string& queue, bool force) {
  validate_queue_name(queue);
  auto backend = open_backend(g);
  Engine::QueueRemoval total;
  int64_t after = 0, batches = 0;
  while (true) {
    const Engine::QueueRemoval r = backend->remove_queue(queue, force, after, kListJobsMax);
    if (batches == 0) total.was_paused = r.was_paused;
    ++batches;
    total.deleted += r.deleted;
    total.cancelled += r.cancelled;
    total.running_cancelled += r.running_cancelled;
    total.kept += r.kept;
    total.override_removed = r.override_removed;
    total.key_settings_removed = r.key_settings_removed;
    total.configured = r.configured;
    if (r.next_after_id == 0) break;
    after = r.next_after_id;
    if (!g.json)
      std::cerr << fmt::format(
          "removing queue {}: {} jobs deleted so far (the queue is paused until the end; if "
          "interrupted, run the command again)\n",
          queue, total.deleted);
  }
  print_queue_removed(g, queue, total, batches);
  return 0;
}

int plugin_info(const GlobalOptions& g, const std::string& plugin) {
  if (g.server_url)
    throw UsageError("--server does not apply to plugin info (it inspects a plugin file here)");
  std::string dir;
  if (g.config_path || std::getenv("CONVEYOR_CONFIG")) dir = load(g).storage.plugin_dir;
  const auto path = resolve_plugin_path(plugin, dir);
  // Everything the loader learned, also when it refuses the library: what an
  // author needs to see why (then the refusal itself, on stderr, exit 1).
  const PluginDiagnosis d = diagnose_plugin(path);
  const std::string host_abi = fmt::format("{}.{}", CONVEYOR_ABI_MAJOR, CONVEYOR_ABI_MINOR);
  const std::string entry_status = d.entry_found      ? "found"
                                   : d.library_loaded ? "NOT FOUND"
                                   : d.file_found     ? "not checked: the library did not load"
                                                      : "not checked: no such file";
  if (g.json) {
    json j{{"path", d.path.string()},
           {"loads", d.error.empty()},
           {"entry_symbol", CONVEYOR_PLUGIN_ENTRY_SYMBOL},
           {"entry_symbol_found", d.entry_found},
           {"host_abi_version", host_abi},
           {"required_slots_missing", d.required_slots_missing},
           {"optional_slots_missing", d.optional_slots_missing}};
    if (d.table_returned) {
      j["abi_version"] = fmt::format("{}.{}", d.abi_major, d.abi_minor);
      j["table_size"] = d.struct_size;
    }
    if (d.table_read) {
      j["name"] = d.name;
      j["kind"] = kind_name(d.kind);
      j["version"] = d.version;
      j["capabilities"] = capability_names(d.capabilities);
      // A newer minor's kind or capability bits: loaded, shown, not used.
      j["kind_known"] = d.kind_known;
      if (d.unknown_capabilities != 0)
        j["unknown_capabilities"] = capability_names(d.unknown_capabilities);
      j["notifications"] = d.has_notify;
    }
    if (!d.error.empty()) j["error"] = d.error;
    print(j);
  } else {
    const std::string newer =
        fmt::format("not defined by ABI {}, perhaps a newer minor's", host_abi);
    if (d.table_read)
      std::cout << fmt::format(
          "name:          {}\nkind:          {}{}\nversion:       {}\n", d.name, kind_name(d.kind),
          d.kind_known ? "" : fmt::format(" ({}; loaded anyway)", newer), d.version);
    if (d.table_returned)
      std::cout << fmt::format("ABI version:   {}.{} (host speaks {})\n", d.abi_major, d.abi_minor,
                               host_abi);
    if (d.table_read)
      std::cout << fmt::format(
          "capabilities:  {}{}\n", capability_names(d.capabilities),
          d.unknown_capabilities == 0
              ? ""
              : fmt::format(" ({} {}; ignored)", capability_names(d.unknown_capabilities), newer));
    std::cout << fmt::format("path:          {}\nentry symbol:  {} ({})\n", d.path.string(),
                             CONVEYOR_PLUGIN_ENTRY_SYMBOL, entry_status);
    if (d.table_returned)
      std::cout << fmt::format(
          "table size:    {} bytes{}\n", d.struct_size,
          d.struct_size < CONVEYOR_PLUGIN_V1_0_SIZE
              ? fmt::format(" (ABI 1.0 needs at least {})", CONVEYOR_PLUGIN_V1_0_SIZE)
              : "");
    if (!d.required_slots_missing.empty())
      std::cout << fmt::format("required slots missing: {}\n",
                               fmt::join(d.required_slots_missing, ", "));
    if (!d.optional_slots_missing.empty())
      std::cout << fmt::format("optional slots not provided: {}\n",
                               fmt::join(d.optional_slots_missing, ", "));
  }
  if (!d.error.empty()) throw PluginLoadError(d.error);
  return 0;
}

}  // namespace conveyor::cli
