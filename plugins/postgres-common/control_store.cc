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
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
constexpr const char* kSharedSwap = "conveyor_shared_swap";
constexpr const char* kSharedAdd = "conveyor_shared_add";
constexpr const char* kSetKeySetting = "conveyor_set_key_setting";
constexpr const char* kDeleteKeySetting = "conveyor_delete_key_setting";
constexpr const char* kListKeySettings = "conveyor_list_key_settings";
constexpr const char* kSharedDelete = "conveyor_shared_delete";
constexpr const char* kSharedAdds = "conveyor_shared_adds";
}  // namespace stmt

// The most shared records one delete_shared_states statement reads (see
// kKeySettings' function): each read keeps its sequence locked until the
// commit, and the server's lock table is shared by every session.
constexpr int32_t kSharedDeletePage = 256;
// The most adds one transaction of add_shared_states applies (see
// kSharedAdds' procedure): each keeps two sequences and a key locked until
// the commit.
constexpr int32_t kSharedAddsPage = 128;

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

    // set_key_setting (ABI 1.5) as set_rate_limit: the upsert, the change
    // marker and the notification in one statement. $4 is the fields
    // (CONVEYOR_KEY_FIELD_*): a field not named goes in as NULL, so a new
    // row does not have it and an existing row keeps what it has.
    Statement{stmt::kSetKeySetting, R"sql(
WITH upserted AS (
  INSERT INTO {s}.key_settings AS ks (queue, target, key, rate, burst, scope, weight, updated_at)
  VALUES ($1::text, $2::integer, $3::text,
          CASE WHEN $4::integer & 1 <> 0 THEN $5::double precision END,
          CASE WHEN $4::integer & 1 <> 0 THEN $6::bigint END,
          CASE WHEN $4::integer & 1 <> 0 THEN $7::integer END,
          CASE WHEN $4::integer & 2 <> 0 THEN $8::integer END,
          $9::bigint)
  ON CONFLICT (queue, target, key) DO UPDATE
    SET rate = coalesce(excluded.rate, ks.rate), burst = coalesce(excluded.burst, ks.burst),
        scope = coalesce(excluded.scope, ks.scope), weight = coalesce(excluded.weight, ks.weight),
        updated_at = excluded.updated_at
  RETURNING queue
), bumped AS (
  UPDATE {s}.meta SET value = value + 1 WHERE key = 'change_marker' RETURNING value
)
SELECT pg_notify($10::text, $11::text) FROM upserted CROSS JOIN bumped)sql"},

    // delete_key_setting in one round trip: kKeySettings' function (true
    // when a field was cleared; the marker and the notification with it).
    Statement{stmt::kDeleteKeySetting, R"sql(
SELECT {s}.delete_key_setting($1::text, $2::integer, $3::text, $4::integer, $5::text, $6::text))sql"},

    // COLLATE "C" columns: queue and key in byte order; target ONE (0)
    // before EVERY (1).
    Statement{stmt::kListKeySettings, R"sql(
SELECT queue, target, key, rate, burst, scope, weight, updated_at
FROM {s}.key_settings ORDER BY queue, target, key)sql"},

    // One page of delete_shared_states: kKeySettings' function.
    Statement{stmt::kSharedDelete, R"sql(
SELECT deleted, resume_after FROM {s}.delete_shared_states($1::text, $2::text, $3::bytea,
                                                           $4::bigint, $5::bigint, $6::integer))sql"},

    // add_shared_states in one round trip: kSharedAdds' procedure; one row
    // of three arrays (version, value, added), in the order of the adds.
    Statement{stmt::kSharedAdds, R"sql(
CALL {s}.add_shared_states($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[],
                           $6::bigint[], $7::bigint[], $8::integer))sql"},
};

// Throws CONVEYOR_E_INVALID unless key can be stored in a text column (the
// adapter has checked its length).
void require_storable_key(std::string_view key, const char* op) {
  if (!is_storable_text(key))
    throw Error(CONVEYOR_E_INVALID,
                std::string(op) + ": key must be valid UTF-8 without NUL bytes");
}

