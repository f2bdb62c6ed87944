#include <conveyor/http_call.hpp>
#include <conveyor/validation.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace conveyor {
namespace {

using nlohmann::json;

constexpr const char* kPayloadForm =
    "http job payload: must be a JSON object such as {\"url\": "
    "\"https://api.example.com/hook\", \"method\": \"POST\", \"headers\": {}, \"body\": {}} "
    "(or give the queue a [queues.NAME.http] url, and the payload is the body)";

[[noreturn]] void bad(const std::string& problem) {
  throw ValidationError("payload", "http job payload: " + problem);
}

[[noreturn]] void bad_field(std::string_view field, const std::string& problem) {
  bad(fmt::format("{} {}", field, problem));
}

std::string string_field(std::string_view field, const json& value) {
  if (!value.is_string())
    bad_field(field, std::string("must be a string, got ") + value.type_name());
  return value.get<std::string>();
}

}  // namespace

HttpCall parse_http_call(std::string_view payload) {
  json doc;
  try {
    doc = json::parse(payload);
  } catch (const json::exception& e) {
    throw ValidationError("payload", fmt::format("{}; it is not JSON: {}", kPayloadForm, e.what()));
  }
  if (!doc.is_object())
    throw ValidationError("payload", fmt::format("{}; got {}", kPayloadForm, doc.type_name()));
  HttpCall call;
  for (const auto& [key, value] : doc.items()) {
    if (key == "url") {
      call.url = string_field("url", value);
      if (auto problem = http_url_problem(call.url)) bad_field("url", *problem);
    } else if (key == "method") {
      call.method = string_field("method", value);
      if (auto problem = http_method_problem(call.method)) bad_field("method", *problem);
    } else if (key == "headers") {
      if (!value.is_object())
        bad_field("headers", std::string("must be an object of strings, got ") + value.type_name());
      for (const auto& [name, v] : value.items()) {
        const std::string text = string_field("headers." + name, v);
        if (auto problem = http_header_problem(name, text)) bad(*problem);  // names the header
        call.headers.emplace_back(name, text);
      }
    } else if (key == "body") {
      call.body = value.is_string() ? value.get<std::string>() : value.dump();
    } else if (key == "timeout_ms") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1 ||
          value.get<int64_t>() > kMaxHttpTimeoutMs)
        bad_field("timeout_ms", fmt::format("must be an integer from 1 to {}, got {}",
                                            kMaxHttpTimeoutMs, value.dump()));
      call.timeout_ms = static_cast<uint32_t>(value.get<int64_t>());
    } else if (key == "follow_redirects") {
      if (!value.is_boolean())
        bad_field("follow_redirects", "must be true or false, got " + value.dump());
      call.follow_redirects = value.get<bool>();
    } else {
      bad_field(quote_for_message(key),
                "is not a request field (url, method, headers, body, timeout_ms, "
                "follow_redirects)");
    }
  }
  if (call.url.empty())
    throw ValidationError("payload", std::string(kPayloadForm) + "; it has no url");
  return call;
}

void validate_http_job(const Config& config, std::string_view queue, std::string_view kind,
                       std::string_view payload) {
  if (kind != "http") return;
  const auto q = config.queues.find(std::string(queue));
  if (q != config.queues.end() && q->second.http) return;  // the payload is the body
  parse_http_call(payload);
}

}  // namespace conveyor
