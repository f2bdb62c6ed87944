// Input checks shared by config, CLI, API and embedders (validation.hpp).
#include <conveyor/job.hpp>
#include <conveyor/validation.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

namespace conveyor {
namespace {

constexpr size_t kMaxQueueNameLength = 128;
constexpr size_t kMaxJobKindLength = 128;
constexpr int64_t kMaxBurst = std::numeric_limits<uint32_t>::max();

bool is_ascii_alnum(char c) noexcept {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

bool is_queue_name_char(char c) noexcept {
  return is_ascii_alnum(c) || c == '.' || c == '_' || c == ':' || c == '-';
}

// Printable ASCII without the space: what a job kind may contain.
bool is_job_kind_char(char c) noexcept { return c > ' ' && c <= '~'; }

void append_escaped(std::string& out, char c) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto byte = static_cast<unsigned char>(c);
  if (c == '"' || c == '\\') {
    out += '\\';
    out += c;
  } else if (byte < 0x20 || byte >= 0x7f) {
    out += "\\x";
    out += kHex[byte >> 4];
    out += kHex[byte & 0xf];
  } else {
    out += c;
  }
}

// A name too long to show whole is cut; its length says how far off it is.
std::string describe_long(std::string_view text, size_t limit) {
  std::string shown = quote_for_message(text);
  if (text.size() > limit) shown += " (" + std::to_string(text.size()) + " characters)";
  return shown;
}

}  // namespace

std::string quote_for_message(std::string_view text, size_t max_bytes) {
  std::string out = "\"";
  const std::string_view shown = text.substr(0, max_bytes);
  for (char c : shown) append_escaped(out, c);
  out += '"';
  if (shown.size() < text.size()) out += "...";
  return out;
}

std::string format_number(double value) {
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, result.ptr);
}

bool is_valid_queue_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > kMaxQueueNameLength) return false;
  if (!is_ascii_alnum(name.front())) return false;
  for (char c : name) {
    if (!is_queue_name_char(c)) return false;
  }
  return true;
}

void validate_queue_name(std::string_view name) {
  if (is_valid_queue_name(name)) return;
  throw ValidationError("queue", "invalid queue name " + describe_long(name, kMaxQueueNameLength) +
                                     ": use 1-128 characters from A-Z a-z 0-9 . _ : - starting "
                                     "with a letter or digit");
}

void validate_job_kind(std::string_view kind) {
  bool ok = !kind.empty() && kind.size() <= kMaxJobKindLength;
  for (char c : kind) ok = ok && is_job_kind_char(c);
  if (ok) return;
  throw ValidationError("kind", "invalid job kind " + describe_long(kind, kMaxJobKindLength) +
                                    ": use 1-128 printable ASCII characters without spaces");
}

void validate_rate(double rate_per_sec) {
  if (rate_per_sec >= kMinRatePerSec && rate_per_sec <= kMaxRatePerSec) return;  // NaN: false
  if (std::isfinite(rate_per_sec) && rate_per_sec > kMaxRatePerSec)
    throw ValidationError("rate", "rate must be at most " +
                                      std::to_string(static_cast<int64_t>(kMaxRatePerSec)) +
                                      " jobs per second, got " + format_number(rate_per_sec));
  if (std::isfinite(rate_per_sec) && rate_per_sec > 0)
    throw ValidationError(
        "rate", "rate must be at least " + format_number(kMinRatePerSec) +
                    " jobs per second (one job every " + format_number(1 / kMinRatePerSec) +
                    " s; to stop a queue, pause it), got " + format_number(rate_per_sec));
  throw ValidationError(
      "rate", "rate must be a finite number greater than 0, got " + format_number(rate_per_sec));
}

