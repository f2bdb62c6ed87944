// proto3 JSON request reading (proto_json.hpp).
#include "proto_json.hpp"

#include <conveyor/validation.hpp>

#include <charconv>
#include <cmath>
#include <limits>

namespace conveyor::api {
namespace {

using nlohmann::json;

const json& empty_object() {
  static const json kEmpty = json::object();
  return kEmpty;
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      return "a number";
    default:
      return "null";
  }
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw ValidationError(path, path + ": " + what);
}

// A value shown in a message: short and escaped.
std::string shown(const json& v) {
  return v.is_string() ? quote_for_message(v.get_ref<const std::string&>(), 40) : to_text(v);
}

int64_t integer_value(const json& v, const std::string& path) {
  constexpr double kTwo63 = 9223372036854775808.0;
  switch (v.type()) {
    case json::value_t::number_integer:
      return v.get<int64_t>();
    case json::value_t::number_unsigned: {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(path, "must be a whole number within int64 range, got " + std::to_string(u));
      return static_cast<int64_t>(u);
    }
    case json::value_t::number_float: {
      const double d = v.get<double>();
      if (!std::isfinite(d) || d != std::trunc(d) || d < -kTwo63 || d >= kTwo63)
        fail(path, "must be a whole number, got " + format_number(d));
      return static_cast<int64_t>(d);
    }
    case json::value_t::string: {
      const std::string& s = v.get_ref<const std::string&>();
      int64_t out = 0;
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
      if (s.empty() || ec != std::errc() || end != s.data() + s.size())
        fail(path, "must be a whole number (a JSON number or a decimal string), got " + shown(v));
      return out;
    }
    default:
      fail(path, std::string("must be a whole number, got ") + type_name(v));
  }
}

double double_value(const json& v, const std::string& path) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    double out = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (!s.empty() && ec == std::errc() && end == s.data() + s.size()) return out;
    fail(path, "must be a number, got " + shown(v));
  }
  fail(path, std::string("must be a number, got ") + type_name(v));
}

}  // namespace

MessageReader::MessageReader(const json& value, std::string path)
    : value_(&value), path_(std::move(path)) {
  if (!value.is_object()) {
    std::string where = path_.empty() ? "body" : path_.substr(0, path_.size() - 1);
    fail(where, std::string("must be a JSON object, got ") + type_name(value));
  }
}

const json* MessageReader::find(std::string_view camel, std::string_view snake) const {
  const auto a = value_->find(camel);
  const auto b = camel == snake ? value_->end() : value_->find(snake);
  if (a != value_->end() && b != value_->end())
    fail(path_of(camel),
         "given twice (as " + std::string(camel) + " and " + std::string(snake) + ")");
  const auto it = a != value_->end() ? a : b;
  if (it == value_->end() || it->is_null()) return nullptr;
  return &*it;
}

std::string MessageReader::string_field(std::string_view camel, std::string_view snake) const {
  const json* v = find(camel, snake);
  if (!v) return {};
  if (!v->is_string()) fail(path_of(camel), std::string("must be a string, got ") + type_name(*v));
  return v->get<std::string>();
}

bool MessageReader::bool_field(std::string_view camel, std::string_view snake) const {
  const json* v = find(camel, snake);
  if (!v) return false;
  if (!v->is_boolean())
    fail(path_of(camel), std::string("must be true or false, got ") + type_name(*v));
  return v->get<bool>();
}

double MessageReader::double_field(std::string_view camel, std::string_view snake) const {
  return optional_double(camel, snake).value_or(0.0);
}

std::optional<double> MessageReader::optional_double(std::string_view camel,
                                                     std::string_view snake) const {
  const json* v = find(camel, snake);
  if (!v) return std::nullopt;
  return double_value(*v, path_of(camel));
}

int64_t MessageReader::integer_field(std::string_view camel, std::string_view snake) const {
  return optional_integer(camel, snake).value_or(0);
}

std::optional<int64_t> MessageReader::optional_integer(std::string_view camel,
                                                       std::string_view snake) const {
  const json* v = find(camel, snake);
  if (!v) return std::nullopt;
  return integer_value(*v, path_of(camel));
}

std::vector<int64_t> MessageReader::repeated_integers(std::string_view camel,
                                                      std::string_view snake) const {
  std::vector<int64_t> out;
  const json* v = find(camel, snake);
  if (!v) return out;
  if (!v->is_array()) fail(path_of(camel), std::string("must be an array, got ") + type_name(*v));
  for (size_t i = 0; i < v->size(); ++i)
    out.push_back(integer_value((*v)[i], path_of(camel) + "[" + std::to_string(i) + "]"));
  return out;
}

MessageReader MessageReader::message_field(std::string_view camel, std::string_view snake) const {
  const json* v = find(camel, snake);
  if (!v) return MessageReader(empty_object(), path_of(camel) + ".");
  return MessageReader(*v, path_of(camel) + ".");
}

std::vector<MessageReader> MessageReader::repeated_messages(std::string_view camel,
                                                            std::string_view snake) const {
  std::vector<MessageReader> out;
  const json* v = find(camel, snake);
  if (!v) return out;
  if (!v->is_array()) fail(path_of(camel), std::string("must be an array, got ") + type_name(*v));
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i)
    out.emplace_back((*v)[i], path_of(camel) + "[" + std::to_string(i) + "].");
  return out;
}

json parse_request_body(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return json::object();
  json doc;
  try {
    doc = json::parse(body);
  } catch (const json::exception& e) {
    // A syntax error (parse_error) or a number too large for a double
    // (out_of_range.406): both are the sender's to fix. what() reads
    // "[json.exception.parse_error.101] parse error at line 1, ...".
    std::string reason = e.what();
    if (auto end = reason.find("] "); end != std::string::npos) reason.erase(0, end + 2);
    throw ValidationError("body", "body is not valid JSON: " + reason);
  }
  if (!doc.is_object())
    throw ValidationError("body", std::string("body must be a JSON object, got ") + type_name(doc));
  return doc;
}

std::string to_text(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace conveyor::api
