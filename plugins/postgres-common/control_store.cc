#include "control_store.hpp"

#include "connection_pool.hpp"
#include "pg_rows.hpp"
#include "pg_run.hpp"
#include "pg_text.hpp"

#include <pqxx/nontransaction>
#include <pqxx/result>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <utility>

namespace conveyor::postgres {
namespace {

using sdk::Error;

namespace stmt {
constexpr const char* kSetPaused = "conveyor_set_paused";
constexpr const char* kListQueues = "conveyor_list_queues";
constexpr const char* kSetRateLimit = "conveyor_set_rate_limit";
constexpr const char* kDeleteRateLimit = "conveyor_delete_rate_limit";
constexpr const char* kListRateLimits = "conveyor_list_rate_limits";
constexpr const char* kChangeMarker = "conveyor_change_marker";
constexpr const char* kSharedRead = "conveyor_shared_read";
constexpr const char* kSharedSwap = "conveyor_shared_swap";
constexpr const char* kSharedAdd = "conveyor_shared_add";
}  // namespace stmt

constexpr std::array kStatements = {
    // Pause/resume, the change marker and the notification in one statement:
    // all or nothing, and the notification leaves when it commits.
    Statement{stmt::kSetPaused, R"sql(
WITH upserted AS (
  INSERT INTO {s}.queues (name, paused) VALUES ($1::text, $2::boolean)
  ON CONFLICT (name) DO UPDATE SET paused = excluded.paused
  RETURNING name
), bumped AS (
  UPDATE {s}.meta SET value = value + 1 WHERE key = 'change_marker' RETURNING value
)
SELECT pg_notify($3::text, $4::text) FROM upserted CROSS JOIN bumped)sql"},

    Statement{stmt::kListQueues, R"sql(
SELECT name, paused FROM {s}.queues ORDER BY name)sql"},

    Statement{stmt::kSetRateLimit, R"sql(
WITH upserted AS (
  INSERT INTO {s}.rate_limits (queue, rate, burst, updated_at, scope)
  VALUES ($1::text, $2::double precision, $3::bigint, $4::bigint, $7::integer)
  ON CONFLICT (queue) DO UPDATE
    SET rate = excluded.rate, burst = excluded.burst, updated_at = excluded.updated_at,
        scope = excluded.scope
  RETURNING queue
), bumped AS (
  UPDATE {s}.meta SET value = value + 1 WHERE key = 'change_marker' RETURNING value
)
SELECT pg_notify($5::text, $6::text) FROM upserted CROSS JOIN bumped)sql"},

    // One row when an override was deleted, none when there was none.
    Statement{stmt::kDeleteRateLimit, R"sql(
WITH deleted AS (
  DELETE FROM {s}.rate_limits WHERE queue = $1::text RETURNING queue
), bumped AS (
  UPDATE {s}.meta SET value = value + 1
  WHERE key = 'change_marker' AND EXISTS (SELECT 1 FROM deleted)
  RETURNING value
)
SELECT pg_notify($2::text, $3::text) FROM deleted CROSS JOIN bumped)sql"},

    Statement{stmt::kListRateLimits, R"sql(
SELECT queue, rate, burst, updated_at, scope FROM {s}.rate_limits ORDER BY queue)sql"},

    Statement{stmt::kChangeMarker, R"sql(
SELECT value FROM {s}.meta WHERE key = 'change_marker')sql"},

    // swap_shared_state, read (-1) or compare-and-set, in one round trip:
    // kSharedStateInPlace's function.
    Statement{stmt::kSharedSwap, R"sql(
SELECT version, value, applied FROM {s}.swap_shared_state($1::text, $2::bigint, $3::bigint))sql"},

    // add_shared_state in one round trip: kSharedAdd's function.
    Statement{stmt::kSharedAdd, R"sql(
SELECT version, value, added FROM {s}.add_shared_state($1::text, $2::bigint, $3::bigint,
                                                       $4::bigint, $5::bigint, $6::bigint,
                                                       $7::bigint))sql"},
};

}  // namespace

const char* const kControlTables = R"sql(
-- Every queue ever enqueued into or paused (list_queues reads only this).
CREATE TABLE {s}.queues (
  name   text    COLLATE "C" PRIMARY KEY,
  paused boolean NOT NULL DEFAULT false
);
CREATE TABLE {s}.rate_limits (
  queue      text             COLLATE "C" PRIMARY KEY,
  rate       double precision NOT NULL,
  burst      bigint           NOT NULL,
  updated_at bigint           NOT NULL
);
CREATE TABLE {s}.meta (
  key   text   PRIMARY KEY,
  value bigint NOT NULL
);
INSERT INTO {s}.meta (key, value) VALUES ('change_marker', 0);
)sql";

