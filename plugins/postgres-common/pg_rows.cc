#include "pg_rows.hpp"

#include "pg_text.hpp"

#include <conveyor/storage_plugin.hpp>

#include <unistd.h>

#include <charconv>
#include <chrono>
#include <climits>
#include <stdexcept>

namespace conveyor::postgres {

int64_t int_at(const pqxx::row& row, pqxx::row::size_type i) { return parse_int64(row[i].c_str()); }

int32_t int32_at(const pqxx::row& row, pqxx::row::size_type i) {
  int64_t v = int_at(row, i);
  if (v < INT32_MIN || v > INT32_MAX)
    throw std::runtime_error("integer out of range from the server");
  return static_cast<int32_t>(v);
}

std::string text_at(const pqxx::row& row, pqxx::row::size_type i) {
  return std::string(row[i].c_str(), row[i].size());
}

bool bool_at(const pqxx::row& row, pqxx::row::size_type i) { return row[i].c_str()[0] == 't'; }

double double_at(const pqxx::row& row, pqxx::row::size_type i) {
  std::string_view s(row[i].c_str(), row[i].size());
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size())
    throw std::runtime_error("expected a number from the server, got '" + std::string(s) + "'");
  return v;
}

std::string shortest(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

void require_queue(std::string_view queue, const char* op) {
  if (queue.empty())
    throw sdk::Error(CONVEYOR_E_INVALID, std::string(op) + ": queue name is empty");
  if (!is_storable_text(queue))
    throw sdk::Error(CONVEYOR_E_INVALID,
                     std::string(op) + ": queue name is not valid UTF-8 or contains a NUL byte");
}

int64_t wall_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string claimer_identity() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return std::string(host[0] != '\0' ? host : "localhost") + ":" + std::to_string(getpid());
}

}  // namespace conveyor::postgres