// Throws CONVEYOR_E_INVALID for a fields mask or target the statements do
// not know (the adapter refuses them first).
void require_fields_and_target(uint32_t fields, int32_t target, std::string_view key,
                               const char* op) {
  if (fields == 0 || (fields & ~CONVEYOR_KEY_FIELDS_ALL) != 0)
    throw Error(CONVEYOR_E_INVALID, std::string(op) + ": fields is " + std::to_string(fields) +
                                        ", not a non-empty mask of CONVEYOR_KEY_FIELD_*");
  if (target != CONVEYOR_KEY_TARGET_ONE && target != CONVEYOR_KEY_TARGET_EVERY)
    throw Error(CONVEYOR_E_INVALID, std::string(op) + ": unknown target " + std::to_string(target));
  if (target == CONVEYOR_KEY_TARGET_EVERY && !key.empty())
    throw Error(CONVEYOR_E_INVALID,
                std::string(op) + ": target CONVEYOR_KEY_TARGET_EVERY takes an empty key");
}

// A bigint[] column ("{1,-2,3}") as numbers. Throws CONVEYOR_E_INTERNAL
// for NULL or anything else.
std::vector<int64_t> bigints_at(const pqxx::row& row, int col, const char* op) {
  const auto bad = [op](const std::string& what) {
    return Error(CONVEYOR_E_INTERNAL, std::string(op) + ": " + what);
  };
  if (row[col].is_null()) throw bad("an array is NULL");
  const std::string_view text = row[col].c_str();
  if (text.size() < 2 || text.front() != '{' || text.back() != '}')
    throw bad("not an array: " + std::string(text));
  std::vector<int64_t> out;
  std::string_view rest = text.substr(1, text.size() - 2);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item(rest.substr(0, comma));
    try {
      out.push_back(parse_int64(item.c_str()));
    } catch (const std::exception&) {
      throw bad("not a number in the array: " + item);
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

// "\x" and the bytes of s in hex: a bytea parameter in text form.
std::string bytea_hex(std::string_view s) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out = "\\x";
  out.reserve(2 + 2 * s.size());
  for (const char ch : s) {
    const auto b = static_cast<unsigned char>(ch);
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

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

// ABI 1.5. key_settings: set_key_setting's rows, one per (queue, target,
// key): a key's own settings (target 0, CONVEYOR_KEY_TARGET_ONE; the empty
// key is a key like any other) and every key's (target 1, _EVERY; the key
// empty). A field not stored is NULL: rate, burst and scope together
// (CONVEYOR_KEY_FIELD_RATE), weight (_WEIGHT); a row keeps one at least.
// COLLATE "C": listed in byte order.
//
// delete_key_setting: under the row's lock, so a set or delete of the same
// row running at once is wholly before or after it.
//
// delete_shared_states: a record (kSharedStateInPlace: a shared_keys row
// and its two sequences) is deleted under its key's exclusive lock, as a
// swap or an add changes it, its value read again under the lock: a swap or
// add before it left the value it is judged by, one after it waits for the
// commit and finds no row ((0, 0), as never written). The key's lock is
// only tried: a key being swapped or read is in use, and is left. Deletes
// run one at a time per schema (lock class "Swee", 0x53776565): only a
// delete drops sequences, so the one running may read a value before taking
// the key's lock (to pass over records in use without locking them) and
// never finds a sequence dropped under it. Each sequence read stays locked
// until the commit; p_page bounds how many one call reads (the caller goes
// on from resume_after).
const char* const kKeySettings = R"sql(
CREATE TABLE {s}.key_settings (
  queue      text             COLLATE "C" NOT NULL,
  target     integer          NOT NULL CHECK (target IN (0, 1)),
  key        text             COLLATE "C" NOT NULL,
  rate       double precision,
  burst      bigint,
  scope      integer,
  weight     integer,
  updated_at bigint           NOT NULL,
  PRIMARY KEY (queue, target, key),
  CHECK (target = 0 OR key = ''),
  CHECK ((rate IS NULL) = (burst IS NULL) AND (rate IS NULL) = (scope IS NULL)),
  CHECK (rate IS NOT NULL OR weight IS NOT NULL)
);

-- delete_key_setting (storage_plugin.h): clears the fields p_fields names
-- (CONVEYOR_KEY_FIELD_*), removing a row left with none. True when one of
-- them was stored: then the change marker advances and p_payload goes out
-- on p_channel, as set_rate_limit; false, nothing changed, otherwise.
CREATE FUNCTION {s}.delete_key_setting(p_queue text, p_target integer, p_key text,
                                       p_fields integer, p_channel text, p_payload text)
RETURNS boolean LANGUAGE plpgsql AS $fn$
DECLARE
  r {s}.key_settings;
  clear_rate boolean := p_fields & 1 <> 0;
  clear_weight boolean := p_fields & 2 <> 0;
BEGIN
  SELECT * INTO r FROM {s}.key_settings AS ks
  WHERE ks.queue = p_queue AND ks.target = p_target AND ks.key = p_key
  FOR UPDATE;
  IF NOT FOUND OR NOT ((clear_rate AND r.rate IS NOT NULL) OR
                       (clear_weight AND r.weight IS NOT NULL)) THEN
    RETURN false;
  END IF;
  IF (clear_rate OR r.rate IS NULL) AND (clear_weight OR r.weight IS NULL) THEN
    DELETE FROM {s}.key_settings AS ks
    WHERE ks.queue = p_queue AND ks.target = p_target AND ks.key = p_key;
  ELSE
    UPDATE {s}.key_settings AS ks
    SET rate = CASE WHEN clear_rate THEN NULL ELSE ks.rate END,
        burst = CASE WHEN clear_rate THEN NULL ELSE ks.burst END,
        scope = CASE WHEN clear_rate THEN NULL ELSE ks.scope END,
        weight = CASE WHEN clear_weight THEN NULL ELSE ks.weight END
    WHERE ks.queue = p_queue AND ks.target = p_target AND ks.key = p_key;
  END IF;
  UPDATE {s}.meta SET value = value + 1 WHERE key = 'change_marker';
  PERFORM pg_notify(p_channel, p_payload);
  RETURN true;
END
$fn$;

-- delete_shared_states (storage_plugin.h), one page: reads the keys from
-- p_start (the prefix, or its longest leading part that is text) on, after
-- p_after, in key order while they start with p_start, p_page at most.
-- Deletes those whose UTF-8 starts with p_prefix and whose value is below
-- p_below, p_limit at most. resume_after: the last key read when it
-- stopped before the end of the range, else NULL.
CREATE FUNCTION {s}.delete_shared_states(p_start text, p_after text, p_prefix bytea,
                                         p_below bigint, p_limit bigint, p_page integer,
                                         OUT deleted bigint, OUT resume_after text)
LANGUAGE plpgsql AS $fn$
DECLARE
  k {s}.shared_keys;
  n_read integer := 0;
  last_read text;
BEGIN
  deleted := 0;
  PERFORM pg_advisory_xact_lock(1400333669, hashtext('{s}'));
  -- A new snapshot after the lock: what the delete before this one
  -- deleted is gone.
  FOR k IN SELECT * FROM {s}.shared_keys AS sk
           WHERE sk.key >= p_start AND sk.key > p_after ORDER BY sk.key LOOP
    EXIT WHEN left(k.key, length(p_start)) <> p_start;
    IF deleted >= p_limit OR n_read >= p_page THEN
      resume_after := last_read;
      RETURN;
    END IF;
    n_read := n_read + 1;
    last_read := k.key;
    CONTINUE WHEN substring(convert_to(k.key, 'UTF8') FROM 1 FOR octet_length(p_prefix))
                  <> p_prefix;
    CONTINUE WHEN pg_sequence_last_value(k.value_seq) >= p_below;
    CONTINUE WHEN NOT pg_try_advisory_xact_lock(1399349618, hashtext('{s}' || k.key));
    -- Under the key's lock: no swap or add is halfway.
    CONTINUE WHEN pg_sequence_last_value(k.value_seq) >= p_below;
    DELETE FROM {s}.shared_keys AS sk WHERE sk.key = k.key;
    EXECUTE format('DROP SEQUENCE %s, %s', k.version_seq, k.value_seq);
    deleted := deleted + 1;
  END LOOP;
END
$fn$;
)sql";

// ABI 1.5. add_shared_states: add_shared_state (kSharedAdd's function,
// unchanged) on each key, every add in one CALL (one round trip). Each add
// is what add_shared_state would have done at that moment: an add that gets
// nothing leaves its key as it was and the others go on.
//
// The adds run in the order of their keys' lock numbers (the hash
// add_shared_state locks; keys whose hashes collide share a lock), not in
// the order given, and each key's lock is held until its transaction
// commits, as a lone add's is: two batches wanting some of the same locks
// take them in the same order, so neither waits for a lock the other holds
// while holding one it wants (no deadlock). A lone add, swap or read holds
// one lock at a time, and delete_shared_states only tries them.
//
// p_page adds at most per transaction (COMMIT between pages: the CALL must
// not be inside a transaction block). Every add keeps its key's lock and
// locks its two sequences until its transaction ends (a new key's two new
// sequences too), in the server's lock table that every session shares:
// 1,000 new keys in one transaction would hold some 5,000 locks, and a
// default server (max_locks_per_transaction 64) has run out of room ("out
// of shared memory") with two or three such batches at once; a page of 128
// holds 640 at most. A failure stops the call: the pages before it
// stay applied (the caller reads the records again).
const char* const kSharedAdds = R"sql(
CREATE PROCEDURE {s}.add_shared_states(p_keys text[], p_credit bigint[], p_low bigint[],
                                       p_high bigint[], p_unit bigint[], p_min bigint[],
                                       p_max bigint[], p_page integer,
                                       INOUT r_version bigint[] DEFAULT NULL,
                                       INOUT r_value bigint[] DEFAULT NULL,
                                       INOUT r_added bigint[] DEFAULT NULL)
LANGUAGE plpgsql AS $fn$
DECLARE
  n integer := coalesce(array_length(p_keys, 1), 0);
  ord integer[];
  a record;
  i integer;
  done integer := 0;
BEGIN
  r_version := array_fill(0::bigint, ARRAY[n]);
  r_value := array_fill(0::bigint, ARRAY[n]);
  r_added := array_fill(0::bigint, ARRAY[n]);
  SELECT array_agg(j ORDER BY hashtext('{s}' || p_keys[j]), j) INTO ord
  FROM generate_subscripts(p_keys, 1) AS j;
  WHILE done < n LOOP
    IF done > 0 THEN
      COMMIT;
    END IF;
    FOR m IN done + 1 .. least(done + p_page, n) LOOP
      i := ord[m];
      SELECT * INTO a FROM {s}.add_shared_state(p_keys[i], p_credit[i], p_low[i], p_high[i],
                                                p_unit[i], p_min[i], p_max[i]);
      r_version[i] := a.version;
      r_value[i] := a.value;
      r_added[i] := a.added;
    END LOOP;
    done := least(done + p_page, n);
  END LOOP;
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

void ControlStore::add_shared_states(std::span<const sdk::KeyedAdd> adds,
                                     std::span<sdk::SharedAddResult> out) {
  if (out.size() != adds.size())
    throw Error(CONVEYOR_E_INTERNAL, "add_shared_states: " + std::to_string(adds.size()) +
                                         " adds but room for " + std::to_string(out.size()) +
                                         " results");
  if (adds.empty()) return;
  const size_t n = adds.size();
  std::vector<std::string_view> keys;
  std::vector<int64_t> credit, low, high, unit, min_count, max_count;
  keys.reserve(n);
  for (auto* v : {&credit, &low, &high, &unit, &min_count, &max_count}) v->reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const sdk::KeyedAdd& a = adds[i];
    if (!is_storable_text(a.key))
      throw Error(CONVEYOR_E_INVALID, "add_shared_states: adds[" + std::to_string(i) +
                                          "]: key must be valid UTF-8 without NUL bytes");
    keys.push_back(a.key);
    credit.push_back(a.add.credit);
    low.push_back(a.add.low);
    high.push_back(a.add.high);
    unit.push_back(a.add.unit);
    min_count.push_back(int64_t{a.add.min_count});
    max_count.push_back(int64_t{a.add.max_count});
  }
  const std::string keys_text = text_array(keys), credit_text = bigint_array(credit),
                    low_text = bigint_array(low), high_text = bigint_array(high),
                    unit_text = bigint_array(unit), min_text = bigint_array(min_count),
                    max_text = bigint_array(max_count);
  std::vector<sdk::SharedAddResult> got(n);
  // Never repeated: adds that applied before the connection was lost would
  // apply twice.
  run_on_pool(pool_, "add_shared_states", Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(stmt::kSharedAdds, keys_text, credit_text, low_text,
                                      high_text, unit_text, min_text, max_text, kSharedAddsPage);
    if (r.size() != 1)
      throw Error(CONVEYOR_E_INTERNAL, "add_shared_states: the procedure returned " +
                                           std::to_string(r.size()) + " rows, not 1");
    std::array<std::vector<int64_t>, 3> columns;
    for (size_t col = 0; col < columns.size(); ++col) {
      columns[col] = bigints_at(r[0], static_cast<int>(col), "add_shared_states");
      if (columns[col].size() != n)
        throw Error(CONVEYOR_E_INTERNAL, "add_shared_states: the procedure returned " +
                                             std::to_string(columns[col].size()) + " results for " +
                                             std::to_string(n) + " adds");
    }
    for (size_t i = 0; i < n; ++i) {
      const int64_t added = columns[2][i];
      if (added < 0 || added > max_count[i])
        throw Error(CONVEYOR_E_INTERNAL, "add_shared_states: adds[" + std::to_string(i) +
                                             "]: the procedure added " + std::to_string(added) +
                                             " units");
      got[i] = sdk::SharedAddResult{columns[0][i], columns[1][i], static_cast<uint32_t>(added)};
    }
  });
  std::copy(got.begin(), got.end(), out.begin());
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

void ControlStore::set_key_setting(const sdk::KeySetting& setting, int64_t now_us) {
  require_queue(setting.queue, "set_key_setting");
  require_storable_key(setting.key, "set_key_setting");
  require_fields_and_target(setting.fields, setting.target, setting.key, "set_key_setting");
  const std::string payload = std::string(kLimitsPrefix) + setting.queue;
  // Repeated after a lost connection: the same fields again, the same row.
  run_on_pool(pool_, "set_key_setting", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    tx.exec_prepared(stmt::kSetKeySetting, setting.queue, setting.target, setting.key,
                     static_cast<int32_t>(setting.fields), shortest(setting.rate_per_sec),
                     int64_t{setting.burst}, setting.scope, static_cast<int64_t>(setting.weight),
                     now_us, channels_.control, payload);
  });
}

