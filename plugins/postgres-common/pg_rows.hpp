// Reading values out of result rows (text format), and the small conversions
// every PostgreSQL plugin's storage calls share.
#ifndef CONVEYOR_PLUGINS_POSTGRES_COMMON_PG_ROWS_HPP
#define CONVEYOR_PLUGINS_POSTGRES_COMMON_PG_ROWS_HPP

#include <conveyor/storage_plugin.h>
#include <conveyor/storage_plugin.hpp>

#include <pqxx/row>

#include <cstdint>
#include <string>
#include <string_view>

namespace conveyor::postgres {

// Column i of row as the type named; throw std::runtime_error on a value the
// type cannot hold.
int64_t int_at(const pqxx::row& row, pqxx::row::size_type i);
int32_t int32_at(const pqxx::row& row, pqxx::row::size_type i);
std::string text_at(const pqxx::row& row, pqxx::row::size_type i);
bool bool_at(const pqxx::row& row, pqxx::row::size_type i);
double double_at(const pqxx::row& row, pqxx::row::size_type i);

// The shortest decimal text that reads back as v exactly.
std::string shortest(double v);

// Throws sdk::Error(CONVEYOR_E_INVALID) for an empty queue name or one a text
// column cannot hold; op names the call in the message.
void require_queue(std::string_view queue, const char* op);

// The plugin's own clock (enqueue has no now_us): microseconds since the epoch.
int64_t wall_clock_us();

// "host:pid": which process claimed a job (diagnostics only).
std::string claimer_identity();

// A job copied out of a result row; the callback sees views into it.
using sdk::OwnedJob;

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_COMMON_PG_ROWS_HPP
