#include "pg_errors.hpp"

#include <pqxx/except>

#include <exception>
#include <string_view>

namespace conveyor::postgres {
namespace {

// libpq's messages span lines ("...failed: Connection refused\n\tIs the
// server running..."): one line, whitespace runs collapsed.
std::string one_line(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const bool space = c == '\n' || c == '\r' || c == '\t' || c == ' ';
    if (!space)
      out += c;
    else if (!out.empty() && out.back() != ' ')
      out += ' ';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

FailureKind kind_of_sqlstate(std::string_view state, bool connection_open) {
  if (state.size() != 5)
    return connection_open ? FailureKind::kInternal : FailureKind::kConnectionLost;
  const std::string_view cls = state.substr(0, 2);
  if (cls == "08") return FailureKind::kConnectionLost;          // connection exception
  if (state == "57P01" || state == "57P02" || state == "57P03")  // shutdown, crash, starting
    return connection_open ? FailureKind::kUnavailable : FailureKind::kConnectionLost;
  if (state == "40001" || state == "40P01") return FailureKind::kConflict;
  if (cls == "53" || state == "55P03" || state == "57014" || state == "25006")
    return FailureKind::kUnavailable;  // resources, lock timeout, cancel, read-only standby
  if (cls == "22") return FailureKind::kInvalid;  // data exception
  return connection_open ? FailureKind::kInternal : FailureKind::kConnectionLost;
}

}  // namespace

Failure classify_current_exception(bool connection_open) {
  try {
    throw;
  } catch (const pqxx::broken_connection& e) {
    return {FailureKind::kConnectionLost, one_line(e.what())};
  } catch (const pqxx::in_doubt_error& e) {
    return {FailureKind::kConnectionLost, one_line(e.what())};
  } catch (const pqxx::statement_completion_unknown& e) {
    return {FailureKind::kConnectionLost, one_line(e.what())};
  } catch (const pqxx::transaction_rollback& e) {  // serialization failure, deadlock
    return {connection_open ? FailureKind::kConflict : FailureKind::kConnectionLost,
            one_line(e.what())};
  } catch (const pqxx::sql_error& e) {
    return {kind_of_sqlstate(e.sqlstate(), connection_open), one_line(e.what())};
  } catch (const pqxx::failure& e) {
    return {connection_open ? FailureKind::kInternal : FailureKind::kConnectionLost,
            one_line(e.what())};
  } catch (const std::bad_alloc&) {
    return {FailureKind::kInternal, "out of memory"};
  } catch (const std::exception& e) {
    return {FailureKind::kInternal, one_line(e.what())};
  } catch (...) {
    return {FailureKind::kInternal, "unknown exception"};
  }
}

conveyor_status status_of(FailureKind kind) noexcept {
  switch (kind) {
    case FailureKind::kConnectionLost:
    case FailureKind::kConflict:
    case FailureKind::kUnavailable:
      return CONVEYOR_E_UNAVAILABLE;
    case FailureKind::kInvalid:
      return CONVEYOR_E_INVALID;
    case FailureKind::kInternal:
      return CONVEYOR_E_INTERNAL;
  }
  return CONVEYOR_E_INTERNAL;
}

}  // namespace conveyor::postgres
