// The "http" job kind: a job's request built from its queue's target or its
// payload, sent through Delivery, its outcome reported through JobResult.
#include "conveyor/http_jobs.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/http_call.hpp>
#include <conveyor/validation.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

namespace conveyor {
namespace {

namespace hd = http_delivery;

bool has_header(const std::vector<std::pair<std::string, std::string>>& headers,
                std::string_view name) {
  return std::any_of(headers.begin(), headers.end(), [&](const auto& h) {
    return std::equal(h.first.begin(), h.first.end(), name.begin(), name.end(),
                      [](char a, char b) { return std::tolower(a) == std::tolower(b); });
  });
}

// The payload form (no queue target), read as enqueueing checked it.
hd::Request request_from_payload(const std::string& payload) {
  HttpCall call;
  try {
    call = parse_http_call(payload);
  } catch (const ValidationError& e) {
    throw PermanentError(e.what());  // enqueued before it was checked, or through storage
  }
  hd::Request r;
  r.url = std::move(call.url);
  r.method = std::move(call.method);
  r.headers = std::move(call.headers);
  r.body = std::move(call.body);
  r.timeout = std::chrono::milliseconds(call.timeout_ms);
  r.follow_redirects = call.follow_redirects;
  return r;
}

// [http]'s TLS keys, each replaced by the queue's when it sets it
// (client_cert and client_key as a pair); section names where they are set.
hd::Tls tls_for(const HttpTlsConfig& global, const HttpTlsConfig* queue, std::string section) {
  hd::Tls tls{.ca_file = global.ca_file,
              .ca_dir = global.ca_dir,
              .client_cert = global.client_cert,
              .client_key = global.client_key,
              .section = std::move(section)};
  if (queue != nullptr) {
    if (!queue->ca_file.empty()) tls.ca_file = queue->ca_file;
    if (!queue->ca_dir.empty()) tls.ca_dir = queue->ca_dir;
    if (!queue->client_cert.empty()) {
      tls.client_cert = queue->client_cert;
      tls.client_key = queue->client_key;
    }
  }
  return tls;
}

// Queues whose max_workers exceeds [http] max_connections_per_host start
// more requests than can be sent to one host at once: the rest wait.
void warn_about_connection_limit(const Config& config) {
  const uint32_t limit = config.http.max_connections_per_host;
  if (limit == 0) return;
  auto warn = [&](const std::string& which, uint32_t workers) {
    spdlog::warn(
        "{} max_workers = {} exceeds [http] max_connections_per_host = {}: its http jobs beyond "
        "{} to one host wait inside the server for a connection (without spending an attempt; "
        "their timeout starts when they are sent). Set [http] max_connections_per_host = {} "
        "(or 0: no limit) if the downstream takes that many connections, or lower max_workers",
        which, workers, limit, limit, workers);
  };
  for (const auto& [queue, q] : config.queues) {
    const uint32_t workers = config.max_workers_for(queue);
    if (workers > limit) warn(fmt::format("queue {}:", queue), workers);
  }
  if (config.engine.max_workers > limit)
    warn("[engine] max_workers (queues without their own):", config.engine.max_workers);
}

}  // namespace

http_delivery::Request http_request_for(const Job& job, const HttpTargetConfig* target,
                                        const std::string& secret) {
  hd::Request r;
  if (target != nullptr) {
    r.url = target->url;
    r.method = target->method;
    r.headers = target->headers;
    r.body = job.payload;
    r.timeout = std::chrono::milliseconds(target->timeout_ms);
    r.follow_redirects = target->follow_redirects;
  } else {
    r = request_from_payload(job.payload);
  }
  // Named in certificate errors: where to set ca_file and the like.
  r.tls.section = target != nullptr ? fmt::format("[queues.{}.http]", job.queue) : "[http]";
  if (!has_header(r.headers, "Content-Type"))
    r.headers.emplace_back("Content-Type", "application/json");
  r.secret = secret;
  return r;
}

struct HttpJobs::Impl {
  Impl(const Config& config, std::map<std::string, std::string> secrets)
      : config(config),
        secrets(std::move(secrets)),
        delivery(hd::Policy{.allow_private = config.http.allow_private,
                            .allow_hosts = config.http.allow_hosts,
                            .max_response_bytes = config.http.max_response_bytes,
                            .max_connections_per_host = config.http.max_connections_per_host}) {}

