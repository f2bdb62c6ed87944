// The "postgres" storage plugin (canonical kind) on libpqxx 6.4.
//
// [storage.options]
//   dsn                (required) a libpq connection string, URI
//                      ("postgresql://user:pw@host:5432/db?sslmode=...") or
//                      key=value ("host=... dbname=..."). Settings it leaves
//                      out are added: connect_timeout (connect_timeout_s),
//                      client_encoding=UTF8, fallback_application_name=conveyor,
//                      TCP keepalives (idle 30 s, interval 10 s, count 3).
//   schema             ("conveyor") the schema holding the plugin's tables:
//                      [a-z_][a-z0-9_]{0,62}, not "pg_*". Several deployments
//                      can share a database under different schemas.
//   pool_size          (8, 1..100) the most connections one process opens for
//                      storage calls; one more is used for LISTEN by `serve`.
//                      Connections are opened only as concurrent calls need them.
//   connect_timeout_s  (5, 1..3600) how long a connection attempt may take (an
//                      unreachable server fails fast with the reason), and how
//                      long a call waits for a pooled connection.
// Unknown keys are CONVEYOR_E_INVALID.
//
// Design:
//   * Tables live in their own schema, created and upgraded by versioned
//     migrations under an advisory lock (pg_schema.cc).
//   * Every statement is prepared and takes its values as bound parameters;
//     only the validated, quoted schema name is part of the SQL text. The
//     server plans each once (generic plans, see configure_session), so
//     statistics made stale by a drain cannot turn a claim or a completion
//     into a table scan. Needs PostgreSQL 12 or newer.
//   * claim is one statement: a CTE selects the queue's ready rows in
//     (priority, run_at, id) order with FOR UPDATE SKIP LOCKED, limited to the
//     batch, and the UPDATE sets the lease. A partial index holds only ready
//     rows. complete, extend_leases and release are one statement per batch.
//   * Times compared for eligibility are the host's now_us, never now() on
//     the server. Times are bigint microseconds since the Unix epoch.
//   * enqueue sends one NOTIFY per queue of the batch in its transaction;
//     overrides and pause/resume notify a control channel. `serve` keeps one
//     LISTEN connection (notification_listener.cc); polling stays the fallback.
//   * A lost connection is CONVEYOR_E_UNAVAILABLE, the connection is dropped
//     and new ones are opened with backoff (connection_pool.cc). Calls whose
//     repetition is harmless are repeated once on a fresh connection; a claim
//     whose reply was lost gives its jobs back (they carry its unique token).
//   * Callbacks run after the statement committed and after the connection
//     went back to the pool, from copies of the rows.
#include "postgres_storage.hpp"

#include "connection_pool.hpp"
#include "notification_listener.hpp"
#include "pg_errors.hpp"
#include "pg_schema.hpp"
#include "pg_text.hpp"

#include <unistd.h>
#include <pqxx/nontransaction>
#include <pqxx/result>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <optional>
#include <thread>
#include <utility>

namespace conveyor::postgres {
namespace {

using sdk::Error;

constexpr const char* kLeaseExpiredError = "lease expired: worker presumed dead";
// Serialization failures and deadlocks are retried this many times in all.
constexpr int kMaxConflictAttempts = 5;

// A job copied out of a result row; the callback sees views into it.
struct OwnedJob {
  int64_t id = 0;
  int32_t state = 0;
  std::string queue;
  std::string kind;
  std::string payload;
  int32_t priority = 0;
  int32_t attempt = 0;
  int32_t max_attempts = 0;
  int64_t run_at = 0;
  int64_t created_at = 0;
  int64_t finalized_at = 0;
  int64_t lease_token = 0;
  int64_t lease_expires = 0;
  std::string last_error;

