// Reading request messages in the proto3 JSON mapping, leniently where the
// mapping is lenient: a field may be spelled in lowerCamelCase or as in the
// .proto file, null means "not set", integers may be numbers or strings,
// doubles may be numbers or "NaN"/"Infinity"/"-Infinity"/numeric strings,
// unknown fields are ignored. A value of the wrong type is a ValidationError
// whose field() is the field's path ("jobs[2].kind") and whose message starts
// with that path.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::api {

class MessageReader {
 public:
  // value must be a JSON object (else ValidationError). path is where the
  // message sits, with a trailing dot when nested ("" at the top, "job.").
  // value must outlive the reader.
  MessageReader(const nlohmann::json& value, std::string path);

  const nlohmann::json& value() const { return *value_; }
  const std::string& path() const { return path_; }

  // A field's path as messages show it: path + lowerCamelCase name.
  std::string path_of(std::string_view camel) const { return path_ + std::string(camel); }

  // The field's value, or nullptr when absent or null. Both spellings at
  // once is an error. snake may equal camel.
  const nlohmann::json* find(std::string_view camel, std::string_view snake) const;

  std::string string_field(std::string_view camel, std::string_view snake) const;
  bool bool_field(std::string_view camel, std::string_view snake) const;
  double double_field(std::string_view camel, std::string_view snake) const;
  std::optional<double> optional_double(std::string_view camel, std::string_view snake) const;
  // Any whole number in int64 range (callers check their own range).
  int64_t integer_field(std::string_view camel, std::string_view snake) const;
  std::optional<int64_t> optional_integer(std::string_view camel, std::string_view snake) const;
  std::vector<int64_t> repeated_integers(std::string_view camel, std::string_view snake) const;
  // A nested message (an empty one when absent).
  MessageReader message_field(std::string_view camel, std::string_view snake) const;
  std::vector<MessageReader> repeated_messages(std::string_view camel,
                                               std::string_view snake) const;

 private:
  const nlohmann::json* value_;
  std::string path_;
};

// Reads a whole request body: "" is {}; otherwise it must be a JSON object.
// Throws ValidationError (field "body") saying what is wrong and where.
nlohmann::json parse_request_body(std::string_view body);

// A JSON document as text. Invalid UTF-8 in strings is replaced, never thrown.
std::string to_text(const nlohmann::json& value);

}  // namespace conveyor::api