  void start(const Job& job, JobResult result) {
    const auto q = config.queues.find(job.queue);
    const HttpTargetConfig* target =
        q != config.queues.end() && q->second.http ? &*q->second.http : nullptr;
    const auto s = secrets.find(job.queue);
    hd::Request request =
        http_request_for(job, target, s == secrets.end() ? std::string() : s->second);
    request.tls = tls_for(config.http.tls, target != nullptr ? &target->tls : nullptr,
                          std::move(request.tls.section));
    // The job's time limit bounds the request, a wait for a connection included.
    if (std::optional<TimeLimit> limit = result.time_limit()) {
      request.deadline = std::chrono::steady_clock::now() + limit->left;
      request.deadline_error = std::move(limit->error);
    }
    delivery.submit(std::move(request),
                    [result, queue = job.queue, id = job.id](hd::Outcome o) mutable {
                      if (!o.warning.empty())
                        spdlog::warn("queue {}: job {} (kind http): {}", queue, id, o.warning);
                      report(o, result);
                    });
  }

  static void report(const hd::Outcome& o, JobResult& result) {
    switch (o.kind) {
      case hd::OutcomeKind::kSucceeded:
        return result.complete();
      case hd::OutcomeKind::kBackpressure:
        // No Retry-After: 0, the engine holds from [engine] backoff_base_ms;
        // Retry-After: 0 or a date already past: "now" (kRetryNow), a hold of zero.
        if (!o.retry_after) return result.retry_after(std::chrono::milliseconds(0), o.error);
        return result.retry_after(o.retry_after->count() > 0 ? *o.retry_after : kRetryNow, o.error);
      case hd::OutcomeKind::kRetry:
        // Cut by the job's time limit: a timed-out attempt, as the engine's deadline makes it.
        if (o.deadline_cut) return result.fail_timed_out(o.error);
        return result.fail(o.error);
      case hd::OutcomeKind::kPermanent:
        return result.fail_permanently(o.error);
    }
    result.fail(fmt::format("unknown delivery outcome {}", static_cast<int>(o.kind)));
  }

  const Config& config;                              // the engine's; it outlives this
  const std::map<std::string, std::string> secrets;  // queue -> signing secret
  hd::Delivery delivery;  // last: its thread reports through the members above
};

namespace {

std::map<std::string, std::string> read_secrets(const Config& config, const EnvLookup& env) {
  std::map<std::string, std::string> secrets;
  for (const auto& [queue, q] : config.queues) {
    if (!q.http || q.http->secret_env.empty()) continue;
    const std::optional<std::string> value = env(q.http->secret_env.c_str());
    if (!value || value->empty())
      throw ConfigError(fmt::format(
          "{}: queues.{}.http.secret_env: environment variable {} is not set (set it to the "
          "secret that signs the queue's requests, or remove secret_env to send them unsigned)",
          config.source, queue, q.http->secret_env));
    secrets.emplace(queue, *value);
  }
  return secrets;
}

}  // namespace

HttpJobs::HttpJobs(Engine& engine, const EnvLookup& env)
    : impl_(std::make_unique<Impl>(engine.config(), read_secrets(engine.config(), env))) {
  warn_about_connection_limit(engine.config());
  engine.register_async_handler("http", [impl = impl_.get()](const Job& job, JobResult result) {
    impl->start(job, std::move(result));
  });
}

HttpJobs::~HttpJobs() { impl_->delivery.shutdown(std::chrono::steady_clock::now()); }

size_t HttpJobs::in_flight() const { return impl_->delivery.in_flight(); }

}  // namespace conveyor
