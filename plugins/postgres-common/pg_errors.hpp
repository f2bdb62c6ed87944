// What a libpqxx exception means for the plugin: a lost connection (drop it,
// report CONVEYOR_E_UNAVAILABLE), a transient conflict (retry), bad input, or
// a bug.
#ifndef CONVEYOR_PLUGINS_POSTGRES_PG_ERRORS_HPP
#define CONVEYOR_PLUGINS_POSTGRES_PG_ERRORS_HPP

#include <conveyor/storage_plugin.hpp>

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
  std::string message;  // the server's or libpqxx's text, one line
};

// Classifies the exception being handled; call only inside a catch block.
// connection_open: whether the connection still looks usable afterwards.
Failure classify_current_exception(bool connection_open);

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
