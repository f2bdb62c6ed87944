// The database schema: its versions, the steps between them, and the
// migration that brings a database to this build's version.
#ifndef CONVEYOR_PLUGINS_SQLITE_SCHEMA_HPP
#define CONVEYOR_PLUGINS_SQLITE_SCHEMA_HPP

#include <span>
#include <string>

namespace conveyor::sqlite {

class Connection;

// The schema version this build creates and understands (PRAGMA user_version).
inline constexpr int kSchemaVersion = 7;

// A queue's rows are stored in blocks of 2^kBlockBits places (schema step
// 3 -> 4 spells the same shift).
inline constexpr int kBlockBits = 20;

// The schema's steps: step i upgrades version i to i + 1 (for tests that
// build a database as an older plugin left it).
std::span<const char* const> schema_steps();

// Brings the database on c (inside a write transaction) to kSchemaVersion.
// Refuses a newer or invalid version, and a database Conveyor did not create.
void migrate_schema(Connection& c, const std::string& path);

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_SCHEMA_HPP
