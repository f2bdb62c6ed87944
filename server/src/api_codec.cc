// The Connect unary codecs (api_codec.hpp).
#include "api_codec.hpp"

#include <conveyor/validation.hpp>

#include <fmt/format.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

namespace conveyor::api {
namespace {

namespace pb = google::protobuf;
using nlohmann::json;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

[[noreturn]] void invalid(const std::string& message) {
  throw ApiError(ApiCode::kInvalidArgument, message);
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

// "jobs[1].max_attempts" as the API spells it: "jobs[1].maxAttempts".
std::string camel_path(std::string_view path) {
  std::string out;
  bool upper = false;
  for (char c : path) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out.push_back(upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c);
    upper = false;
  }
  return out;
}

// The message type at path ("jobs[1]") below root, or null when the path
// does not lead to a message.
const pb::Descriptor* message_at(const pb::Descriptor* root, std::string_view path) {
  const pb::Descriptor* d = root;
  while (d && !path.empty()) {
    const size_t dot = path.find('.');
    std::string_view segment = path.substr(0, dot);
    segment = segment.substr(0, segment.find('['));
    const pb::FieldDescriptor* f = d->FindFieldByName(std::string(segment));
    if (!f) f = d->FindFieldByCamelcaseName(std::string(segment));
    d = f ? f->message_type() : nullptr;
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
  }
  return d;
}

std::string known_fields(const pb::Descriptor* d) {
  std::vector<std::string> names;
  for (int i = 0; i < d->field_count(); ++i) names.push_back(d->field(i)->json_name());
  if (names.empty()) return "it has no fields";
  return fmt::format("known: {}", fmt::join(names, ", "));
}

std::string expected(std::string_view type) {
  if (type == "TYPE_DOUBLE" || type == "TYPE_FLOAT") return "must be a number";
  if (type == "TYPE_INT32" || type == "TYPE_SINT32" || type == "TYPE_SFIXED32")
    return "must be a whole number from -2147483648 to 2147483647";
  if (type == "TYPE_UINT32" || type == "TYPE_FIXED32")
    return "must be a whole number from 0 to 4294967295";
  if (type == "TYPE_INT64" || type == "TYPE_SINT64" || type == "TYPE_SFIXED64")
    return "must be a whole number (a JSON number or a decimal string)";
  if (type == "TYPE_UINT64" || type == "TYPE_FIXED64")
    return "must be a whole number >= 0 (a JSON number or a decimal string)";
  if (type == "TYPE_STRING") return "must be a string";
  if (type == "TYPE_BOOL") return "must be true or false (a JSON boolean)";
  if (type == "TYPE_MESSAGE") return "must be a JSON object";
  return "has the wrong type (" + std::string(type) + ")";
}

// libprotobuf's JSON errors, said the way the rest of the API says them:
//   "(jobs[1].priority): invalid value 3e9 for type TYPE_INT32"
//     -> "jobs[1].priority: must be a whole number from ... , got 3e9"
//   "(job) prio: Cannot find field."
//     -> "job.prio: unknown field of NewJob (known: queue, kind, ...)"
std::string explain(std::string_view status, const pb::Descriptor* root) {
  constexpr std::string_view kInvalid = ": invalid value ";
  constexpr std::string_view kForType = " for type ";
  std::string location;  // "(jobs[1])": where the error is, or its parent
  if (!status.empty() && status.front() == '(') {
    const size_t close = status.find(')');
    if (close == std::string_view::npos) return "invalid request message: " + std::string(status);
    location = std::string(status.substr(1, close - 1));
    status.remove_prefix(close + 1);
  }
  // An object where a scalar goes: libprotobuf names the field where the
  // type would be ("(job): invalid value Starting an object on a scalar
  // field for type key"); say what the field takes instead.
  constexpr std::string_view kObjectOnScalar =
      ": invalid value Starting an object on a scalar field for type ";
  if (status.rfind(kObjectOnScalar, 0) == 0) {
    const std::string name(status.substr(kObjectOnScalar.size()));
    const pb::Descriptor* d = message_at(root, location);
    const pb::FieldDescriptor* f = d ? d->FindFieldByName(name) : nullptr;
    if (d && !f) f = d->FindFieldByCamelcaseName(name);
    std::string type = f ? pb::FieldDescriptor::TypeName(f->type()) : "";
    for (char& c : type) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return fmt::format("{}{}: {}, got an object",
                       location.empty() ? "" : camel_path(location) + ".",
                       f ? f->json_name() : camel_path(name),
                       f ? expected("TYPE_" + type) : "must not be an object");
  }
  if (status.rfind(kInvalid, 0) == 0) {
    const size_t type_at = status.rfind(kForType);
    if (type_at != std::string_view::npos && type_at > kInvalid.size()) {
      const std::string_view value = status.substr(kInvalid.size(), type_at - kInvalid.size());
      std::string_view type = status.substr(type_at + kForType.size());
      const std::string what = type.rfind("type.googleapis.com/", 0) == 0
                                   ? "must be a JSON object (a " +
                                         std::string(type.substr(type.rfind('.') + 1)) + " message)"
                                   : expected(type);
      return fmt::format("{}: {}, got {}", camel_path(location), what, value);
    }
  }
  // " name: what" below location.
  if (!status.empty() && status.front() == ' ') status.remove_prefix(1);
  const size_t colon = status.find(": ");
  if (colon != std::string_view::npos && colon > 0) {
    const std::string_view name = status.substr(0, colon);
    const std::string_view what = status.substr(colon + 2);
    const std::string path =
        (location.empty() ? "" : camel_path(location) + ".") + std::string(name);
    if (what == "Cannot find field.") {
      const pb::Descriptor* d = message_at(root, location);
      return fmt::format("{}: unknown field{}", path,
                         d ? fmt::format(" of {} ({})", d->name(), known_fields(d)) : "");
    }
    if (what == "Proto field is not repeating, cannot start list.")
      return path + ": must not be a list";
    return fmt::format("{}: {}", path, what);
  }
  return "invalid request message: " + std::string(status);
}

// The field of d that a JSON document names name: its JSON name or its name
// in the .proto, as libprotobuf reads them.
const pb::FieldDescriptor* field_named(const pb::Descriptor* d, std::string_view name) {
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (f->json_name() == name || f->name() == name) return f;
  }
  return nullptr;
}

bool is_floating(const pb::FieldDescriptor* f) {
  return f->type() == pb::FieldDescriptor::TYPE_DOUBLE ||
         f->type() == pb::FieldDescriptor::TYPE_FLOAT;
}

// Whether a message of type d can hold a field check_fields looks at: a bool
// or a floating-point number (seen: the types on the way, against recursion).
bool has_bool_field(const pb::Descriptor* d, std::vector<const pb::Descriptor*>& seen) {
  if (std::find(seen.begin(), seen.end(), d) != seen.end()) return false;
  seen.push_back(d);
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (f->type() == pb::FieldDescriptor::TYPE_BOOL || is_floating(f)) return true;
    if (f->message_type() && has_bool_field(f->message_type(), seen)) return true;
  }
  return false;
}