std::optional<double> parse_plain_decimal(std::string_view text) {
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  size_t i = 0;
  size_t mantissa_digits = 0;
  while (i < text.size() && digit(text[i])) ++i, ++mantissa_digits;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && digit(text[i])) ++i, ++mantissa_digits;
  }
  if (mantissa_digits == 0) return std::nullopt;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    size_t exponent_digits = 0;
    while (i < text.size() && digit(text[i])) ++i, ++exponent_digits;
    if (exponent_digits == 0) return std::nullopt;
  }
  if (i != text.size()) return std::nullopt;
  // The text is plain decimal now, so from_chars reads all of it; a result
  // out of double's range (1e999, 1e-999) is reported, not an error here:
  // validate_rate refuses it as too high or too low.
  double value = 0;
  const auto [end, ec] =
      std::from_chars(text.data(), text.data() + text.size(), value, std::chars_format::general);
  if (end != text.data() + text.size()) return std::nullopt;
  if (ec == std::errc::result_out_of_range) {
    // libstdc++ leaves value unset then; tell huge from tiny by the exponent's sign.
    const size_t e = text.find_first_of("eE");
    const bool tiny = e != std::string_view::npos && e + 1 < text.size() && text[e + 1] == '-';
    return tiny ? std::numeric_limits<double>::denorm_min() : HUGE_VAL;
  }
  if (ec != std::errc()) return std::nullopt;
  return value;
}

std::string rate_text_rule() {
  return "a plain decimal number of jobs per second from " + format_number(kMinRatePerSec) +
         " to " + std::to_string(static_cast<int64_t>(kMaxRatePerSec)) +
         " (digits with an optional fraction and exponent, e.g. 50, 2.5 or 1e3; no sign, "
         "hexadecimal, inf or nan)";
}

double parse_rate(std::string_view text, std::string_view name) {
  const std::optional<double> rate = parse_plain_decimal(text);
  if (!rate)
    throw ValidationError("rate", std::string(name) + " must be " + rate_text_rule() + ", got " +
                                      quote_for_message(text));
  validate_rate(*rate);
  return *rate;
}

void validate_burst(int64_t burst, bool zero_means_auto) {
  const int64_t min = zero_means_auto ? 0 : 1;
  if (burst >= min && burst <= kMaxBurst) return;
  std::string message = "burst must be a whole number from " + std::to_string(min) + " to " +
                        std::to_string(kMaxBurst);
  if (zero_means_auto) message += " (0 means ceil(rate))";
  throw ValidationError("burst", message + ", got " + std::to_string(burst));
}

uint32_t auto_burst(double rate_per_sec) {
  // Written so NaN and anything <= 1 land on 1, and huge rates do not overflow.
  if (!(rate_per_sec > 1)) return 1;
  if (rate_per_sec >= static_cast<double>(kMaxBurst)) return static_cast<uint32_t>(kMaxBurst);
  return static_cast<uint32_t>(std::ceil(rate_per_sec));
}

namespace {

// RFC 9110's tchar.
bool is_token_char(char c) noexcept {
  return is_ascii_alnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool starts_with_ignoring_case(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(text[i])) != prefix[i]) return false;
  return true;
}

}  // namespace

std::optional<std::string> http_url_problem(std::string_view url) {
  const std::string rule = "must be an http:// or https:// URL with a host, got ";
  size_t scheme = 0;
  if (starts_with_ignoring_case(url, "http://"))
    scheme = 7;
  else if (starts_with_ignoring_case(url, "https://"))
    scheme = 8;
  else
    return rule + quote_for_message(url);
  const std::string_view rest = url.substr(scheme);
  if (rest.empty() || rest.front() == '/' || rest.front() == ':' || rest.front() == '?')
    return rule + quote_for_message(url);
  for (char c : url)
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f)
      return "must not contain spaces or control characters (percent-encode them), got " +
             quote_for_message(url);
  return std::nullopt;
}

std::optional<std::string> http_method_problem(std::string_view method) {
  const bool ok = !method.empty() && method.size() <= 32 &&
                  std::all_of(method.begin(), method.end(), [](char c) {
                    return (c >= 'A' && c <= 'Z') || c == '-' || c == '_';
                  });
  if (ok) return std::nullopt;
  return "must be an HTTP method in upper case (GET, POST, PUT, PATCH, DELETE, ...), got " +
         quote_for_message(method);
}