bool ControlStore::delete_key_setting(std::string_view queue, int32_t target, std::string_view key,
                                      uint32_t fields) {
  require_queue(queue, "delete_key_setting");
  require_storable_key(key, "delete_key_setting");
  require_fields_and_target(fields, target, key, "delete_key_setting");
  const std::string q(queue), k(key), payload = std::string(kLimitsPrefix) + q;
  bool cleared = false;
  // Never repeated: a delete that applied before the connection was lost
  // would then report that nothing was set.
  run_on_pool(pool_, "delete_key_setting", Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(stmt::kDeleteKeySetting, q, target, k,
                                      static_cast<int32_t>(fields), channels_.control, payload);
    if (r.size() != 1)
      throw Error(CONVEYOR_E_INTERNAL, "delete_key_setting: the function returned " +
                                           std::to_string(r.size()) + " rows, not 1");
    cleared = bool_at(r[0], 0);
  });
  return cleared;
}

void ControlStore::list_key_settings(const sdk::KeySettingSink& sink) {
  std::vector<sdk::KeySetting> rows;
  run_on_pool(pool_, "list_key_settings", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(stmt::kListKeySettings);
    rows.clear();
    for (const auto& row : r) {
      sdk::KeySetting k;
      k.queue = text_at(row, 0);
      k.target = int32_at(row, 1);
      k.key = text_at(row, 2);
      if (!row[3].is_null()) {
        const int64_t burst = int_at(row, 4);
        if (burst < 1 || burst > int64_t{UINT32_MAX})
          throw Error(CONVEYOR_E_INTERNAL, "list_key_settings: stored burst " +
                                               std::to_string(burst) + " is out of range");
        k.fields |= CONVEYOR_KEY_FIELD_RATE;
        k.rate_per_sec = double_at(row, 3);
        k.burst = static_cast<uint32_t>(burst);
        k.scope = int32_at(row, 5);
      }
      if (!row[6].is_null()) {
        const int32_t weight = int32_at(row, 6);
        if (weight < 1)
          throw Error(CONVEYOR_E_INTERNAL, "list_key_settings: stored weight " +
                                               std::to_string(weight) + " is out of range");
        k.fields |= CONVEYOR_KEY_FIELD_WEIGHT;
        k.weight = static_cast<uint32_t>(weight);
      }
      k.updated_at = int_at(row, 7);
      rows.push_back(std::move(k));
    }
  });
  for (const sdk::KeySetting& k : rows) sink(k.view());
}

