// The "sqlite" storage plugin: a canonical (one mutable row per job) backend
// on one SQLite file in WAL mode, safe for several threads and several
// processes (a CLI next to a running server).
//
// Design:
//   * One writer connection guarded by a mutex. Every write is a single
//     BEGIN IMMEDIATE transaction, so claimers in any thread or process are
//     serialised by SQLite's write lock and never see the same job.
//   * A small pool of reader connections for queue_stats, list_queues,
//     get_job, list_rate_limits and change_marker; in WAL mode they never block the
//     writer and see only committed data.
//   * Prepared statements are cached per connection and reused.
//   * SQLITE_BUSY / SQLITE_LOCKED: SQLite's busy handler waits up to
//     busy_timeout_ms; a transaction that still fails (or fails without the
//     handler being consulted) is retried with a short backoff, bounded by
//     busy_timeout_ms and a fixed number of attempts, then reported as
//     CONVEYOR_E_UNAVAILABLE.
//   * Callbacks run only after the transaction committed and after the
//     connection was released, from buffered copies of the rows.
//   * ABI 1.1 (schema 2): list_jobs reads one jobs_list range per final state
//     and kind; claim_kinds reads jobs_claim skipping other kinds (no kind
//     index: it cost enqueue and claim about a third more instructions);
//     job_counts reads job_counts, per (queue, final state) counts kept by
//     the statements that finalize or unfinalize (complete from the queue
//     its claim recorded) and a delete trigger, so counting never scans
//     retained jobs; live states are counted from jobs_claim and jobs_lease.
//   * Rows stored by queue (schema 4): a row's place (pos, the rowid) comes
//     from its queue's block of places, so a claim or completion of a batch
//     rewrites a few table pages even when many queues' jobs arrive
//     interleaved; the job id is a separate, increasing column (meta
//     'last_job_id') found through the unique index jobs_id.
//   * ABI 1.2 (schema 3): jobs.cost, rate_limits.scope, and shared_state for
//     swap_shared_state: a read on a reader, a swap in one BEGIN IMMEDIATE
//     transaction (the file's write lock makes it atomic across processes).
//     ABI 1.3's add_shared_state is a read and a write in one such transaction.
//   * Notifications (CONVEYOR_CAP_NOTIFY) with no server to send them:
//     wait_for_notification sleeps on inotify until the -wal file is written
//     (every commit, by any connection in any process, appends to it), then
//     looks: PRAGMA data_version on a connection of its own (it changes when
//     another connection committed). On a change it reads the job ids'
//     high-water mark (new jobs: JOBS for each of their queues) and the
//     change marker (RATE_LIMITS, and QUEUE_STATE for each queue whose
//     paused flag changed). Looks are at least kLookGap apart (a busy writer
//     costs at most 1 / kLookGap looks a second, an idle file none) and at
//     most kFullLookEvery apart (in case a write was missed); without
//     inotify, it looks every kLookGap. Jobs made ready again in place
//     (retry, release, rescue by another process) are not notified: the
//     host's poll finds them.
#ifndef CONVEYOR_PLUGINS_SQLITE_SQLITE_STORAGE_HPP
#define CONVEYOR_PLUGINS_SQLITE_SQLITE_STORAGE_HPP

#include <conveyor/storage_plugin.h>
#include <conveyor/storage_plugin.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

extern "C" CONVEYOR_PLUGIN_EXPORT const conveyor_storage_plugin* conveyor_storage_plugin_entry(
    uint32_t host_abi_major, uint32_t host_abi_minor);

namespace conveyor::sqlite {

// The schema version this build creates and understands (PRAGMA user_version).
inline constexpr int kSchemaVersion = 4;

// The schema's steps: step i upgrades version i to i + 1 (for tests that
// build a database as an older plugin left it).
std::span<const char* const> schema_steps();

struct Config {
  std::string path;
  // false: the database file must exist (read-only commands pass this).
  bool create = true;
  int busy_timeout_ms = 5000;
  std::string synchronous = "NORMAL";  // NORMAL, FULL or OFF (validated)
};

// Parses and validates [storage.options]; throws sdk::Error(CONVEYOR_E_INVALID).
Config parse_config(const sdk::Options& options);

struct Conn;  // one SQLite connection plus its cached statements

// Which file a path names (device and inode).
struct FileId {
  uint64_t dev = 0;
  uint64_t ino = 0;
  friend bool operator==(const FileId&, const FileId&) = default;
};

class SqliteStorage {
 public:
  static std::unique_ptr<SqliteStorage> open(const sdk::Options& options);
  ~SqliteStorage();
  SqliteStorage(const SqliteStorage&) = delete;
  SqliteStorage& operator=(const SqliteStorage&) = delete;