// A number given as a JSON string: libprotobuf reads it with strtod, so
// "0x10" was 16 and "+16" 16. The text must be what the config and the CLI
// take (parse_plain_decimal): for a rate, exactly that (the message as the
// CLI's --rate says it); for another number also a leading "-" (its range
// check then says what it takes) or the mapping's "Infinity", "-Infinity"
// and "NaN".
void check_number_text(const pb::FieldDescriptor* f, const std::string& at,
                       const std::string& text) {
  if (f->name() == "rate_per_sec") {
    if (!parse_plain_decimal(text))
      invalid(fmt::format("{}: must be {}, got {}", at, rate_text_rule(), quote_for_message(text)));
    return;
  }
  if (text == "Infinity" || text == "-Infinity" || text == "NaN") return;
  const std::string_view digits =
      !text.empty() && text.front() == '-' ? std::string_view(text).substr(1) : text;
  if (!parse_plain_decimal(digits))
    invalid(fmt::format(
        "{}: must be a number: a JSON number, or a string holding one in plain decimal (digits "
        "with an optional fraction and exponent, e.g. 2.5 or 1e3; no hexadecimal), got {}",
        at, quote_for_message(text)));
}

// libprotobuf's JSON parser (3.21) also reads a string into a bool field:
// "true", "false", and "yes", "no", "t", "f", "y", "n", "1", "0" in any case
// (so {"enabled": "no"} was false). The proto3 JSON mapping takes only true
// and false (and null, the default): refuses a string in any bool field of
// object, a message of type d at path ("jobs[1]."), naming it. Numbers, lists
// and objects libprotobuf refuses itself (explain()).
void check_bools(const json& object, const pb::Descriptor* d, const std::string& path) {
  if (d->file()->package() == "google.protobuf") return;  // well-known types: their own JSON
  for (const auto& [name, value] : object.items()) {
    const pb::FieldDescriptor* f = field_named(d, name);
    if (!f || f->is_map()) continue;  // unknown: libprotobuf's error; the API has no maps
    const std::string field = path + f->json_name();
    const bool list = f->is_repeated() && value.is_array();
    for (size_t i = 0; i < (list ? value.size() : 1); ++i) {
      const json& v = list ? value[i] : value;
      const std::string at = list ? fmt::format("{}[{}]", field, i) : field;
      if (f->type() == pb::FieldDescriptor::TYPE_BOOL && v.is_string())
        invalid(fmt::format("{}: {}, got {}", at, expected("TYPE_BOOL"),
                            quote_for_message(v.get_ref<const std::string&>())));
      if (is_floating(f) && v.is_string())
        check_number_text(f, at, v.get_ref<const std::string&>());
      // A job's payload is JSON text in a string, not JSON itself: say so
      // (libprotobuf's words were "must be a string" or "must not be a list").
      if (f->type() == pb::FieldDescriptor::TYPE_STRING && f->name() == "payload" &&
          !v.is_string() && !v.is_null())
        invalid(fmt::format(
            "{}: must be a JSON string holding the payload's JSON text (e.g. \"payload\": "
            "\"{{\\\"ms\\\": 5}}\"), got {}",
            at, type_name(v)));
      if (f->message_type() && v.is_object()) check_bools(v, f->message_type(), at + ".");
    }
  }
}

