// Connect error codes (https://connectrpc.com/docs/protocol#error-codes) and
// the error the API server raises and the API client reports.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace conveyor {

enum class ApiCode {
  kCanceled,
  kUnknown,
  kInvalidArgument,
  kDeadlineExceeded,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kResourceExhausted,
  kFailedPrecondition,
  kAborted,
  kOutOfRange,
  kUnimplemented,
  kInternal,
  kUnavailable,
  kDataLoss,
  kUnauthenticated,
};

// "invalid_argument", "not_found", ...
const char* to_string(ApiCode code) noexcept;
std::optional<ApiCode> parse_api_code(std::string_view name) noexcept;
// The HTTP status the Connect protocol gives the code (invalid_argument 400, ...).
int http_status(ApiCode code) noexcept;
// The code a Connect client infers from an HTTP status when the body carries
// none (e.g. a proxy's error page): 400 internal, 401 unauthenticated, ...
ApiCode api_code_for_http_status(int status) noexcept;

// A failed API call: what the server answers and what the client throws.
class ApiError : public std::runtime_error {
 public:
  ApiError(ApiCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ApiCode code() const noexcept { return code_; }

 private:
  ApiCode code_;
};

}  // namespace conveyor