const char* const kControlTablesV12 = R"sql(
ALTER TABLE {s}.rate_limits ADD COLUMN scope integer NOT NULL DEFAULT 0;
-- swap_shared_state: key -> (version, value); a missing key is (0, 0).
CREATE TABLE {s}.shared_state (
  key     text   COLLATE "C" PRIMARY KEY,
  version bigint NOT NULL,
  value   bigint NOT NULL
);
)sql";

// Why sequences: a row updated on every take leaves a dead tuple per take,
// and a transaction held open anywhere on the server keeps them all (on
// postgres-queue, the only dead tuples left). A sequence is changed in place
// (setval is not transactional), so a swap leaves none. Each key has two,
// its version and its value, changed only under the key's advisory lock
// (exclusive for a swap, shared for a read), so a reader never sees one
// without the other. The version is written first: if a failure stops the
// swap between the two writes, the version moved on with the value as it
// was, and every cached record is stale (the swap reported an error, and
// took nothing). setval assigns the transaction an id, so the commit flushes
// the WAL: an applied swap is durable when the call returns.
const char* const kSharedStateInPlace = R"sql(
-- Every key ever written, with its two sequences (dropped with the table).
CREATE TABLE {s}.shared_keys (
  key         text     COLLATE "C" PRIMARY KEY,
  version_seq regclass NOT NULL,
  value_seq   regclass NOT NULL
);
CREATE SEQUENCE {s}.shared_key_ids;

-- Creates key's sequences holding (p_version, p_value). Callers hold the
-- key's lock, or are the migration.
CREATE FUNCTION {s}.shared_key_create(p_key text, p_version bigint, p_value bigint)
RETURNS {s}.shared_keys LANGUAGE plpgsql AS $fn$
DECLARE
  id text := nextval('{s}.shared_key_ids')::text;
  k {s}.shared_keys;
BEGIN
  EXECUTE format('CREATE SEQUENCE {s}.%I AS bigint MINVALUE 0 OWNED BY {s}.shared_keys.key',
                 'shared_version_' || id);
  EXECUTE format('CREATE SEQUENCE {s}.%I AS bigint MINVALUE -9223372036854775808 '
                 'OWNED BY {s}.shared_keys.key', 'shared_value_' || id);
  k := ROW(p_key, format('{s}.%I', 'shared_version_' || id)::regclass,
           format('{s}.%I', 'shared_value_' || id)::regclass);
  PERFORM setval(k.version_seq, p_version, true);
  PERFORM setval(k.value_seq, p_value, true);
  INSERT INTO {s}.shared_keys (key, version_seq, value_seq)
  VALUES (k.key, k.version_seq, k.value_seq);
  RETURN k;
END
$fn$;

-- swap_shared_state (storage_plugin.h): p_expected < 0 reads. The lock
-- class is "Shar"; the object the key's hash within this schema (keys that
-- collide only wait for each other).
CREATE FUNCTION {s}.swap_shared_state(p_key text, p_expected bigint, p_new bigint,
                                      OUT version bigint, OUT value bigint, OUT applied boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
  k {s}.shared_keys;
BEGIN
  applied := false;
  IF p_expected < 0 THEN
    PERFORM pg_advisory_xact_lock_shared(1399349618, hashtext('{s}' || p_key));
  ELSE
    PERFORM pg_advisory_xact_lock(1399349618, hashtext('{s}' || p_key));
  END IF;
  -- A new snapshot after the lock: a key created by the holder is seen.
  SELECT * INTO k FROM {s}.shared_keys AS sk WHERE sk.key = p_key;
  IF NOT FOUND THEN
    version := 0;
    value := 0;
    IF p_expected <> 0 THEN
      RETURN;
    END IF;
    k := {s}.shared_key_create(p_key, 0, 0);
  ELSE
    version := pg_sequence_last_value(k.version_seq);
    value := pg_sequence_last_value(k.value_seq);
  END IF;
  IF p_expected >= 0 AND version = p_expected THEN
    PERFORM setval(k.version_seq, p_expected + 1, true);
    PERFORM setval(k.value_seq, p_new, true);
    version := p_expected + 1;
    value := p_new;
    applied := true;
  END IF;
END
$fn$;

SELECT {s}.shared_key_create(key, version, value) FROM {s}.shared_state ORDER BY key;
DROP TABLE {s}.shared_state;
)sql";