  conveyor_job view() const {
    conveyor_job j{};
    j.struct_size = sizeof(conveyor_job);
    j.state = state;
    j.id = id;
    j.queue = sdk::str(queue);
    j.kind = sdk::str(kind);
    j.payload = sdk::str(payload);
    j.priority = priority;
    j.attempt = attempt;
    j.max_attempts = max_attempts;
    j.reserved0 = 0;
    j.run_at_us = run_at;
    j.created_at_us = created_at;
    j.finalized_at_us = finalized_at;
    j.lease_token = lease_token;
    j.lease_expires_us = lease_expires;
    j.last_error = sdk::str(last_error);
    return j;
  }
};

int64_t int_at(const pqxx::row& row, pqxx::row::size_type i) { return parse_int64(row[i].c_str()); }
int32_t int32_at(const pqxx::row& row, pqxx::row::size_type i) {
  int64_t v = int_at(row, i);
  if (v < INT32_MIN || v > INT32_MAX)
    throw std::runtime_error("integer out of range from the server");
  return static_cast<int32_t>(v);
}
std::string text_at(const pqxx::row& row, pqxx::row::size_type i) {
  return std::string(row[i].c_str(), row[i].size());
}
bool bool_at(const pqxx::row& row, pqxx::row::size_type i) { return row[i].c_str()[0] == 't'; }
double double_at(const pqxx::row& row, pqxx::row::size_type i) {
  std::string_view s(row[i].c_str(), row[i].size());
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size())
    throw std::runtime_error("expected a number from the server, got '" + std::string(s) + "'");
  return v;
}

std::string shortest(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

void require_queue(std::string_view queue, const char* op) {
  if (queue.empty()) throw Error(CONVEYOR_E_INVALID, std::string(op) + ": queue name is empty");
  if (!is_storable_text(queue))
    throw Error(CONVEYOR_E_INVALID,
                std::string(op) + ": queue name is not valid UTF-8 or contains a NUL byte");
}

int64_t wall_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string claimer_identity() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return std::string(host[0] != '\0' ? host : "localhost") + ":" + std::to_string(getpid());
}

}  // namespace

PostgresStorage::PostgresStorage(PgOptions options)
    : options_(std::move(options)),
      claimer_(claimer_identity()),
      channels_(std::make_unique<NotifyChannels>(channels_for_schema(options_.schema))) {
  const std::string schema = options_.schema;
  pool_ = std::make_unique<ConnectionPool>(options_.conninfo, options_.target, options_.pool_size,
                                           std::chrono::seconds(options_.connect_timeout_s),
                                           [schema](pqxx::connection& c) {
                                             configure_session(c);
                                             register_statements(c, schema);
                                           });
}

PostgresStorage::~PostgresStorage() {
  listener_.reset();
  pool_.reset();
}

std::unique_ptr<PostgresStorage> PostgresStorage::open(const sdk::Options& options) {
  std::unique_ptr<PostgresStorage> s(new PostgresStorage(parse_options(options)));
  // Connect now: a server that cannot be reached fails open, with the reason.
  s->pool_->acquire();
  return s;
}

template <typename Fn>
void PostgresStorage::run(const char* op, Retry retry, Fn&& fn) {
  for (int attempt = 1;; ++attempt) {
    std::optional<ConnectionPool::Lease> lease;
    try {
      lease.emplace(pool_->acquire());
    } catch (const Error& e) {
      throw Error(e.code(), std::string(op) + ": " + e.what());
    }
    try {
      fn(lease->conn());
      return;
    } catch (const Error&) {
      throw;
    } catch (...) {
      const Failure f = classify_current_exception(lease->conn().is_open());
      if (f.kind == FailureKind::kConnectionLost) {
        lease->discard();
        if (retry == Retry::kAfterConnectionLoss && attempt == 1) continue;
        throw ConnectionLost(std::string(op) + ": lost the connection to PostgreSQL at " +
                             pool_->target() + ": " + f.message +
                             " (the call may or may not have taken effect)");
      }
      if (f.kind == FailureKind::kConflict && attempt < kMaxConflictAttempts) {
        lease.reset();
        std::this_thread::sleep_for(std::chrono::milliseconds(1 << attempt));
        continue;
      }
      throw Error(status_of(f.kind),
                  std::string(op) + " on PostgreSQL at " + pool_->target() + ": " + f.message);
    }
  }
}

void PostgresStorage::migrate() {
  run("migrate", Retry::kAfterConnectionLoss,
      [&](pqxx::connection& c) { migrate_schema(c, options_.schema); });
}