  void migrate();
  void enqueue(std::span<const conveyor_new_job> jobs, std::span<int64_t> out_ids);
  uint32_t claim(std::string_view queue, uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                 int64_t lease_expires_us, const sdk::JobSink& sink);
  void complete(std::span<const conveyor_lease> leases, int64_t now_us,
                std::span<conveyor_status> results);
  void fail(conveyor_lease lease, std::string_view error_text, int64_t retry_at_us, int64_t now_us);
  void extend_leases(std::span<const conveyor_lease> leases, int64_t lease_expires_us,
                     std::span<conveyor_status> results);
  void release(std::span<const conveyor_lease> leases, int64_t now_us,
               std::span<conveyor_status> results);
  uint32_t rescue_expired(int64_t now_us, uint32_t max_jobs);
  void cancel(int64_t job_id, int64_t now_us);
  void set_queue_paused(std::string_view queue, bool paused, int64_t now_us);
  void queue_stats(int64_t now_us, const sdk::QueueStatsSink& sink);
  void list_queues(const sdk::QueueSink& sink);
  void get_job(int64_t job_id, int64_t now_us, const sdk::JobSink& sink);
  uint64_t purge_finished(int64_t finalized_before_us, uint32_t max_jobs);
  void set_rate_limit(std::string_view queue, double rate_per_sec, uint32_t burst, int64_t now_us);
  void delete_rate_limit(std::string_view queue);
  void list_rate_limits(const sdk::RateLimitSink& sink);
  int64_t change_marker();
  // ABI 1.1
  void enqueue_at(std::span<const conveyor_new_job> jobs, int64_t now_us,
                  std::span<int64_t> out_ids);
  uint32_t claim_kinds(std::string_view queue, std::span<const std::string_view> kinds,
                       uint32_t max_jobs, int64_t lease_token, int64_t now_us,
                       int64_t lease_expires_us, const sdk::JobSink& sink);
  uint32_t list_jobs(std::string_view queue, std::span<const int32_t> states, std::string_view kind,
                     int64_t after_id, uint32_t limit, int64_t now_us, const sdk::JobSink& sink);
  void retry_jobs(std::span<const int64_t> ids, int64_t now_us, std::span<conveyor_status> results);
  void delete_jobs(std::span<const int64_t> ids, std::span<conveyor_status> results);
  void job_counts(int64_t now_us, const sdk::QueueStatsSink& sink);
  uint32_t rescue_expired_v2(int64_t now_us, uint32_t max_jobs, const sdk::JobSink& sink);
  // ABI 1.2 (schema 3)
  sdk::SharedRecord swap_shared_state(std::string_view key, int64_t expected_version,
                                      int64_t new_value);
  // ABI 1.3 (no schema change: shared_state's rows)
  sdk::SharedAddResult add_shared_state(std::string_view key, const sdk::SharedAdd& add);
  void set_rate_limit_scoped(std::string_view queue, double rate_per_sec, uint32_t burst,
                             int32_t scope, int64_t now_us);
  void enqueue_costed(std::span<const conveyor_new_job_v2> jobs, int64_t now_us,
                      std::span<int64_t> out_ids);
  // CONVEYOR_CAP_NOTIFY (see the design notes above); from one thread at a
  // time (the host's), others wait.
  void wait_for_notification(int64_t timeout_us, const sdk::NotifySink& sink);

  // The least and the most time between two looks of wait_for_notification.
  static constexpr std::chrono::milliseconds kLookGap{5};
  static constexpr std::chrono::milliseconds kFullLookEvery{250};

