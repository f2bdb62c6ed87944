// Opening the plugin, migrating its schema, and the C ABI entry point. The
// operations live in one file per concern (enqueue.cc, claim.cc,
// job_outcomes.cc, job_queries.cc, job_admin.cc, queue_operations.cc,
// key_settings.cc, shared_state.cc, notifications.cc).
#include "sqlite_storage.hpp"

#include <utility>

namespace conveyor::sqlite {

SqliteStorage::SqliteStorage(Config config) : db_(std::move(config)) {}
SqliteStorage::~SqliteStorage() = default;

std::unique_ptr<SqliteStorage> SqliteStorage::open(const sdk::Options& options) {
  Config cfg = parse_config(options);
  std::unique_ptr<SqliteStorage> s(new SqliteStorage(std::move(cfg)));
  s->db_.open();
  return s;
}

void SqliteStorage::migrate() {
  db_.write_txn("migrate", [&](Connection& c) { migrate_schema(c, db_.path()); });
}

}  // namespace conveyor::sqlite

CONVEYOR_EXPORT_STORAGE_PLUGIN(conveyor::sqlite::SqliteStorage, "sqlite", "0.1.0",
                               CONVEYOR_KIND_CANONICAL,
                               CONVEYOR_CAP_DURABLE | CONVEYOR_CAP_MULTI_PROCESS)