void PostgresStorage::enqueue(std::span<const conveyor_new_job> jobs, std::span<int64_t> out_ids) {
  for (size_t i = 0; i < jobs.size(); ++i) {
    const conveyor_new_job& j = jobs[i];
    const std::string where = "enqueue: job " + std::to_string(i) + ": ";
    if ((j.payload.data == nullptr && j.payload.len != 0) ||
        (j.queue.data == nullptr && j.queue.len != 0) ||
        (j.kind.data == nullptr && j.kind.len != 0))
      throw Error(CONVEYOR_E_INVALID, where + "NULL string with non-zero length");
    if (sdk::view(j.queue).empty()) throw Error(CONVEYOR_E_INVALID, where + "queue is empty");
    if (sdk::view(j.kind).empty()) throw Error(CONVEYOR_E_INVALID, where + "kind is empty");
    if (!is_storable_text(sdk::view(j.queue)) || !is_storable_text(sdk::view(j.kind)))
      throw Error(CONVEYOR_E_INVALID,
                  where + "queue and kind must be valid UTF-8 without NUL bytes");
    if (j.max_attempts < 1)
      throw Error(CONVEYOR_E_INVALID,
                  where + "max_attempts must be >= 1, got " + std::to_string(j.max_attempts));
    if (j.payload.len > (size_t{1} << 29))
      throw Error(CONVEYOR_E_INVALID, where + "payload larger than 512 MiB");
  }
  std::vector<std::string_view> queues, kinds;
  std::vector<std::string> payload_hex;
  std::vector<int32_t> priorities, max_attempts;
  std::vector<int64_t> run_ats;
  queues.reserve(jobs.size());
  kinds.reserve(jobs.size());
  payload_hex.reserve(jobs.size());
  for (const conveyor_new_job& j : jobs) {
    queues.push_back(sdk::view(j.queue));
    kinds.push_back(sdk::view(j.kind));
    payload_hex.push_back(hex_encode(sdk::view(j.payload)));
    priorities.push_back(j.priority);
    max_attempts.push_back(j.max_attempts);
    run_ats.push_back(j.run_at_us);
  }
  // created_at is the plugin's clock: enqueue has no now_us (as for sqlite).
  const int64_t created = wall_clock_us();
  // Distinct queues, sorted so concurrent enqueues register them in one order.
  std::vector<std::string_view> distinct = queues;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());

  std::vector<std::string_view> hex_views(payload_hex.begin(), payload_hex.end());
  const std::string queues_text = text_array(queues), kinds_text = text_array(kinds),
                    payloads_text = text_array(hex_views), priorities_text = int_array(priorities),
                    attempts_text = int_array(max_attempts), run_at_text = bigint_array(run_ats),
                    distinct_text = text_array(distinct);
  payload_hex.clear();
  hex_views.clear();

  std::vector<int64_t> ids;
  run("enqueue", Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r =
        tx.exec_prepared(stmt::kEnqueue, queues_text, kinds_text, payloads_text, priorities_text,
                         attempts_text, run_at_text, created, distinct_text, channels_->jobs);
    ids.clear();
    ids.reserve(r.size());
    for (const auto& row : r) ids.push_back(int_at(row, 0));
  });
  if (ids.size() != jobs.size())
    throw Error(CONVEYOR_E_INTERNAL, "enqueue: the server returned " + std::to_string(ids.size()) +
                                         " ids for " + std::to_string(jobs.size()) + " jobs");
  // Ids come from one sequence in insertion (= batch) order.
  std::sort(ids.begin(), ids.end());
  std::copy(ids.begin(), ids.end(), out_ids.begin());
}