 private:
  // What wait_for_notification saw at its last look (guarded by watch_mu_).
  struct Watch {
    Watch() = default;
    ~Watch();  // closes inotify_fd
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;
    std::unique_ptr<Conn> conn;  // opened by the first look
    int64_t data_version = -1;   // -1: never looked
    int64_t last_id = 0;
    int64_t marker = 0;
    std::unordered_map<std::string, bool> paused;  // queue -> paused
    int inotify_fd = -1;                           // -1: not set up (or unavailable)
    bool wal_watched = false;                      // the -wal file's watch is in place
    std::chrono::steady_clock::time_point looked;  // the last look
  };
  // One look: appends (kind, queue) for what changed since the last one.
  void look_for_changes(std::vector<std::pair<int32_t, std::string>>& found);
  // Waits until the -wal file is written or until `until`: whether it was
  // written (or may have been: true when inotify cannot watch it).
  bool wait_for_wal_write(std::chrono::steady_clock::time_point until);
  std::mutex watch_mu_;
  Watch watch_;

  // rescue_expired, reporting each rescued job to sink when it is not null.
  uint32_t rescue(int64_t now_us, uint32_t max_jobs, const sdk::JobSink* sink);
  // costs: one per job, or empty for cost 1 each.
  void insert_jobs(std::span<const conveyor_new_job> jobs, std::span<const int32_t> costs,
                   int64_t created, std::span<int64_t> out_ids);
  explicit SqliteStorage(Config config);

  std::unique_ptr<Conn> open_conn(bool writer);
  // Throws CONVEYOR_E_INTERNAL when config_.path no longer names file_.
  void check_file(const char* op) const;
  // Throws CONVEYOR_E_INTERNAL when the file's header is no longer SQLite's
  // (overwritten in place).
  void check_header(const char* op, Conn& c) const;
  void check_schema_owner(Conn& c, int version);

  // Runs fn(conn) inside BEGIN IMMEDIATE ... COMMIT on the writer connection,
  // retrying the whole transaction on SQLITE_BUSY/SQLITE_LOCKED. fn must be
  // safe to run again from scratch (it resets whatever it collects).
  template <typename Fn>
  void write_txn(const char* op, Fn&& fn);
  // Runs fn(conn) on a pooled reader connection, with the same busy retry.
  template <typename Fn>
  void read(const char* op, Fn&& fn);
  template <typename Fn>
  void with_busy_retry(const char* op, Fn&& fn);

  // Applies one lease-guarded UPDATE per lease inside one transaction.
  template <typename Bind>
  void per_lease(const char* op, int stmt, std::span<const conveyor_lease> leases,
                 std::span<conveyor_status> results, Bind&& bind);

  std::unique_ptr<Conn> acquire_reader();
  void return_reader(std::unique_ptr<Conn> conn) noexcept;

  Config config_;
  FileId file_;  // the database file opened
  std::mutex writer_mu_;
  std::unique_ptr<Conn> writer_;
  // The queue of each job this handle claimed and has not yet finalized
  // (guarded by writer_mu_): complete adds its jobs to job_counts per queue
  // from here, reading the rows again (one statement per batch) only for
  // jobs claimed elsewhere, and completes them by place (pos), a batch per
  // lease token in one statement. A job's queue and place never change and
  // ids and places are never reused, so an entry is never wrong, only
  // possibly unused (the lease guard still decides); the map is cleared when
  // it grows past a bound.
  struct ClaimedPlace {
    uint32_t queue;  // an index into queue_names_
    int64_t pos;     // where the row is stored
  };
  std::unordered_map<int64_t, ClaimedPlace> claimed_;
  std::vector<std::string> queue_names_;                 // claimed_'s values index this
  std::unordered_map<std::string, uint32_t> queue_ids_;  // queue_names_ inverted
  uint32_t queue_index(std::string_view queue);
  void remember_claimed(int64_t job_id, uint32_t queue, int64_t pos);
  std::mutex readers_mu_;
  std::vector<std::unique_ptr<Conn>> idle_readers_;

  friend class ReaderLease;
};

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_SQLITE_STORAGE_HPP
