// Text encodings between C++ values and PostgreSQL's text protocol: array
// literals for bound array parameters, bytea, numbers, and text PostgreSQL
// accepts. Values always travel as bound parameters; these only format them.
#ifndef CONVEYOR_PLUGINS_POSTGRES_PG_TEXT_HPP
#define CONVEYOR_PLUGINS_POSTGRES_PG_TEXT_HPP

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace conveyor::postgres {

// {1,2,3}: a bigint[] parameter.
std::string bigint_array(std::span<const int64_t> values);
// {4,5}: an integer[] parameter.
std::string int_array(std::span<const int32_t> values);
// {"a","b\"c"}: a text[] parameter; every element quoted and escaped.
std::string text_array(std::span<const std::string_view> values);
// Lower-case hex of bytes, for decode(..., 'hex') on the server.
std::string hex_encode(std::string_view bytes);
// A bytea column as the server sends it in text format (hex "\x..." or the
// old escape format) back to bytes. Throws std::runtime_error on bad input.
std::string bytea_from_text(const char* text);
// Decimal integers as the server sends them. Throws std::runtime_error.
int64_t parse_int64(const char* text);
// PostgreSQL text cannot hold NUL bytes or invalid UTF-8: NUL becomes "\0"
// and each invalid byte U+FFFD, so free-form text (error messages) is kept.
std::string sanitize_text(std::string_view text);
// Whether text can be stored in a text column as is.
bool is_storable_text(std::string_view text) noexcept;

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_PG_TEXT_HPP