uint32_t PostgresStorage::claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token,
                                int64_t now_us, int64_t lease_expires_us,
                                const sdk::JobSink& sink) {
  require_queue(queue, "claim");
  if (max_jobs == 0) return 0;
  const std::string q(queue);
  std::vector<OwnedJob> claimed;
  try {
    run("claim", Retry::kNever, [&](pqxx::connection& c) {
      pqxx::nontransaction tx(c);
      pqxx::result r = tx.exec_prepared(stmt::kClaim, q, now_us, max_jobs, lease_token,
                                        lease_expires_us, claimer_);
      claimed.clear();
      claimed.reserve(r.size());
      for (const auto& row : r) {
        OwnedJob& j = claimed.emplace_back();
        j.id = int_at(row, 0);
        j.kind = text_at(row, 1);
        j.payload = bytea_from_text(row[2].c_str());
        j.priority = int32_at(row, 3);
        j.attempt = int32_at(row, 4);
        j.max_attempts = int32_at(row, 5);
        j.run_at = int_at(row, 6);
        j.created_at = int_at(row, 7);
        j.last_error = text_at(row, 8);
      }
    });
  } catch (const ConnectionLost&) {
    release_orphans(lease_token, lease_expires_us);
    throw;
  }
  // RETURNING does not promise an order: report in claim order.
  std::sort(claimed.begin(), claimed.end(), [](const OwnedJob& a, const OwnedJob& b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.run_at != b.run_at) return a.run_at < b.run_at;
    return a.id < b.id;
  });
  for (OwnedJob& j : claimed) {
    j.state = CONVEYOR_JOB_RUNNING;
    j.queue = q;
    j.lease_token = lease_token;
    j.lease_expires = lease_expires_us;
    conveyor_job v = j.view();
    sink(v);
  }
  return static_cast<uint32_t>(claimed.size());
}

void PostgresStorage::release_orphans(int64_t lease_token, int64_t lease_expires_us) noexcept {
  try {
    run("claim: giving back a claim whose reply was lost", Retry::kNever, [&](pqxx::connection& c) {
      pqxx::nontransaction tx(c);
      tx.exec_prepared(stmt::kReleaseOrphans, lease_token, lease_expires_us);
    });
  } catch (...) {
    // The server is still away: the lease expires and rescue_expired makes
    // the jobs available again.
  }
}

void PostgresStorage::lease_batch(const char* op, const char* statement,
                                  std::span<const conveyor_lease> leases, int64_t value,
                                  std::span<conveyor_status> results) {
  // Sorted by id: every batch statement locks its rows in id order.
  std::vector<std::pair<int64_t, int64_t>> sorted;
  sorted.reserve(leases.size());
  for (const conveyor_lease& l : leases) sorted.emplace_back(l.job_id, l.lease_token);
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> ids, tokens;
  ids.reserve(sorted.size());
  tokens.reserve(sorted.size());
  for (const auto& [id, token] : sorted) {
    ids.push_back(id);
    tokens.push_back(token);
  }
  const std::string ids_text = bigint_array(ids), tokens_text = bigint_array(tokens);
  std::vector<std::pair<int64_t, int64_t>> current;  // (id, token) the statement applied to
  run(op, Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(statement, value, ids_text, tokens_text);
    current.clear();
    current.reserve(r.size());
    for (const auto& row : r) current.emplace_back(int_at(row, 0), int_at(row, 1));
  });
  std::sort(current.begin(), current.end());
  for (size_t i = 0; i < leases.size(); ++i)
    results[i] = std::binary_search(current.begin(), current.end(),
                                    std::pair(leases[i].job_id, leases[i].lease_token))
                     ? CONVEYOR_OK
                     : CONVEYOR_E_LEASE_LOST;
}

void PostgresStorage::complete(std::span<const conveyor_lease> leases, int64_t now_us,
                               std::span<conveyor_status> results) {
  lease_batch("complete", stmt::kComplete, leases, now_us, results);
}

void PostgresStorage::extend_leases(std::span<const conveyor_lease> leases,
                                    int64_t lease_expires_us, std::span<conveyor_status> results) {
  lease_batch("extend_leases", stmt::kExtend, leases, lease_expires_us, results);
}

void PostgresStorage::release(std::span<const conveyor_lease> leases, int64_t now_us,
                              std::span<conveyor_status> results) {
  lease_batch("release", stmt::kRelease, leases, now_us, results);
}

void PostgresStorage::fail(conveyor_lease lease, std::string_view error_text, int64_t retry_at_us,
                           int64_t now_us) {
  const bool retry = retry_at_us >= 0;
  const std::string text = sanitize_text(error_text);
  pqxx::result::size_type changed = 0;
  run("fail", Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    changed = tx.exec_prepared(retry ? stmt::kFailRetry : stmt::kFailFinal,
                               retry ? retry_at_us : now_us, text, lease.job_id, lease.lease_token)
                  .affected_rows();
  });
  if (changed == 0)
    throw Error(CONVEYOR_E_LEASE_LOST, "fail: job " + std::to_string(lease.job_id) +
                                           " is not running under lease token " +
                                           std::to_string(lease.lease_token));
}