uint32_t ControlStore::delete_shared_states(std::string_view prefix, int64_t value_below,
                                            uint32_t limit) {
  if (prefix.empty()) throw Error(CONVEYOR_E_INVALID, "delete_shared_states: prefix is empty");
  if (limit == 0) return 0;
  // Every record's key is text (swap_shared_state refuses others), so a key
  // that starts with prefix starts with prefix's longest leading part that
  // is text: all of it, or all but an unfinished last character (1 to 3
  // bytes). The keys from that part on are an index range; their UTF-8 is
  // compared with prefix byte for byte. No such part: no key starts with it.
  std::optional<std::string_view> start;
  for (size_t cut = 0; cut <= 3 && cut <= prefix.size() && !start; ++cut)
    if (is_storable_text(prefix.substr(0, prefix.size() - cut)))
      start = prefix.substr(0, prefix.size() - cut);
  if (!start) return 0;
  const std::string from(*start), bytes = bytea_hex(prefix);
  uint32_t deleted = 0;
  std::string after;  // no key is empty: every key is after ""
  while (deleted < limit) {
    int64_t n = 0;
    std::optional<std::string> resume_after;
    // Never repeated: a page that applied before the connection was lost
    // would then report fewer deleted.
    run_on_pool(pool_, "delete_shared_states", Retry::kNever, [&](pqxx::connection& c) {
      pqxx::nontransaction tx(c);
      pqxx::result r = tx.exec_prepared(stmt::kSharedDelete, from, after, bytes, value_below,
                                        int64_t{limit - deleted}, kSharedDeletePage);
      if (r.size() != 1)
        throw Error(CONVEYOR_E_INTERNAL, "delete_shared_states: the function returned " +
                                             std::to_string(r.size()) + " rows, not 1");
      n = int_at(r[0], 0);
      resume_after.reset();
      if (!r[0][1].is_null()) resume_after = text_at(r[0], 1);
    });
    if (n < 0 || n > int64_t{limit - deleted})
      throw Error(CONVEYOR_E_INTERNAL,
                  "delete_shared_states: the function deleted " + std::to_string(n) + " records");
    deleted += static_cast<uint32_t>(n);
    if (!resume_after) break;  // the range is read to its end
    after = std::move(*resume_after);
  }
  return deleted;
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