// add_shared_state (storage_plugin.h, ABI 1.3) on kSharedStateInPlace's
// sequences, under the key's exclusive lock as a swap, in the header's
// order (nothing overflows for the inputs the SDK adapter lets through).
const char* const kSharedAdd = R"sql(
CREATE FUNCTION {s}.add_shared_state(p_key text, p_credit bigint, p_low bigint, p_high bigint,
                                     p_unit bigint, p_min bigint, p_max bigint,
                                     OUT version bigint, OUT value bigint, OUT added bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  k {s}.shared_keys;
  known boolean;
  base bigint;
BEGIN
  added := 0;
  PERFORM pg_advisory_xact_lock(1399349618, hashtext('{s}' || p_key));
  SELECT * INTO k FROM {s}.shared_keys AS sk WHERE sk.key = p_key;
  known := FOUND;
  IF known THEN
    version := pg_sequence_last_value(k.version_seq);
    value := pg_sequence_last_value(k.value_seq);
  ELSE
    version := 0;
    value := 0;
  END IF;
  IF value <= p_low THEN
    base := p_low;
  ELSE
    base := greatest(value - p_credit, p_low);
  END IF;
  IF base > p_high THEN
    RETURN;
  END IF;
  added := least(p_max, (p_high - base) / p_unit);
  IF added < p_min THEN
    added := 0;
    RETURN;
  END IF;
  IF NOT known THEN
    k := {s}.shared_key_create(p_key, 0, 0);
  END IF;
  PERFORM setval(k.version_seq, version + 1, true);
  PERFORM setval(k.value_seq, base + p_unit * added, true);
  version := version + 1;
  value := base + p_unit * added;
END
$fn$;
)sql";

const std::span<const Statement> kControlStatements = kStatements;

ControlStore::ControlStore(ConnectionPool& pool, const PgOptions& options)
    : pool_(pool), options_(options), channels_(channels_for_schema(options.schema)) {}

ControlStore::~ControlStore() = default;

void ControlStore::set_queue_paused(std::string_view queue, bool paused) {
  require_queue(queue, "set_queue_paused");
  const std::string q(queue), payload = std::string(kQueueStatePrefix) + q;
  run_on_pool(pool_, "set_queue_paused", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    tx.exec_prepared(stmt::kSetPaused, q, std::string(paused ? "true" : "false"), channels_.control,
                     payload);
  });
}

void ControlStore::list_queues(const sdk::QueueSink& sink) {
  std::vector<std::pair<std::string, bool>> rows;
  run_on_pool(pool_, "list_queues", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(stmt::kListQueues);
    rows.clear();
    for (const auto& row : r) rows.emplace_back(text_at(row, 0), bool_at(row, 1));
  });
  for (const auto& [name, paused] : rows) sink(name, paused);
}

std::vector<std::string> ControlStore::wakeable_queues() {
  std::vector<std::string> names;
  list_queues(sdk::QueueSink(
      [](void* ctx, conveyor_str q, int32_t paused) {
        if (paused == 0) static_cast<std::vector<std::string>*>(ctx)->emplace_back(sdk::view(q));
      },
      &names));
  return names;
}

void ControlStore::set_rate_limit(std::string_view queue, double rate_per_sec, uint32_t burst,
                                  int32_t scope, int64_t now_us) {
  require_queue(queue, "set_rate_limit");
  if (!(rate_per_sec > 0) || !std::isfinite(rate_per_sec))
    throw Error(CONVEYOR_E_INVALID, "set_rate_limit: rate_per_sec must be > 0 and finite");
  if (burst < 1) throw Error(CONVEYOR_E_INVALID, "set_rate_limit: burst must be >= 1");
  if (scope != CONVEYOR_SCOPE_PROCESS && scope != CONVEYOR_SCOPE_FLEET)
    throw Error(CONVEYOR_E_INVALID, "set_rate_limit: unknown scope " + std::to_string(scope));
  const std::string q(queue), payload = std::string(kLimitsPrefix) + q;
  run_on_pool(pool_, "set_rate_limit", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    tx.exec_prepared(stmt::kSetRateLimit, q, shortest(rate_per_sec), burst, now_us,
                     channels_.control, payload, scope);
  });
}

