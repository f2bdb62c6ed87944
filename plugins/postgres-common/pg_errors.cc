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
  if (cls == "08") return FailureKind::kConnectionLost;  // connection exception
  // The server ends the session after these (FATAL): terminated or shut down,
  // another backend crashed, idle_session_timeout,
  // idle_in_transaction_session_timeout.
  if (state == "57P01" || state == "57P02" || state == "57P05" || state == "25P03")
    return FailureKind::kConnectionLost;
  if (state == "57P03")  // starting up
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
    return {FailureKind::kConnectionLost, one_line(e.what()), ""};
  } catch (const pqxx::in_doubt_error& e) {
    return {FailureKind::kConnectionLost, one_line(e.what()), ""};
  } catch (const pqxx::statement_completion_unknown& e) {
    return {FailureKind::kConnectionLost, one_line(e.what()), ""};
  } catch (const pqxx::transaction_rollback& e) {  // serialization failure, deadlock
    return {connection_open ? FailureKind::kConflict : FailureKind::kConnectionLost,
            one_line(e.what()), ""};
  } catch (const pqxx::sql_error& e) {
    return {kind_of_sqlstate(e.sqlstate(), connection_open), one_line(e.what()), e.sqlstate()};
  } catch (const pqxx::failure& e) {
    return {connection_open ? FailureKind::kInternal : FailureKind::kConnectionLost,
            one_line(e.what()), ""};
  } catch (const std::bad_alloc&) {
    return {FailureKind::kInternal, "out of memory", ""};
  } catch (const std::exception& e) {
    return {FailureKind::kInternal, one_line(e.what()), ""};
  } catch (...) {
    return {FailureKind::kInternal, "unknown exception", ""};
  }
}

bool discards_connection(const Failure& f) noexcept {
  return f.kind == FailureKind::kConnectionLost || f.sqlstate == "57014";
}

bool server_gone(const Failure& f) noexcept {
  return f.kind == FailureKind::kConnectionLost && f.sqlstate != "57P05" && f.sqlstate != "25P03";
}

std::string explain(const Failure& f, uint32_t statement_timeout_ms) {
  const std::string& st = f.sqlstate;
  if (st == "57014") {
    if (f.message.find("statement timeout") != std::string::npos)
      return "the statement was cancelled by statement_timeout (" +
             (statement_timeout_ms == 0 ? std::string("no limit set by the plugin")
                                        : std::to_string(statement_timeout_ms) + " ms") +
             ", plugin option statement_timeout_ms)";
    return "the statement was cancelled (a cancel request, e.g. pg_cancel_backend): " + f.message;
  }
  if (st == "42P05" || (st == "26000" && f.message.find("prepared statement") != std::string::npos))
    // A session's prepared statements are there in another session, or gone
    // from the same one: the connection is shared between transactions.
    return "the connection goes through a pooler in transaction mode (PgBouncer pool_mode = "
           "transaction, or a hosted pooler on its transaction port), which keeps no session "
           "state between transactions; the plugins need session state (named prepared "
           "statements, LISTEN): use the pooler's session mode or connect to PostgreSQL "
           "directly (" +
           f.message + ")";
  if (f.kind != FailureKind::kConnectionLost) return f.message;
  if (st == "57P05")
    return "the PostgreSQL server closed the idle connection (idle_session_timeout)";
  if (st == "25P03")
    return "the PostgreSQL server closed the connection: a transaction stayed idle longer than "
           "idle_in_transaction_session_timeout";
  if (st == "57P01")
    return "the PostgreSQL server ended the session (pg_terminate_backend, or the server is "
           "shutting down)";
  if (st == "57P02")
    return "the PostgreSQL server ended the session (another server process crashed)";
  std::string out =
      "the PostgreSQL server closed the connection (terminated, restarted, or an idle timeout)";
  // libpq's and libpqxx's texts for a dead connection say nothing more (and
  // "Could not obtain client encoding: not connected" misleads); anything
  // else (e.g. an SSL error, a network error) is kept.
  const std::string& m = f.message;
  const bool says_nothing =
      m.empty() || m.find("client encoding") != std::string::npos ||
      m.find("not connected") != std::string::npos ||
      m.find("server closed the connection unexpectedly") != std::string::npos ||
      m.find("connection closed") != std::string::npos ||
      m.find("no connection to the server") != std::string::npos ||
      m.find("Lost connection") != std::string::npos;
  if (!says_nothing) out += ": " + m;
  return out;
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