uint32_t PostgresStorage::rescue_expired(int64_t now_us, uint32_t max_jobs) {
  if (max_jobs == 0) return 0;
  pqxx::result::size_type changed = 0;
  run("rescue_expired", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    changed = tx.exec_prepared(stmt::kRescue, now_us, std::string(kLeaseExpiredError), max_jobs)
                  .affected_rows();
  });
  return static_cast<uint32_t>(changed);
}

void PostgresStorage::cancel(int64_t job_id, int64_t now_us) {
  pqxx::result::size_type changed = 0;
  run("cancel", Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    changed = tx.exec_prepared(stmt::kCancel, now_us, job_id).affected_rows();
  });
  if (changed == 0)
    throw Error(CONVEYOR_E_NOT_FOUND,
                "cancel: job " + std::to_string(job_id) + " does not exist or is already final");
}

void PostgresStorage::set_queue_paused(std::string_view queue, bool paused, int64_t /*now_us*/) {
  require_queue(queue, "set_queue_paused");
  const std::string q(queue), payload = std::string(kQueueStatePrefix) + q;
  run("set_queue_paused", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    tx.exec_prepared(stmt::kSetPaused, q, std::string(paused ? "true" : "false"),
                     channels_->control, payload);
  });
}

void PostgresStorage::queue_stats(int64_t now_us, const sdk::QueueStatsSink& sink) {
  struct Row {
    std::string name;
    bool paused;
    int64_t counts[6];
  };
  std::vector<Row> rows;
  run("queue_stats", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(stmt::kQueueStats, now_us);
    rows.clear();
    for (const auto& row : r) {
      Row& out = rows.emplace_back();
      out.name = text_at(row, 0);
      out.paused = bool_at(row, 1);
      for (int i = 0; i < 6; ++i) out.counts[i] = int_at(row, 2 + i);
    }
  });
  for (const Row& r : rows) {
    conveyor_queue_stats s{};
    s.struct_size = sizeof(conveyor_queue_stats);
    s.paused = r.paused ? 1 : 0;
    s.queue = sdk::str(r.name);
    s.pending = r.counts[0];
    s.scheduled = r.counts[1];
    s.running = r.counts[2];
    s.completed = r.counts[3];
    s.failed = r.counts[4];
    s.cancelled = r.counts[5];
    sink(s);
  }
}

void PostgresStorage::list_queues(const sdk::QueueSink& sink) {
  std::vector<std::pair<std::string, bool>> rows;
  run("list_queues", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(stmt::kListQueues);
    rows.clear();
    for (const auto& row : r) rows.emplace_back(text_at(row, 0), bool_at(row, 1));
  });
  for (const auto& [name, paused] : rows) sink(name, paused);
}

std::vector<std::string> PostgresStorage::wakeable_queues() {
  std::vector<std::string> names;
  list_queues(sdk::QueueSink(
      [](void* ctx, conveyor_str q, int32_t paused) {
        if (paused == 0) static_cast<std::vector<std::string>*>(ctx)->emplace_back(sdk::view(q));
      },
      &names));
  return names;
}

void PostgresStorage::get_job(int64_t job_id, int64_t now_us, const sdk::JobSink& sink) {
  bool found = false;
  OwnedJob j;
  run("get_job", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(stmt::kGetJob, job_id);
    found = !r.empty();
    if (!found) return;
    const pqxx::row row = r[0];
    j.id = int_at(row, 0);
    j.queue = text_at(row, 1);
    j.kind = text_at(row, 2);
    j.payload = bytea_from_text(row[3].c_str());
    j.priority = int32_at(row, 4);
    j.state = int32_at(row, 5);
    j.attempt = int32_at(row, 6);
    j.max_attempts = int32_at(row, 7);
    j.run_at = int_at(row, 8);
    j.created_at = int_at(row, 9);
    j.finalized_at = int_at(row, 10);
    j.lease_token = int_at(row, 11);
    j.lease_expires = int_at(row, 12);
    j.last_error = text_at(row, 13);
  });
  if (!found)
    throw Error(CONVEYOR_E_NOT_FOUND, "get_job: job " + std::to_string(job_id) + " not found");
  if (j.state == CONVEYOR_JOB_AVAILABLE && j.run_at > now_us) j.state = CONVEYOR_JOB_SCHEDULED;
  if (j.state != CONVEYOR_JOB_RUNNING) {
    j.lease_token = 0;
    j.lease_expires = 0;
  }
  conveyor_job v = j.view();
  sink(v);
}

