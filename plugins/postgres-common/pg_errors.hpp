// What a libpqxx exception means for the plugin: a lost connection (drop it,
// report CONVEYOR_E_UNAVAILABLE), a transient conflict (retry), bad input, or
// a bug.
#ifndef CONVEYOR_PLUGINS_POSTGRES_PG_ERRORS_HPP
#define CONVEYOR_PLUGINS_POSTGRES_PG_ERRORS_HPP

#include <conveyor/storage_plugin.hpp>

#include <cstdint>
#include <string>

namespace conveyor::postgres {

enum class FailureKind {
  kConnectionLost,  // the connection is unusable: drop it; the outcome may be unknown
  kConflict,        // serialization failure or deadlock: the statement rolled back, retry
  kUnavailable,     // server busy, shutting down, out of resources: retry later
  kInvalid,         // the server refused the data (e.g. a value out of range)
  kInternal,        // anything else
};

struct Failure {
  FailureKind kind;
  std::string message;   // the server's or libpqxx's text, one line
  std::string sqlstate;  // the server's SQLSTATE, when it sent one
};

// Classifies the exception being handled; call only inside a catch block.
// connection_open: whether the connection still looks usable afterwards.
// Session-level errors are kConnectionLost: the server ended the session
// (57P01 terminated or shut down, 57P02 crash, 57P05 idle_session_timeout,
// 25P03 idle_in_transaction_session_timeout, class 08).
Failure classify_current_exception(bool connection_open);

// Whether the connection f happened on must be closed rather than reused: a
// lost connection, or a statement cancelled (57014: statement_timeout or a
// cancel request) on it.
bool discards_connection(const Failure& f) noexcept;
// Whether f says the server went away for every connection (a restart, a
// network cut), not just this one (a cancel, an idle timeout).
bool server_gone(const Failure& f) noexcept;

// What happened, in plain words, for the message of a failed call: for a
// lost connection or a cancelled statement, the cause as an operator would
// name it ("the statement was cancelled by statement_timeout (60000 ms,
// plugin option statement_timeout_ms)"), never libpqxx's "Could not obtain
// client encoding: not connected"; else f.message. statement_timeout_ms: the
// plugin's setting.
std::string explain(const Failure& f, uint32_t statement_timeout_ms);

conveyor_status status_of(FailureKind kind) noexcept;

// Thrown (as its base sdk::Error, CONVEYOR_E_UNAVAILABLE) when a call lost its
// connection, so a caller that must clean up after an unknown outcome can tell.
class ConnectionLost : public sdk::Error {
 public:
  explicit ConnectionLost(const std::string& message)
      : sdk::Error(CONVEYOR_E_UNAVAILABLE, message) {}
};

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_PG_ERRORS_HPP
