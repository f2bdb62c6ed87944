// Connect error codes and their HTTP statuses (api_error.hpp).
#include <conveyor/api_error.hpp>

#include <array>
#include <utility>

namespace conveyor {
namespace {

struct CodeInfo {
  ApiCode code;
  const char* name;
  int status;
};

// The Connect protocol's table (after RFC 003: canceled 499, deadline 504,
// failed_precondition 400, unimplemented 501).
constexpr std::array<CodeInfo, 16> kCodes = {{
    {ApiCode::kCanceled, "canceled", 499},
    {ApiCode::kUnknown, "unknown", 500},
    {ApiCode::kInvalidArgument, "invalid_argument", 400},
    {ApiCode::kDeadlineExceeded, "deadline_exceeded", 504},
    {ApiCode::kNotFound, "not_found", 404},
    {ApiCode::kAlreadyExists, "already_exists", 409},
    {ApiCode::kPermissionDenied, "permission_denied", 403},
    {ApiCode::kResourceExhausted, "resource_exhausted", 429},
    {ApiCode::kFailedPrecondition, "failed_precondition", 400},
    {ApiCode::kAborted, "aborted", 409},
    {ApiCode::kOutOfRange, "out_of_range", 400},
    {ApiCode::kUnimplemented, "unimplemented", 501},
    {ApiCode::kInternal, "internal", 500},
    {ApiCode::kUnavailable, "unavailable", 503},
    {ApiCode::kDataLoss, "data_loss", 500},
    {ApiCode::kUnauthenticated, "unauthenticated", 401},
}};

const CodeInfo& info(ApiCode code) noexcept {
  for (const auto& c : kCodes)
    if (c.code == code) return c;
  return kCodes[1];  // unknown
}

}  // namespace

const char* to_string(ApiCode code) noexcept { return info(code).name; }

int http_status(ApiCode code) noexcept { return info(code).status; }

std::optional<ApiCode> parse_api_code(std::string_view name) noexcept {
  for (const auto& c : kCodes)
    if (name == c.name) return c.code;
  return std::nullopt;
}

ApiCode api_code_for_http_status(int status) noexcept {
  switch (status) {
    case 400:
      return ApiCode::kInternal;
    case 401:
      return ApiCode::kUnauthenticated;
    case 403:
      return ApiCode::kPermissionDenied;
    case 404:
      return ApiCode::kUnimplemented;
    case 429:
    case 502:
    case 503:
    case 504:
      return ApiCode::kUnavailable;
    default:
      return ApiCode::kUnknown;
  }
}

}  // namespace conveyor
