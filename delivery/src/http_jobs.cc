// The "http" job kind: a job's request built from its queue's target or its
// payload, sent through Delivery, its outcome reported through JobResult.
#include "conveyor/http_jobs.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/validation.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>

namespace conveyor {
namespace {

using nlohmann::json;
namespace hd = http_delivery;

constexpr const char* kPayloadForm =
    "an http job's payload must be a JSON object such as {\"url\": "
    "\"https://api.example.com/hook\", \"method\": \"POST\", \"headers\": {}, \"body\": {}} "
    "(or give its queue a [queues.NAME.http] url, and the payload is the body)";

bool has_header(const std::vector<std::pair<std::string, std::string>>& headers,
                std::string_view name) {
  return std::any_of(headers.begin(), headers.end(), [&](const auto& h) {
    return std::equal(h.first.begin(), h.first.end(), name.begin(), name.end(),
                      [](char a, char b) { return std::tolower(a) == std::tolower(b); });
  });
}

[[noreturn]] void bad_field(std::string_view field, const std::string& problem) {
  throw PermanentError(fmt::format("http job payload: {} {}", field, problem));
}

// The payload form (no queue target): {"url", "method", "headers", "body", ...}.
hd::Request request_from_payload(const std::string& payload) {
  json doc;
  try {
    doc = json::parse(payload);
  } catch (const json::exception& e) {
    throw PermanentError(fmt::format("{}; it is not JSON: {}", kPayloadForm, e.what()));
  }
  if (!doc.is_object())
    throw PermanentError(std::string(kPayloadForm) + "; got " + doc.type_name());
  hd::Request r;
  for (const auto& [key, value] : doc.items()) {
    if (key == "url") {
      if (!value.is_string())
        bad_field("url", std::string("must be a string, got ") + value.type_name());
      r.url = value.get<std::string>();
      if (auto problem = http_url_problem(r.url)) bad_field("url", *problem);
    } else if (key == "method") {
      if (!value.is_string())
        bad_field("method", std::string("must be a string, got ") + value.type_name());
      r.method = value.get<std::string>();
      if (auto problem = http_method_problem(r.method)) bad_field("method", *problem);
    } else if (key == "headers") {
      if (!value.is_object())
        bad_field("headers", std::string("must be an object of strings, got ") + value.type_name());
      for (const auto& [name, v] : value.items()) {
        if (!v.is_string())
          bad_field("headers." + name, std::string("must be a string, got ") + v.type_name());
        if (auto problem = http_header_problem(name, v.get<std::string>()))
          throw PermanentError("http job payload: " + *problem);  // names the header
        r.headers.emplace_back(name, v.get<std::string>());
      }
    } else if (key == "body") {
      r.body = value.is_string() ? value.get<std::string>() : value.dump();
    } else if (key == "timeout_ms") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1 ||
          value.get<int64_t>() > kMaxHttpTimeoutMs)
        bad_field("timeout_ms", fmt::format("must be an integer from 1 to {}, got {}",
                                            kMaxHttpTimeoutMs, value.dump()));
      r.timeout = std::chrono::milliseconds(value.get<int64_t>());
    } else if (key == "follow_redirects") {
      if (!value.is_boolean())
        bad_field("follow_redirects", "must be true or false, got " + value.dump());
      r.follow_redirects = value.get<bool>();
    } else {
      bad_field(quote_for_message(key),
                "is not a request field (url, method, headers, body, timeout_ms, "
                "follow_redirects)");
    }
  }
  if (r.url.empty()) throw PermanentError(std::string(kPayloadForm) + "; it has no url");
  return r;
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
    delivery.submit(std::move(request), [result](hd::Outcome o) mutable { report(o, result); });
  }

  static void report(const hd::Outcome& o, JobResult& result) {
    switch (o.kind) {
      case hd::OutcomeKind::kSucceeded:
        return result.complete();
      case hd::OutcomeKind::kBackpressure:
        // No Retry-After: 0, the engine backs off from [engine] backoff_base_ms.
        return result.retry_after(o.retry_after.value_or(std::chrono::milliseconds(0)), o.error);
      case hd::OutcomeKind::kRetry:
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
  engine.register_async_handler("http", [impl = impl_.get()](const Job& job, JobResult result) {
    impl->start(job, std::move(result));
  });
}

HttpJobs::~HttpJobs() { impl_->delivery.shutdown(std::chrono::steady_clock::now()); }

size_t HttpJobs::in_flight() const { return impl_->delivery.in_flight(); }

}  // namespace conveyor
