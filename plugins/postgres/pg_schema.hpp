// The plugin's tables in their own schema: versioned migrations applied under
// an advisory lock (N processes starting at once migrate once), and the SQL of
// every prepared statement.
#ifndef CONVEYOR_PLUGINS_POSTGRES_PG_SCHEMA_HPP
#define CONVEYOR_PLUGINS_POSTGRES_PG_SCHEMA_HPP

#include <pqxx/connection>

#include <string>

namespace conveyor::postgres {

// The schema version this build creates and understands.
inline constexpr int kSchemaVersion = 9;

// Creates or upgrades the schema named schema (validated) to version (1..
// kSchemaVersion; tests build older schemas). Throws
// sdk::Error(CONVEYOR_E_INVALID) naming both versions when the schema is
// newer; libpqxx exceptions otherwise.
void migrate_schema(pqxx::connection& conn, const std::string& schema,
                    int version = kSchemaVersion);

// Names of the prepared statements (register_statements defines them).
namespace stmt {
inline constexpr const char* kEnqueue = "conveyor_enqueue";
inline constexpr const char* kClaim = "conveyor_claim";
inline constexpr const char* kComplete = "conveyor_complete";
inline constexpr const char* kExtend = "conveyor_extend";
inline constexpr const char* kRelease = "conveyor_release";
inline constexpr const char* kReleaseOrphans = "conveyor_release_orphans";
inline constexpr const char* kFailRetry = "conveyor_fail_retry";
inline constexpr const char* kFailFinal = "conveyor_fail_final";
inline constexpr const char* kRescue = "conveyor_rescue";
inline constexpr const char* kCancel = "conveyor_cancel";
inline constexpr const char* kQueueStats = "conveyor_queue_stats";
inline constexpr const char* kGetJob = "conveyor_get_job";
inline constexpr const char* kPurge = "conveyor_purge";
// ABI 1.1
inline constexpr const char* kRetryJobs = "conveyor_retry_jobs";
inline constexpr const char* kDeleteJobs = "conveyor_delete_jobs";
inline constexpr const char* kClaimKinds = "conveyor_claim_kinds";
inline constexpr const char* kListAvailable = "conveyor_list_available";
inline constexpr const char* kListRunning = "conveyor_list_running";
inline constexpr const char* kListFinal = "conveyor_list_final";
inline constexpr const char* kListFinalAnyKind = "conveyor_list_final_any_kind";
inline constexpr const char* kJobCounts = "conveyor_job_counts";
inline constexpr const char* kCompactCounts = "conveyor_compact_counts";
inline constexpr const char* kRescueReporting = "conveyor_rescue_reporting";
// ABI 1.4
inline constexpr const char* kClaimKeys = "conveyor_claim_keys";
inline constexpr const char* kClaimKeysKinds = "conveyor_claim_keys_kinds";
inline constexpr const char* kListReadyKeys = "conveyor_list_ready_keys";
inline constexpr const char* kListReadyKeysAfter = "conveyor_list_ready_keys_after";
}  // namespace stmt

// Defines every statement above and the control statements
// (control_store.hpp) on conn, for the tables of schema. libpqxx prepares
// each on the server at its first use on that connection.
void register_statements(pqxx::connection& conn, const std::string& schema);

// The SQL of one statement above for schema (tests inspect its plans).
// Throws std::out_of_range for an unknown name.
std::string statement_sql(const std::string& name, const std::string& schema);

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_PG_SCHEMA_HPP
