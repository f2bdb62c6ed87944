// Storage and API backends for the commands (backend.hpp).
#include "backend.hpp"

#include <conveyor/admin_client.hpp>
#include <conveyor/api_error.hpp>
#include <conveyor/config.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/host/plugin_loader.hpp>
#include <conveyor/internal/engine_internals.hpp>
#include <conveyor/internal/storage.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

namespace conveyor::cli {
namespace {

// Storage opened in this process through an Engine (not started: no dispatch).
class StorageBackend final : public Backend {
 public:
  explicit StorageBackend(const Config& config) : engine_ptr_(open_engine(config)) {}

  std::vector<int64_t> enqueue(const JobRequest& job, int64_t count) override {
    warn_if_jobs_die_with_this_process(count);
    // One storage call: the plugin enqueues a batch atomically (all or none).
    const NewJob one = to_new_job(job, SystemClock::instance().wall_now_us());
    return engine_.enqueue_batch(std::vector<NewJob>(static_cast<size_t>(count), one));
  }
  void set_rate_limit(const std::string& queue, const RateLimit& limit) override {
    engine_.set_rate_limit(queue, limit);
    warn_if_change_dies_with_this_process();
  }
  bool delete_rate_limit(const std::string& queue) override {
    const bool deleted = engine_.delete_rate_limit(queue);
    warn_if_change_dies_with_this_process();
    return deleted;
  }
  void set_key_rate_limit(const std::string& queue, const std::optional<std::string>& key,
                          const RateLimit& limit) override {
    engine_.set_key_rate_limit(queue, key, limit);
    warn_if_change_dies_with_this_process();
  }
  bool delete_key_rate_limit(const std::string& queue,
                             const std::optional<std::string>& key) override {
    const bool deleted = engine_.delete_key_rate_limit(queue, key);
    warn_if_change_dies_with_this_process();
    return deleted;
  }
  void set_key_weight(const std::string& queue, const std::string& key, uint32_t weight) override {
    engine_.set_key_weight(queue, key, weight);
    warn_if_change_dies_with_this_process();
  }
  bool delete_key_weight(const std::string& queue, const std::string& key) override {
    const bool deleted = engine_.delete_key_weight(queue, key);
    warn_if_change_dies_with_this_process();
    return deleted;
  }
  api::RateLimitListing rate_limits() override {
    warn_if_this_process_sees_its_own_storage();
    return api::rate_limit_listing(engine_);
  }
  RateLimitingState set_rate_limiting_enabled(bool enabled) override {
    engine_.set_rate_limiting_enabled(enabled);
    warn_if_change_dies_with_this_process();
    return engine_.rate_limiting();
  }
  std::vector<QueueReport> queues() override {
    std::vector<QueueReport> reports = engine_.queues();
    warn_if_this_process_sees_its_own_storage();
    return reports;
  }
  void set_queue_paused(const std::string& queue, bool paused) override {
    engine_.set_queue_paused(queue, paused);
    warn_if_change_dies_with_this_process();
  }
  KeysReport keys(const std::string& queue, uint32_t limit) override {
    // The engine is not started: running and throttled are unknown here.
    KeysReport report = engine_.keys(queue, limit);
    warn_if_this_process_sees_its_own_storage();
    return report;
  }
  JobPage list_jobs(const JobQuery& query) override {
    warn_if_this_process_sees_its_own_storage();
    JobPage page;
    page.jobs = engine_.list_jobs(query);
    // As the API answers: a full page may have a successor.
    if (page.jobs.size() == query.limit) page.next_after_id = page.jobs.back().id;
    return page;
  }
  std::optional<Job> get_job(int64_t id) override {
    warn_if_this_process_sees_its_own_storage();
    return engine_.get_job(id);
  }
  std::vector<JobOutcome> retry_jobs(std::span<const int64_t> ids) override {
    warn_if_this_process_sees_its_own_storage();
    return engine_.retry_jobs(ids);
  }
  RetryBatch retry_jobs_bulk(const std::string& queue, JobState state, int64_t after_id,
                             uint32_t limit) override {
    // The steps of the API's bulk RetryJobs: one page, retried, its cursor.
    const JobPage page = list_jobs(
        JobQuery{.queue = queue, .states = {state}, .after_id = after_id, .limit = limit});
    RetryBatch batch;
    if (page.jobs.empty()) return batch;
    std::vector<int64_t> ids;
    for (const Job& j : page.jobs) ids.push_back(j.id);
    for (const JobOutcome& o : engine_.retry_jobs(ids))
      batch.retried += o.status == JobOutcome::Status::kOk;
    batch.next_after_id = page.next_after_id;
    return batch;
  }
  Cancelled cancel_job(int64_t id) override {
    warn_if_this_process_sees_its_own_storage();
    const bool cancelled = engine_.cancel_job(id);
    std::optional<Job> job = engine_.get_job(id);
    if (!job) return {CONVEYOR_E_NOT_FOUND, std::nullopt};
    return {cancelled ? CONVEYOR_OK : CONVEYOR_E_WRONG_STATE, std::move(job)};
  }
  std::vector<JobOutcome> delete_jobs(std::span<const int64_t> ids) override {
    warn_if_this_process_sees_its_own_storage();
    return engine_.delete_jobs(ids);
  }
  Engine::JobBatchResult cancel_jobs_bulk(const JobQuery& filter) override {
    warn_if_this_process_sees_its_own_storage();
    return engine_.cancel_jobs_batch(filter);
  }
  Engine::JobBatchResult delete_jobs_bulk(const JobQuery& filter) override {
    warn_if_this_process_sees_its_own_storage();
    return engine_.delete_jobs_batch(filter);
  }
  Engine::QueueRemoval remove_queue(const std::string& queue, bool force, int64_t after_id,
                                    uint32_t limit) override {
    warn_if_this_process_sees_its_own_storage();
    Engine::QueueRemoval r = engine_.remove_queue(queue, force, after_id, limit);
    // The same words as the API's not_found and failed_precondition.
    if (r.not_found) throw NotFound(api::unknown_queue_message(queue));
    if (r.running_refused > 0)
      throw std::runtime_error(api::queue_running_message(queue, r.running_refused));
    return r;
  }