// body as a JSON document (RFC 8259), with each name once per object:
// invalid_argument saying what is wrong. libprotobuf's parser is laxer: it
// also reads 'single quotes', unquoted names and trailing commas, and keeps
// the first of two values of a field when the second is null.
json strict_document(std::string_view body) {
  std::vector<std::set<std::string, std::less<>>> names;  // of each object open
  std::string twice;
  json doc;
  try {
    doc = json::parse(body, [&](int, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::object_start) names.emplace_back();
      if (event == json::parse_event_t::object_end && !names.empty()) names.pop_back();
      if (event == json::parse_event_t::key && !names.empty() && twice.empty() &&
          !names.back().insert(parsed.get<std::string>()).second)
        twice = parsed.get<std::string>();
      return true;
    });
  } catch (const json::exception& e) {
    // what() reads "[json.exception.parse_error.101] parse error at line 1, ...".
    std::string reason = e.what();
    if (auto end = reason.find("] "); end != std::string::npos) reason.erase(0, end + 2);
    invalid("body is not valid JSON: " + reason);
  }
  if (!twice.empty())
    invalid("body is not valid JSON: it names " + quote_for_message(twice) +
            " twice in one object");
  return doc;
}

void decode_json(std::string_view body, pb::Message& out) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return;  // the empty message
  pb::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status =
      pb::util::JsonStringToMessage(pb::StringPiece(body.data(), body.size()), &out, options);
  const pb::Descriptor* d = out.GetDescriptor();
  if (status.ok()) {
    // Read again, strictly, only where a bool can be (a second parse; the
    // worker's hot path, Claim, Complete, Heartbeat, has no bool).
    std::vector<const pb::Descriptor*> seen;
    if (!has_bool_field(d, seen)) return;
    const json doc = strict_document(body);
    if (doc.is_object()) check_bools(doc, d, "");
    return;
  }
  // Only on failure: say what is wrong with the document itself first.
  const json doc = strict_document(body);
  if (!doc.is_object()) invalid(std::string("body must be a JSON object, got ") + type_name(doc));
  check_bools(doc, d, "");  // a string for a bool, named as on success
  invalid(explain(std::string_view(status.message().data(), status.message().size()), d));
}

bool valid_utf8(std::string_view s) { return invalid_utf8_at(s) == std::string_view::npos; }

// s with every byte that is not part of well-formed UTF-8 as U+FFFD.
std::string replace_invalid_utf8(std::string_view s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    size_t n = 1;
    while (n <= 4 && i + n <= s.size() && !valid_utf8(s.substr(i, n))) ++n;
    if (n <= 4 && i + n <= s.size()) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return out;
}

