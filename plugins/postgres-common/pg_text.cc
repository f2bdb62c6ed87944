#include "pg_text.hpp"

#include <libpq-fe.h>

#include <charconv>
#include <memory>
#include <stdexcept>

namespace conveyor::postgres {
namespace {

template <typename T>
std::string number_array(std::span<const T> values) {
  std::string out;
  out.reserve(2 + values.size() * 12);
  out += '{';
  char buf[24];
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, values[i]);
    out.append(buf, end);
  }
  out += '}';
  return out;
}

// Length of the well-formed UTF-8 sequence starting at s[i], or 0.
size_t utf8_sequence(std::string_view s, size_t i) noexcept {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  auto cont = [&](size_t k, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return k < s.size() && b(k) >= lo && b(k) <= hi;
  };
  if (c >= 0xC2 && c <= 0xDF) return cont(i + 1) ? 2 : 0;
  if (c == 0xE0) return cont(i + 1, 0xA0) && cont(i + 2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(i + 1) && cont(i + 2) ? 3 : 0;
  if (c == 0xED) return cont(i + 1, 0x80, 0x9F) && cont(i + 2) ? 3 : 0;
  if (c == 0xF0) return cont(i + 1, 0x90) && cont(i + 2) && cont(i + 3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(i + 1) && cont(i + 2) && cont(i + 3) ? 4 : 0;
  if (c == 0xF4) return cont(i + 1, 0x80, 0x8F) && cont(i + 2) && cont(i + 3) ? 4 : 0;
  return 0;
}

}  // namespace

std::string bigint_array(std::span<const int64_t> values) { return number_array(values); }
std::string int_array(std::span<const int32_t> values) { return number_array(values); }

std::string text_array(std::span<const std::string_view> values) {
  size_t size = 2;
  for (std::string_view v : values) size += v.size() + 3;
  std::string out;
  out.reserve(size);
  out += '{';
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += '"';
    for (char c : values[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

std::string hex_encode(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    out[2 * i] = kDigits[c >> 4];
    out[2 * i + 1] = kDigits[c & 0xF];
  }
  return out;
}

std::string bytea_from_text(const char* text) {
  // The hex format, the server's default since 9.0: decode it here.
  if (text[0] == '\\' && text[1] == 'x') {
    auto nibble = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    std::string_view hex(text + 2);
    if (hex.size() % 2 != 0) throw std::runtime_error("malformed bytea from the server");
    std::string out(hex.size() / 2, '\0');
    for (size_t i = 0; i < out.size(); ++i) {
      int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
      if (hi < 0 || lo < 0) throw std::runtime_error("malformed bytea from the server");
      out[i] = static_cast<char>((hi << 4) | lo);
    }
    return out;
  }
  // bytea_output = escape: libpq knows that format.
  size_t len = 0;
  std::unique_ptr<unsigned char, void (*)(void*)> raw(
      PQunescapeBytea(reinterpret_cast<const unsigned char*>(text), &len), PQfreemem);
  if (!raw) throw std::runtime_error("malformed bytea from the server");
  return std::string(reinterpret_cast<const char*>(raw.get()), len);
}

int64_t parse_int64(const char* text) {
  std::string_view s(text);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    throw std::runtime_error("expected an integer from the server, got '" +
                             std::string(s.substr(0, 40)) + "'");
  return v;
}

bool is_storable_text(std::string_view text) noexcept {
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '\0') return false;
    size_t n = utf8_sequence(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string sanitize_text(std::string_view text) {
  if (is_storable_text(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '\0') {
      out += "\\0";
      ++i;
      continue;
    }
    size_t n = utf8_sequence(text, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace conveyor::postgres
