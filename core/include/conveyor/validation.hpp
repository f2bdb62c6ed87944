// Validation shared by every surface (config, CLI, API, embedding): one code
// path, so the same bad input gets the same message everywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace conveyor {

// Bad input from a user. field() names what to fix ("queue", "rate", ...);
// what() is a whole sentence that says what is wrong and what is allowed.
class ValidationError : public std::invalid_argument {
 public:
  ValidationError(std::string field, const std::string& message)
      : std::invalid_argument(message), field_(std::move(field)) {}
  const std::string& field() const noexcept { return field_; }

 private:
  std::string field_;
};

// Queue names: [A-Za-z0-9][A-Za-z0-9._:-]{0,127}. Throws ValidationError.
void validate_queue_name(std::string_view name);
bool is_valid_queue_name(std::string_view name) noexcept;

// A job kind: 1..128 printable ASCII characters, no spaces. Throws.
void validate_job_kind(std::string_view kind);

// The offset of the first byte of s that is not well-formed UTF-8 (RFC
// 3629: no overlong forms, no surrogates, nothing above U+10FFFF), or npos.
size_t invalid_utf8_at(std::string_view s) noexcept;

// A job key (NewJob::key): at most kMaxJobKeyBytes bytes of UTF-8; empty is
// the empty key. Throws ValidationError("key", ...) saying what is wrong.
void validate_job_key(std::string_view key);

// A job's own timeout (NewJob::timeout_ms): 0 (the queue's job_timeout_s) or
// 1..kMaxJobTimeoutMs milliseconds (7 days). Throws
// ValidationError("timeout", ...) saying what is allowed.
void validate_job_timeout_ms(int64_t timeout_ms);

// A duration written as text (the CLI's --timeout): a plain decimal number
// (parse_plain_decimal) with an optional unit, ms, s, m, h or d; no unit is
// seconds ("90", "1.5s", "500ms", "10m", "2h"). Returns whole milliseconds
// (rounded to the nearest), checked by validate_job_timeout_ms and > 0.
// Throws ValidationError("timeout", "NAME must be ..., got \"TEXT\"").
int64_t parse_timeout_ms(std::string_view text, std::string_view name);

// The highest rate accepted, jobs/s: one token per nanosecond, the token
// bucket's resolution (a higher rate could not be told apart from it).
inline constexpr double kMaxRatePerSec = 1e9;

// The lowest rate accepted, jobs/s: one job every 1000 s. Anything slower is
// a queue that is in effect stopped (pause it instead), and a rate near the
// smallest doubles (1e-320) would wait for ever for its next token.
inline constexpr double kMinRatePerSec = 0.001;

// rate: finite, >= kMinRatePerSec and <= kMaxRatePerSec. Throws
// ValidationError("rate", ...). Every surface (config file, environment, CLI,
// API, embedding) checks rates with it.
void validate_rate(double rate_per_sec);

// A number written as text the one way every surface takes it: plain decimal,
// digits with an optional fraction and exponent ("50", "2.5", ".5", "1e3",
// "2.5E-2"). No sign, spaces, hexadecimal ("0x10"), "inf" or "nan". Returns
// nullopt for anything else; the range is not checked.
std::optional<double> parse_plain_decimal(std::string_view text);

// "a plain decimal number of jobs per second from 0.001 to 1000000000 (...)":
// what a rate written as text must be, for messages.
std::string rate_text_rule();

// A rate written as text (the CLI's --rate, CONVEYOR_RATE_LIMIT_RATE_PER_SEC):
// parse_plain_decimal, then validate_rate. Throws ValidationError("rate",
// "NAME must be <rate_text_rule()>, got \"TEXT\"") for text that is not a
// plain decimal number, validate_rate's error for one out of range.
double parse_rate(std::string_view text, std::string_view name);

// burst as given by a user: a whole number >= 1 (or >= 0 where 0 means auto)
// and <= UINT32_MAX. Throws ValidationError("burst", ...).
void validate_burst(int64_t burst, bool zero_means_auto);

// ceil(rate), at least 1, at most UINT32_MAX: the burst used when none is given.
uint32_t auto_burst(double rate_per_sec);

// Text in double quotes, safe to print: quotes, backslashes, control and
// non-ASCII bytes escaped (\" \\ \xHH), cut after max_bytes input bytes with "...".
std::string quote_for_message(std::string_view text, size_t max_bytes = 64);

// A double as the shortest text that reads back the same ("0.5", "10", "nan", "inf").
std::string format_number(double value);

// The parts of an HTTP request that [queues.NAME.http] or an "http" job's
// payload names. Each returns what is wrong, as a phrase that follows the
// field's name ("must be ..., got ..."), or nullopt when it is fine.
// url: http:// or https://, then a host; no spaces or control characters.
std::optional<std::string> http_url_problem(std::string_view url);
// method: an HTTP method token in upper case (GET, POST, PUT, ...).
std::optional<std::string> http_method_problem(std::string_view method);
// A header: the name a token, the value without CR, LF or NUL.
std::optional<std::string> http_header_problem(std::string_view name, std::string_view value);
// The longest an http job's request may take, in ms.
inline constexpr uint32_t kMaxHttpTimeoutMs = 3'600'000;

// The largest payload a job may carry.
inline constexpr size_t kMaxPayloadBytes = 1024 * 1024;

}  // namespace conveyor