// Whether any string field below m holds invalid UTF-8.
bool has_invalid_utf8(const pb::Message& m) {
  const pb::Reflection* r = m.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const pb::FieldDescriptor* f : fields) {
    const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
    for (int i = 0; i < n; ++i) {
      if (f->type() == pb::FieldDescriptor::TYPE_STRING) {
        if (!valid_utf8(f->is_repeated() ? r->GetRepeatedString(m, f, i) : r->GetString(m, f)))
          return true;
      } else if (f->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
        if (has_invalid_utf8(f->is_repeated() ? r->GetRepeatedMessage(m, f, i)
                                              : r->GetMessage(m, f)))
          return true;
      }
    }
  }
  return false;
}

// Replaces invalid UTF-8 in every string field below m.
void fix_utf8(pb::Message& m) {
  const pb::Reflection* r = m.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const pb::FieldDescriptor* f : fields) {
    const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
    for (int i = 0; i < n; ++i) {
      if (f->type() == pb::FieldDescriptor::TYPE_STRING) {
        const std::string v = f->is_repeated() ? r->GetRepeatedString(m, f, i) : r->GetString(m, f);
        if (valid_utf8(v)) continue;
        if (f->is_repeated())
          r->SetRepeatedString(&m, f, i, replace_invalid_utf8(v));
        else
          r->SetString(&m, f, replace_invalid_utf8(v));
      } else if (f->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
        fix_utf8(f->is_repeated() ? *r->MutableRepeatedMessage(&m, f, i)
                                  : *r->MutableMessage(&m, f));
      }
    }
  }
}

std::string encode_valid(Codec codec, const pb::Message& message) {
  if (codec == Codec::kProto) return message.SerializeAsString();
  pb::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string out;
  const auto status = pb::util::MessageToJsonString(message, &out, options);
  if (!status.ok())
    throw ApiError(ApiCode::kInternal,
                   "cannot write the response as JSON: " + std::string(status.message()));
  return out;
}

}  // namespace

std::optional<Codec> codec_for_content_type(std::string_view value) {
  const size_t semi = value.find(';');
  std::string_view media = value.substr(0, semi);
  while (!media.empty() && media.back() == ' ') media.remove_suffix(1);
  const std::string type = lower(media);
  std::string params = semi == std::string_view::npos ? "" : lower(value.substr(semi + 1));
  params.erase(std::remove(params.begin(), params.end(), ' '), params.end());
  if (type == "application/json" && (params.empty() || params == "charset=utf-8"))
    return Codec::kJson;
  if (type == "application/proto" && params.empty()) return Codec::kProto;
  return std::nullopt;
}

const char* content_type(Codec codec) {
  return codec == Codec::kJson ? "application/json" : "application/proto";
}

void decode(Codec codec, std::string_view body, pb::Message& out) {
  // libprotobuf logs each string field of a parsed message that is not UTF-8
  // on stderr at ERROR: a client's mistake, answered invalid_argument here.
  static std::once_flag log_once;
  std::call_once(log_once, [] {
    pb::SetLogHandler([](pb::LogLevel level, const char* file, int line, const std::string& msg) {
      if (level >= pb::LOGLEVEL_FATAL)
        spdlog::error("libprotobuf {}:{}: {}", file, line, msg);
      else
        spdlog::debug("libprotobuf {}:{}: {}", file, line, msg);
    });
  });
  out.Clear();
  if (codec == Codec::kJson) return decode_json(body, out);
  if (!out.ParseFromArray(body.data(), static_cast<int>(body.size())))
    invalid(fmt::format(
        "body is not a valid binary {} message (a truncated or malformed protobuf, or a string "
        "field that is not UTF-8)",
        out.GetTypeName()));
}

std::string encode(Codec codec, const pb::Message& message) {
  if (!has_invalid_utf8(message)) return encode_valid(codec, message);
  std::unique_ptr<pb::Message> copy(message.New());
  copy->CopyFrom(message);
  fix_utf8(*copy);
  return encode_valid(codec, *copy);
}

std::string error_body(const ApiError& e) {
  return json{{"code", to_string(e.code())}, {"message", e.what()}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

}  // namespace conveyor::api