std::optional<std::string> http_header_problem(std::string_view name, std::string_view value) {
  if (name.empty() || !std::all_of(name.begin(), name.end(), is_token_char))
    return "header name must be a token (letters, digits and !#$%&'*+-.^_`|~), got " +
           quote_for_message(name);
  for (char c : value)
    if (c == '\r' || c == '\n' || c == '\0')
      return "header " + std::string(name) + ": value must not contain CR, LF or NUL, got " +
             quote_for_message(value);
  return std::nullopt;
}

namespace {

// The length of the UTF-8 sequence at s[i] (RFC 3629: no overlongs, no
// surrogates, at most U+10FFFF), 0 when it is not one.
size_t utf8_sequence(std::string_view s, size_t i) noexcept {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const auto cont = [&](size_t k) { return k < s.size() && (at(k) & 0xC0) == 0x80; };
  const unsigned char c = at(i);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(i + 1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(i + 1) || !cont(i + 2)) return 0;
    if (c == 0xE0 && at(i + 1) < 0xA0) return 0;   // overlong
    if (c == 0xED && at(i + 1) >= 0xA0) return 0;  // a surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return 0;
    if (c == 0xF0 && at(i + 1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && at(i + 1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

// The byte offset of the first byte that is not well-formed UTF-8, or npos.
size_t invalid_utf8_at(std::string_view s) noexcept {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

void validate_job_timeout_ms(int64_t timeout_ms) {
  if (timeout_ms < 0 || timeout_ms > kMaxJobTimeoutMs)
    throw ValidationError("timeout", "timeout must be from 1 ms to " +
                                         std::to_string(kMaxJobTimeoutMs) +
                                         " ms (7 days), or 0 for the queue's job_timeout_s; got " +
                                         std::to_string(timeout_ms) + " ms");
}

int64_t parse_timeout_ms(std::string_view text, std::string_view name) {
  struct Unit {
    std::string_view suffix;
    double ms;
  };
  // "ms" before "s" and "m": the longest suffix that matches wins.
  static constexpr Unit kUnits[] = {
      {"ms", 1}, {"s", 1e3}, {"m", 60e3}, {"h", 3600e3}, {"d", 86400e3}};
  auto bad = [&] {
    return ValidationError("timeout",
                           std::string(name) +
                               " must be a duration from 1ms to 7d: a plain decimal number with an "
                               "optional unit ms, s, m, h or d (no unit: seconds), e.g. 30s, 1.5m, "
                               "500ms; got " +
                               quote_for_message(text));
  };
  std::string_view number = text;
  double unit_ms = 1e3;
  for (const Unit& u : kUnits) {
    if (text.size() > u.suffix.size() && text.ends_with(u.suffix)) {
      number = text.substr(0, text.size() - u.suffix.size());
      unit_ms = u.ms;
      break;
    }
  }
  const std::optional<double> value = parse_plain_decimal(number);
  if (!value) throw bad();
  const double ms = *value * unit_ms;
  if (!(ms >= 0.5 && ms <= static_cast<double>(kMaxJobTimeoutMs))) throw bad();
  const auto rounded = static_cast<int64_t>(ms + 0.5);
  validate_job_timeout_ms(rounded);
  return rounded;
}

void validate_job_key(std::string_view key) {
  if (key.size() > kMaxJobKeyBytes)
    throw ValidationError("key", "key is " + std::to_string(key.size()) +
                                     " bytes; the longest is " + std::to_string(kMaxJobKeyBytes) +
                                     " bytes (UTF-8), got " + quote_for_message(key, 40));
  if (const size_t bad = invalid_utf8_at(key); bad != std::string_view::npos)
    throw ValidationError("key", "key must be UTF-8 text; byte " + std::to_string(bad) +
                                     " is not, got " + quote_for_message(key, 80));
}

}  // namespace conveyor