 private:
  // Storage that is neither durable nor shared with other processes lives in
  // this process only: what the command enqueues is gone when it exits.
  void warn_if_jobs_die_with_this_process(int64_t count) {
    const std::optional<std::string> name = process_local_storage(engine_);
    if (!name) return;
    std::cerr << fmt::format(
        "conveyor: warning: storage plugin '{}' is neither durable nor multi-process, so the {} "
        "when this command exits; enqueue through the server that runs them (conveyor --server "
        "URL enqueue ...) or use a durable plugin\n",
        *name,
        count == 1 ? "job enqueued here vanishes"
                   : fmt::format("{} jobs enqueued here vanish", count));
  }
  // The same storage for the other commands: a change made here is made to
  // this command's own storage, and a read sees that storage, empty, not a
  // server's. Said once, after the call succeeded (a refusal says enough).
  void warn_if_change_dies_with_this_process() {
    warn_once(
        "the change made here is made to this command's own storage and vanishes when "
        "it exits");
  }
  void warn_if_this_process_sees_its_own_storage() {
    warn_once("this command sees storage of its own, empty, not the jobs of a running server");
  }
  void warn_once(std::string_view consequence) {
    if (warned_) return;
    const std::optional<std::string> name = process_local_storage(engine_);
    if (!name) return;
    warned_ = true;
    std::cerr << fmt::format(
        "conveyor: warning: storage plugin '{}' is neither durable nor multi-process, so {}; "
        "run the command against the server (conveyor --server URL ...) or use a durable "
        "plugin\n",
        *name, consequence);
  }

  bool warned_ = false;

  std::unique_ptr<Engine> engine_ptr_;
  Engine& engine_ = *engine_ptr_;
};

// A running server's API.
class ApiBackend final : public Backend {
 public:
  ApiBackend(std::string url, std::string token) : client_(std::move(url), std::move(token)) {}

