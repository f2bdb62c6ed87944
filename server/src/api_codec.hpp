// The Connect unary codecs over the generated conveyor.v1 messages:
// "application/json" (the proto3 JSON mapping, libprotobuf's json_util) and
// "application/proto" (binary). Both the server (api_request.cc) and the API
// client (admin_client.cc) read and write messages with these.
#pragma once

#include <conveyor/api_error.hpp>

#include <google/protobuf/message.h>

#include <optional>
#include <string>
#include <string_view>

namespace conveyor::api {

enum class Codec { kJson, kProto };

// The codec of a Content-Type: "application/json" (optionally with
// "; charset=utf-8") or "application/proto", any case; nullopt otherwise.
std::optional<Codec> codec_for_content_type(std::string_view value);

// "application/json" or "application/proto".
const char* content_type(Codec codec);

// Reads body into out (cleared first). JSON: "" is the empty message, field
// names in lowerCamelCase or as in the .proto, int64 as numbers or strings,
// unknown fields rejected, bools only true or false (not "false", "no", 0;
// libprotobuf alone reads such strings), and for a message that can hold a
// bool, strict JSON (no 'single quotes', unquoted names, trailing commas or
// name given twice). Throws ApiError invalid_argument saying what is wrong
// and where ("jobs[1].kind: must be a string, got 7").
void decode(Codec codec, std::string_view body, google::protobuf::Message& out);

// The message in codec. JSON: lowerCamelCase, every field (defaults too)
// except unset optional ones, int64 as strings. Invalid UTF-8 in string
// fields is replaced first (U+FFFD), so clients can always read the answer.
std::string encode(Codec codec, const google::protobuf::Message& message);

// A Connect error body, {"code": "...", "message": "..."}: JSON whatever the
// request's codec, as the Connect protocol wants for unary errors.
std::string error_body(const ApiError& e);

}  // namespace conveyor::api
