// The postgres-queue plugin's tables (in their own schema) and the SQL of its
// prepared statements. The layout and why it is safe: queue_storage.cc.
#ifndef CONVEYOR_PLUGINS_POSTGRES_QUEUE_QUEUE_SCHEMA_HPP
#define CONVEYOR_PLUGINS_POSTGRES_QUEUE_QUEUE_SCHEMA_HPP

#include "pg_sql.hpp"

#include <pqxx/connection>

#include <cstdint>
#include <span>
#include <string>

namespace conveyor::pgqueue {

// The schema version this build creates and understands.
inline constexpr int kSchemaVersion = 10;

// Partitions of `tally` (schema 3), written in turn one second each.
inline constexpr uint32_t kTallySlots = 4;

// What a mark records (marks.what); the SQL spells these numbers out.
inline constexpr int kMarkMoved = 0;      // stage 1 or 2: the entry was copied forward
inline constexpr int kMarkRequeued = 1;   // stage 2: a new entry (or a later row) continues the job
inline constexpr int kMarkClaimed = 3;    // stage 1: claimed under lease_token
inline constexpr int kMarkCompleted = 4;  // stage 2
inline constexpr int kMarkFailed = 5;     // stage 2
inline constexpr int kMarkCancelled = 6;  // stage 1 (never claimed) or 2 (while running)
inline constexpr int kMarkPurged = 7;     // stage 3

// Creates or upgrades the schema (validated) to kSchemaVersion, then creates
// the ring's partitions when the schema is new. Throws
// sdk::Error(CONVEYOR_E_INVALID) when the schema is newer than the plugin,
// belongs to the canonical plugin, or was made with another slot count.
void migrate_schema(pqxx::connection& conn, const std::string& schema, uint32_t slots);

// Names of the prepared statements.
namespace stmt {
inline constexpr const char* kEnqueue = "q_enqueue";
inline constexpr const char* kPromote = "q_promote";
inline constexpr const char* kClaim = "q_claim";
inline constexpr const char* kProbe = "q_probe";
inline constexpr const char* kComplete = "q_complete";
inline constexpr const char* kExtend = "q_extend";
inline constexpr const char* kRelease = "q_release";
inline constexpr const char* kReleaseOrphans = "q_release_orphans";
inline constexpr const char* kFailRetry = "q_fail_retry";
inline constexpr const char* kFailFinal = "q_fail_final";
inline constexpr const char* kRescue = "q_rescue";
inline constexpr const char* kCancel = "q_cancel";
inline constexpr const char* kQueueStats = "q_queue_stats";
inline constexpr const char* kGetJob = "q_get_job";
inline constexpr const char* kPurge = "q_purge";
inline constexpr const char* kPurgeRetired = "q_purge_retired";
inline constexpr const char* kClaimKinds = "q_claim_kinds";
inline constexpr const char* kListJobs = "q_list_jobs";
inline constexpr const char* kRetryJobs = "q_retry_jobs";
inline constexpr const char* kDeleteJobs = "q_delete_jobs";
inline constexpr const char* kJobCounts = "q_job_counts";
// ABI 1.4
inline constexpr const char* kClaimKeys = "q_claim_keys";
inline constexpr const char* kClaimKeysKinds = "q_claim_keys_kinds";
inline constexpr const char* kListReadyKeys = "q_list_ready_keys";
inline constexpr const char* kListReadyKeysAfter = "q_list_ready_keys_after";
}  // namespace stmt

// Session settings on top of postgres::configure_session: no sequential
// scans, no JIT. A generic plan lives as long as its connection, and a slot that was
// empty (just truncated) when the plan was made is full soon after: planned
// as a sequential scan, it would be read whole by every call.
void configure_queue_session(pqxx::connection& conn);

// Defines every statement above and the control statements on conn.
void register_statements(pqxx::connection& conn, const std::string& schema);

// The SQL of one statement above (tests inspect its plans).
std::string statement_sql(const std::string& name, const std::string& schema);

// Table names of one slot's partitions, schema-qualified and quoted.
std::string ready_partition(const std::string& schema, uint32_t slot);
std::string marks_partition(const std::string& schema, uint32_t slot);
std::string tally_partition(const std::string& schema, uint32_t tally_slot);
// The SQL expression of the tally partition written now (the server's clock).
std::string tally_slot_sql();

}  // namespace conveyor::pgqueue

#endif  // CONVEYOR_PLUGINS_POSTGRES_QUEUE_QUEUE_SCHEMA_HPP