  std::vector<int64_t> enqueue(const JobRequest& job, int64_t count) override {
    // One EnqueueBatch call, which the server commits in one transaction; a
    // body over its max_body_bytes is refused whole (429, or the connection
    // closed while the body is sent), nothing enqueued. Not split into
    // smaller calls: --count is all or none, and the server does not say
    // its limit.
    try {
      return client_.enqueue_batch(std::vector<JobRequest>(static_cast<size_t>(count), job));
    } catch (const ApiError& e) {
      if (e.code() != ApiCode::kResourceExhausted ||
          std::string_view(e.what()).find("max_body_bytes") == std::string_view::npos)
        throw;
      if (count == 1)
        throw ApiError(e.code(),
                       fmt::format("{}: nothing was enqueued; use a smaller payload or raise the "
                                   "server's [server] max_body_bytes",
                                   e.what()));
      throw ApiError(e.code(),
                     fmt::format("{}: nothing was enqueued (--count {} is one request, so that "
                                 "the jobs are enqueued all or none); enqueue them in several "
                                 "runs with a smaller --count, or raise the server's [server] "
                                 "max_body_bytes",
                                 e.what(), count));
    }
  }
  void set_rate_limit(const std::string& queue, const RateLimit& limit) override {
    client_.set_rate_limit(queue, limit);
  }
  bool delete_rate_limit(const std::string& queue) override {
    return client_.delete_rate_limit(queue);
  }
  void set_key_rate_limit(const std::string& queue, const std::optional<std::string>& key,
                          const RateLimit& limit) override {
    client_.set_key_rate_limit(queue, key, limit);
  }
  bool delete_key_rate_limit(const std::string& queue,
                             const std::optional<std::string>& key) override {
    return client_.delete_key_rate_limit(queue, key);
  }
  void set_key_weight(const std::string& queue, const std::string& key, uint32_t weight) override {
    client_.set_key_weight(queue, key, weight);
  }
  bool delete_key_weight(const std::string& queue, const std::string& key) override {
    return client_.delete_key_weight(queue, key);
  }
  api::RateLimitListing rate_limits() override { return client_.list_rate_limits(); }
  RateLimitingState set_rate_limiting_enabled(bool enabled) override {
    return client_.set_rate_limiting_enabled(enabled);
  }
  std::vector<QueueReport> queues() override { return client_.list_queues(); }
  void set_queue_paused(const std::string& queue, bool paused) override {
    client_.set_queue_paused(queue, paused);
  }
  KeysReport keys(const std::string& queue, uint32_t limit) override {
    return client_.list_keys(queue, limit);
  }
  JobPage list_jobs(const JobQuery& query) override { return client_.list_jobs(query); }
  std::optional<Job> get_job(int64_t id) override { return client_.get_job(id); }
  std::vector<JobOutcome> retry_jobs(std::span<const int64_t> ids) override {
    return client_.retry_jobs(ids);
  }
  RetryBatch retry_jobs_bulk(const std::string& queue, JobState state, int64_t after_id,
                             uint32_t limit) override {
    return client_.retry_jobs_bulk(queue, state, after_id, limit);
  }
  Cancelled cancel_job(int64_t id) override {
    try {
      return {CONVEYOR_OK, client_.cancel_job(id)};
    } catch (const ApiError& e) {
      if (e.code() == ApiCode::kNotFound) return {CONVEYOR_E_NOT_FOUND, std::nullopt};
      // Final: show what it is, as locally.
      if (e.code() == ApiCode::kFailedPrecondition)
        return {CONVEYOR_E_WRONG_STATE, client_.get_job(id)};
      throw;
    }
  }
  std::vector<JobOutcome> delete_jobs(std::span<const int64_t> ids) override {
    return client_.delete_jobs(ids);
  }
  Engine::JobBatchResult cancel_jobs_bulk(const JobQuery& filter) override {
    return client_.cancel_jobs_bulk(filter);
  }
  Engine::JobBatchResult delete_jobs_bulk(const JobQuery& filter) override {
    return client_.delete_jobs_bulk(filter);
  }
  Engine::QueueRemoval remove_queue(const std::string& queue, bool force, int64_t after_id,
                                    uint32_t limit) override {
    return client_.delete_queue(queue, force, after_id, limit);
  }

 private:
  AdminClient client_;
};

Config load(const GlobalOptions& g) { return load_config_file(resolve_config_path(g.config_path)); }

// CONVEYOR_ADMIN_TOKEN, else the admin_token of a config file named with --config.
std::string admin_token(const GlobalOptions& g) {
  if (const char* env = std::getenv("CONVEYOR_ADMIN_TOKEN"); env && *env) return env;
  if (g.config_path) return load(g).server.admin_token;
  return {};
}

// The SQLite plugin built with conveyor (by name or by its file name).
bool is_builtin_sqlite(const std::string& plugin) {
  return plugin == "sqlite" || std::filesystem::path(plugin).filename() == "libconveyor-sqlite.so";
}

}  // namespace

std::unique_ptr<Engine> open_engine(const Config& config) {
  try {
    return std::make_unique<Engine>(config);
  } catch (const StorageError& e) {
    if (e.code() == CONVEYOR_E_INVALID)
      if (auto error = storage_option_error(config, e.what())) throw *error;
    throw;
  }
}

std::optional<std::string> process_local_storage(Engine& engine) {
  const PluginInfo& info = EngineInternals::plugin_info(engine);
  if ((info.capabilities & (CONVEYOR_CAP_DURABLE | CONVEYOR_CAP_MULTI_PROCESS)) != 0)
    return std::nullopt;
  return info.name;
}

std::unique_ptr<Backend> open_backend(const GlobalOptions& g, bool read_only) {
  if (g.server_url) return std::make_unique<ApiBackend>(*g.server_url, admin_token(g));
  Config config = load(g);
  auto& options = config.storage.options;
  if (read_only && is_builtin_sqlite(config.storage.plugin) &&
      std::none_of(options.begin(), options.end(),
                   [](const auto& o) { return o.first == "create"; }))
    options.emplace_back("create", "false");
  return std::make_unique<StorageBackend>(config);
}

}  // namespace conveyor::cli
