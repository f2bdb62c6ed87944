// Outcome classification and Retry-After parsing.
#include <array>
#include <cctype>
#include <cstdint>
#include <span>

#include <fmt/format.h>

#include "conveyor/http_delivery.hpp"

namespace conveyor::http_delivery {
namespace {

constexpr size_t kBodyPrefixBytes = 200;

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// Parses a run of exactly `width` digits (0: any number, at least one).
std::optional<int> take_number(std::string_view& s, size_t width) {
  size_t n = 0;
  while (n < s.size() && s[n] >= '0' && s[n] <= '9') ++n;
  if (n == 0 || (width != 0 && n != width) || n > 9) return std::nullopt;
  int value = 0;
  for (size_t i = 0; i < n; ++i) value = value * 10 + (s[i] - '0');
  s.remove_prefix(n);
  return value;
}

bool take(std::string_view& s, std::string_view literal) {
  if (s.substr(0, literal.size()) != literal) return false;
  s.remove_prefix(literal.size());
  return true;
}

std::optional<int> take_month(std::string_view& s) {
  static constexpr std::array<std::string_view, 12> kMonths = {
      "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  for (size_t i = 0; i < kMonths.size(); ++i) {
    if (take(s, kMonths[i])) return static_cast<int>(i) + 1;
  }
  return std::nullopt;
}

bool take_day_name(std::string_view& s, bool long_form) {
  static constexpr std::array<std::string_view, 7> kShort = {"Mon", "Tue", "Wed", "Thu",
                                                             "Fri", "Sat", "Sun"};
  static constexpr std::array<std::string_view, 7> kLong = {
      "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"};
  for (auto name : long_form ? std::span<const std::string_view>(kLong)
                             : std::span<const std::string_view>(kShort)) {
    if (take(s, name)) return true;
  }
  return false;
}

struct Fields {
  int year, month, day, hour, minute, second;
};

bool take_time(std::string_view& s, Fields& f) {
  auto h = take_number(s, 2);
  if (!h || !take(s, ":")) return false;
  auto m = take_number(s, 2);
  if (!m || !take(s, ":")) return false;
  auto sec = take_number(s, 2);
  if (!sec) return false;
  f.hour = *h;
  f.minute = *m;
  f.second = *sec;
  return true;
}

// IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
std::optional<Fields> parse_imf(std::string_view s) {
  Fields f{};
  if (!take_day_name(s, false) || !take(s, ", ")) return std::nullopt;
  auto d = take_number(s, 2);
  if (!d || !take(s, " ")) return std::nullopt;
  auto mon = take_month(s);
  if (!mon || !take(s, " ")) return std::nullopt;
  auto y = take_number(s, 4);
  if (!y || !take(s, " ") || !take_time(s, f) || s != " GMT") return std::nullopt;
  f.day = *d;
  f.month = *mon;
  f.year = *y;
  return f;
}

// RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT"
std::optional<Fields> parse_rfc850(std::string_view s) {
  Fields f{};
  if (!take_day_name(s, true) || !take(s, ", ")) return std::nullopt;
  auto d = take_number(s, 2);
  if (!d || !take(s, "-")) return std::nullopt;
  auto mon = take_month(s);
  if (!mon || !take(s, "-")) return std::nullopt;
  auto y = take_number(s, 2);
  if (!y || !take(s, " ") || !take_time(s, f) || s != " GMT") return std::nullopt;
  f.day = *d;
  f.month = *mon;
  // RFC 9110 5.6.7: a two-digit year more than 50 years ahead is in the past
  // century; for the dates a Retry-After carries, 19xx for 70-99 is that rule.
  f.year = *y >= 70 ? 1900 + *y : 2000 + *y;
  return f;
}

// asctime: "Sun Nov  6 08:49:37 1994"
std::optional<Fields> parse_asctime(std::string_view s) {
  Fields f{};
  if (!take_day_name(s, false) || !take(s, " ")) return std::nullopt;
  auto mon = take_month(s);
  if (!mon || !take(s, " ")) return std::nullopt;
  take(s, " ");  // the day is space-padded to two characters
  auto d = take_number(s, 0);
  if (!d || *d > 31 || !take(s, " ") || !take_time(s, f) || !take(s, " ")) return std::nullopt;
  auto y = take_number(s, 4);
  if (!y || !s.empty()) return std::nullopt;
  f.day = *d;
  f.month = *mon;
  f.year = *y;
  return f;
}

std::optional<std::chrono::system_clock::time_point> to_time(const Fields& f) {
  using namespace std::chrono;
  year_month_day ymd{year{f.year}, month{static_cast<unsigned>(f.month)},
                     day{static_cast<unsigned>(f.day)}};
  if (!ymd.ok() || f.hour > 23 || f.minute > 59 || f.second > 60) return std::nullopt;
  return sys_days{ymd} + hours{f.hour} + minutes{f.minute} + seconds{f.second};
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<std::chrono::milliseconds> parse_retry_after(
    std::string_view value, std::chrono::system_clock::time_point now) {
  using namespace std::chrono;
  value = trim(value);
  if (all_digits(value)) {
    // More than ten digits is centuries: refused rather than overflowing.
    if (value.size() > 10) return std::nullopt;
    int64_t seconds_value = 0;
    for (char c : value) seconds_value = seconds_value * 10 + (c - '0');
    return duration_cast<milliseconds>(seconds(seconds_value));
  }
  std::optional<Fields> fields = parse_imf(value);
  if (!fields) fields = parse_rfc850(value);
  if (!fields) fields = parse_asctime(value);
  if (!fields) return std::nullopt;
  auto when = to_time(*fields);
  if (!when) return std::nullopt;
  if (*when <= now) return milliseconds(0);
  return duration_cast<milliseconds>(*when - now);
}

Outcome classify(int status, std::string_view body, std::string_view retry_after_header,
                 std::chrono::system_clock::time_point now) {
  Outcome outcome;
  outcome.status = status;
  if (status >= 200 && status <= 299) {
    outcome.kind = OutcomeKind::kSucceeded;
    return outcome;
  }
  outcome.error = body.empty()
                      ? fmt::format("HTTP {}", status)
                      : fmt::format("HTTP {}: {}", status, body.substr(0, kBodyPrefixBytes));
  switch (status) {
    case 429:
    case 503:
      outcome.kind = OutcomeKind::kBackpressure;
      if (!retry_after_header.empty()) {
        outcome.retry_after = parse_retry_after(retry_after_header, now);
      }
      break;
    case 408:
    case 425:
    case 500:
    case 502:
    case 504:
      outcome.kind = OutcomeKind::kRetry;
      break;
    default:
      outcome.kind = OutcomeKind::kPermanent;
  }
  return outcome;
}

}  // namespace conveyor::http_delivery
