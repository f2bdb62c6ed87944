// Storage and API backends for the commands (backend.hpp).
#include "backend.hpp"

#include <conveyor/admin_client.hpp>
#include <conveyor/config.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/engine_internals.hpp>
#include <conveyor/plugin_loader.hpp>
#include <conveyor/storage.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>

namespace conveyor::cli {
namespace {

// Storage opened in this process through an Engine (not started: no dispatch).
class StorageBackend final : public Backend {
 public:
  explicit StorageBackend(Config config) : engine_(std::move(config)) {}

  std::pair<int64_t, int64_t> enqueue(const JobRequest& job, int64_t count) override {
    warn_if_jobs_die_with_this_process(count);
    constexpr int64_t kBatch = 5000;
    const int64_t now = SystemClock::instance().wall_now_us();
    const NewJob one = to_new_job(job, now);
    int64_t first = 0, last = 0;
    for (int64_t done = 0; done < count;) {
      const int64_t n = std::min(kBatch, count - done);
      auto ids = engine_.enqueue_batch(std::vector<NewJob>(static_cast<size_t>(n), one));
      if (done == 0) first = ids.front();
      last = ids.back();
      done += n;
    }
    return {first, last};
  }
  void set_rate_limit(const std::string& queue, const RateLimit& limit) override {
    engine_.set_rate_limit(queue, limit);
  }
  bool delete_rate_limit(const std::string& queue) override {
    return engine_.delete_rate_limit(queue);
  }
  api::RateLimitListing rate_limits() override {
    const LimitResolver& l = EngineInternals::limits(engine_);
    return {l.enabled(), l.default_limit(), l.overrides()};
  }
  std::vector<QueueReport> queues() override { return engine_.queues(); }

 private:
  // Storage that is neither durable nor shared with other processes lives in
  // this process only: what the command enqueues is gone when it exits.
  void warn_if_jobs_die_with_this_process(int64_t count) {
    const PluginInfo& info = EngineInternals::plugin_info(engine_);
    if ((info.capabilities & (CONVEYOR_CAP_DURABLE | CONVEYOR_CAP_MULTI_PROCESS)) != 0) return;
    std::cerr << fmt::format(
        "conveyor: warning: storage plugin '{}' is neither durable nor multi-process, so the {} "
        "when this command exits; enqueue through the server that runs them (conveyor --server "
        "URL enqueue ...) or use a durable plugin\n",
        info.name,
        count == 1 ? "job enqueued here vanishes"
                   : fmt::format("{} jobs enqueued here vanish", count));
  }

  Engine engine_;
};

// A running server's API.
class ApiBackend final : public Backend {
 public:
  ApiBackend(std::string url, std::string token) : client_(std::move(url), std::move(token)) {}

  std::pair<int64_t, int64_t> enqueue(const JobRequest& job, int64_t count) override {
    // Batches stay well under the server's default max_body_bytes (1 MiB).
    constexpr size_t kBatchBytes = 256 * 1024;
    const size_t per_job = job.payload.size() + job.queue.size() + job.kind.size() + 100;
    const int64_t batch = static_cast<int64_t>(std::clamp<size_t>(kBatchBytes / per_job, 1, 1000));
    int64_t first = 0, last = 0;
    for (int64_t done = 0; done < count;) {
      const int64_t n = std::min(batch, count - done);
      auto ids = client_.enqueue_batch(std::vector<JobRequest>(static_cast<size_t>(n), job));
      if (done == 0) first = ids.front();
      last = ids.back();
      done += n;
    }
    return {first, last};
  }
  void set_rate_limit(const std::string& queue, const RateLimit& limit) override {
    client_.set_rate_limit(queue, limit);
  }
  bool delete_rate_limit(const std::string& queue) override {
    return client_.delete_rate_limit(queue);
  }
  api::RateLimitListing rate_limits() override { return client_.list_rate_limits(); }
  std::vector<QueueReport> queues() override { return client_.list_queues(); }

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

}  // namespace

std::unique_ptr<Backend> open_backend(const GlobalOptions& g) {
  if (g.server_url) return std::make_unique<ApiBackend>(*g.server_url, admin_token(g));
  return std::make_unique<StorageBackend>(load(g));
}

}  // namespace conveyor::cli