uint64_t PostgresStorage::purge_finished(int64_t finalized_before_us, uint32_t max_jobs) {
  if (max_jobs == 0) return 0;
  pqxx::result::size_type deleted = 0;
  run("purge_finished", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    deleted = tx.exec_prepared(stmt::kPurge, finalized_before_us, max_jobs).affected_rows();
  });
  return static_cast<uint64_t>(deleted);
}

void PostgresStorage::set_rate_limit(std::string_view queue, double rate_per_sec, uint32_t burst,
                                     int64_t now_us) {
  require_queue(queue, "set_rate_limit");
  if (!(rate_per_sec > 0) || !std::isfinite(rate_per_sec))
    throw Error(CONVEYOR_E_INVALID, "set_rate_limit: rate_per_sec must be > 0 and finite");
  if (burst < 1) throw Error(CONVEYOR_E_INVALID, "set_rate_limit: burst must be >= 1");
  const std::string q(queue), payload = std::string(kLimitsPrefix) + q;
  run("set_rate_limit", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    tx.exec_prepared(stmt::kSetRateLimit, q, shortest(rate_per_sec), burst, now_us,
                     channels_->control, payload);
  });
}

void PostgresStorage::delete_rate_limit(std::string_view queue) {
  require_queue(queue, "delete_rate_limit");
  const std::string q(queue), payload = std::string(kLimitsPrefix) + q;
  bool deleted = false;
  run("delete_rate_limit", Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    deleted = !tx.exec_prepared(stmt::kDeleteRateLimit, q, channels_->control, payload).empty();
  });
  if (!deleted)
    throw Error(CONVEYOR_E_NOT_FOUND,
                "delete_rate_limit: queue '" + q + "' has no rate-limit override");
}

void PostgresStorage::list_rate_limits(const sdk::RateLimitSink& sink) {
  struct Row {
    std::string queue;
    double rate;
    int64_t burst;
    int64_t updated_at;
  };
  std::vector<Row> rows;
  run("list_rate_limits", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(stmt::kListRateLimits);
    rows.clear();
    for (const auto& row : r)
      rows.push_back(Row{text_at(row, 0), double_at(row, 1), int_at(row, 2), int_at(row, 3)});
  });
  for (const Row& r : rows) {
    conveyor_rate_limit l{};
    l.struct_size = sizeof(conveyor_rate_limit);
    l.burst = static_cast<uint32_t>(std::clamp<int64_t>(r.burst, 1, UINT32_MAX));
    l.queue = sdk::str(r.queue);
    l.rate_per_sec = r.rate;
    l.updated_at_us = r.updated_at;
    sink(l);
  }
}

int64_t PostgresStorage::change_marker() {
  int64_t marker = 0;
  run("change_marker", Retry::kAfterConnectionLoss, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(stmt::kChangeMarker);
    marker = r.empty() ? 0 : int_at(r[0], 0);
  });
  return marker;
}

void PostgresStorage::wait_for_notification(int64_t timeout_us, const sdk::NotifySink& sink) {
  std::lock_guard lock(listener_mu_);
  if (!listener_)
    listener_ = std::make_unique<NotificationListener>(
        options_.conninfo, options_.target, *channels_, [this] { return wakeable_queues(); });
  listener_->wait(timeout_us, sink);
}

}  // namespace conveyor::postgres

CONVEYOR_EXPORT_STORAGE_PLUGIN(conveyor::postgres::PostgresStorage, "postgres", "0.1.0",
                               CONVEYOR_KIND_CANONICAL,
                               CONVEYOR_CAP_DURABLE | CONVEYOR_CAP_MULTI_PROCESS |
                                   CONVEYOR_CAP_MULTI_HOST | CONVEYOR_CAP_NOTIFY)
