// The HTTP call an "http" job makes, as its payload names it, and the check
// that a job's payload names one. Enqueueing such a job validates it, so a
// bad payload is refused at once ("payload: http job payload: url ...")
// instead of failing the job later; the delivery reads it again to send it.
#pragma once

#include <conveyor/config.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor {

// The payload form of an http job (its queue has no [queues.NAME.http]):
//   {"url": "https://api.example.com/hook",     required, http:// or https://
//    "method": "POST",                          default POST, upper case
//    "headers": {"Authorization": "Bearer x"},  strings
//    "body": "text" or any JSON value,          a non-string is sent as JSON
//    "timeout_ms": 30000,                       1..kMaxHttpTimeoutMs
//    "follow_redirects": false}
struct HttpCall {
  std::string url;
  std::string method = "POST";
  std::vector<std::pair<std::string, std::string>> headers;  // in payload order
  std::string body;
  uint32_t timeout_ms = 30000;
  bool follow_redirects = false;
};

// Parses the payload form. Throws ValidationError("payload", "http job
// payload: ...") naming the field that is wrong and what it takes.
HttpCall parse_http_call(std::string_view payload);

// For a job of kind "http" on a queue without [queues.NAME.http] in config,
// parse_http_call(payload) (throwing as it does); any other job passes.
void validate_http_job(const Config& config, std::string_view queue, std::string_view kind,
                       std::string_view payload);

}  // namespace conveyor