sdk::SharedAddResult ControlStore::add_shared_state(std::string_view key,
                                                    const sdk::SharedAdd& add) {
  if (!is_storable_text(key))
    throw Error(CONVEYOR_E_INVALID, "add_shared_state: key must be valid UTF-8 without NUL bytes");
  const std::string k(key);
  sdk::SharedAddResult rec;
  // Never repeated: an add that applied before the connection was lost would
  // apply twice.
  run_on_pool(pool_, "add_shared_state", Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(stmt::kSharedAdd, k, add.credit, add.low, add.high, add.unit,
                                      int64_t{add.min_count}, int64_t{add.max_count});
    if (r.size() != 1)
      throw Error(CONVEYOR_E_INTERNAL, "add_shared_state: the function returned " +
                                           std::to_string(r.size()) + " rows, not 1");
    const int64_t added = int_at(r[0], 2);
    if (added < 0 || added > int64_t{add.max_count})
      throw Error(CONVEYOR_E_INTERNAL,
                  "add_shared_state: the function added " + std::to_string(added) + " units");
    rec = sdk::SharedAddResult{int_at(r[0], 0), int_at(r[0], 1), static_cast<uint32_t>(added)};
  });
  return rec;
}

sdk::SharedRecord ControlStore::swap_shared_state(std::string_view key, int64_t expected_version,
                                                  int64_t new_value) {
  if (!is_storable_text(key))
    throw Error(CONVEYOR_E_INVALID, "swap_shared_state: key must be valid UTF-8 without NUL bytes");
  const std::string k(key);
  sdk::SharedRecord rec;
  // A read is repeated after a lost connection; a swap never is (one that
  // applied would then report that it did not).
  run_on_pool(
      pool_, "swap_shared_state",
      expected_version < 0 ? Retry::kAfterConnectionLoss : Retry::kNever, [&](pqxx::connection& c) {
        pqxx::nontransaction tx(c);
        pqxx::result r = tx.exec_prepared(stmt::kSharedSwap, k, expected_version, new_value);
        if (r.size() != 1)
          throw Error(CONVEYOR_E_INTERNAL, "swap_shared_state: the function returned " +
                                               std::to_string(r.size()) + " rows, not 1");
        rec = sdk::SharedRecord{int_at(r[0], 0), int_at(r[0], 1), bool_at(r[0], 2)};
      });
  return rec;
}

void ControlStore::delete_rate_limit(std::string_view queue) {
  require_queue(queue, "delete_rate_limit");
  const std::string q(queue), payload = std::string(kLimitsPrefix) + q;
  bool deleted = false;
  run_on_pool(pool_, "delete_rate_limit", Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    deleted = !tx.exec_prepared(stmt::kDeleteRateLimit, q, channels_.control, payload).empty();
  });
  if (!deleted)
    throw Error(CONVEYOR_E_NOT_FOUND,
                "delete_rate_limit: queue '" + q + "' has no rate-limit override");
}

void ControlStore::list_rate_limits(const sdk::RateLimitSink& sink) {
  std::vector<sdk::OwnedRateLimit> rows;
  run_on_pool(pool_, "list_rate_limits", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(stmt::kListRateLimits);
    rows.clear();
    for (const auto& row : r)
      rows.push_back(sdk::OwnedRateLimit{text_at(row, 0), double_at(row, 1), int_at(row, 2),
                                         int_at(row, 3), int32_at(row, 4)});
  });
  for (const sdk::OwnedRateLimit& r : rows) sink(r.view());
}

int64_t ControlStore::change_marker() {
  int64_t marker = 0;
  run_on_pool(pool_, "change_marker", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(stmt::kChangeMarker);
    marker = r.empty() ? 0 : int_at(r[0], 0);
  });
  return marker;
}

void ControlStore::wait_for_notification(int64_t timeout_us, const sdk::NotifySink& sink) {
  std::lock_guard lock(listener_mu_);
  if (!listener_)
    listener_ = std::make_unique<NotificationListener>(
        options_.conninfo, options_.target, pool_.session(), channels_,
        [this] { return wakeable_queues(); }, later_seen_);
  listener_->wait(timeout_us, sink);
}

}  // namespace conveyor::postgres
