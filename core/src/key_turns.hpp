// KeyTurns: fair turns between the keys of one queue, and each key's own
// limits (key_rate_limit, key_max_workers). docs/design/keys.md has the
// design and the fairness bound.
//
// A dispatch unit that is keyed owns one. Each claim of the unit asks it how
// to share the claim's permits between the keys that have ready jobs
// (allocate), makes one claim_keys call with that, and reports what came
// back (claimed). Keys take turns in bytewise key order from a rotating
// cursor: each round gives every ready key that its limits allow one job,
// rounds repeat until the permits are spent, and the next claim starts after
// the last key served. So a key with 100,000 ready jobs and a key with one
// both get a job per round.
//
// Which keys have ready jobs comes from storage (list_ready_keys), read
// again when the set may be stale: after mark_stale (new jobs, a due timer),
// when no known key has ready jobs left, and at least every kRelistEvery.
//
// Weights: a key of weight w (conveyor keys weight, default 1) gets up to w
// jobs per round where a key of weight 1 gets one.
//
// Limits per key, the first that is set wins: the key's own run-time
// override (conveyor ratelimit set Q --key K), the queue's run-time limit
// for every key (--per-key), [queues.NAME] key_rate_limit. The kill switch
// (conveyor ratelimit disable) turns them all off. A limit of scope "fleet"
// is a FleetBucket per key, shared by every process on the storage: the
// takes of all keys a claim serves are one add_shared_states call (one per
// key on a plugin before ABI 1.5), made in the claim path.
//
// Memory: a key is remembered while it has ready jobs (as far as the last
// listing knows), running jobs, or a bucket that is not full; then it is
// forgotten, and its state is the default again. So state grows with the
// keys that have work, not with the keys ever seen.
//
// Thread-safe: the dispatcher (or the slow-claim pool) allocates and
// records claims, the job runners report finished jobs.
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/internal/limit_resolver.hpp>
#include <conveyor/internal/metrics.hpp>
#include <conveyor/internal/mutex.hpp>
#include <conveyor/internal/storage.hpp>
#include <conveyor/internal/token_bucket.hpp>
#include <conveyor/job.hpp>
#include <conveyor/rate_limit.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace conveyor {

class FleetBucket;

class KeyTurns {
 public:
  struct Limits {
    std::optional<RateLimit> rate;    // every key's own bucket; none: unlimited
    std::optional<uint32_t> workers;  // at most this many running per key
  };
  // One page of the queue's keys with ready jobs after a key (nullopt: from
  // the first), at most limit, each counted up to count_limit
  // (Storage::list_ready_keys of the unit's queue).
  using ListPage = std::function<std::vector<Storage::ReadyKey>(
      const std::optional<std::string>& after, uint32_t limit, uint32_t count_limit)>;

  // How often the known keys are read again at the latest, so a key that
  // became ready without a wake-up (another process, no notification) waits
  // at most this long plus one round.
  static constexpr std::chrono::milliseconds kRelistEvery{1000};
  // Keys read per page.
  static constexpr uint32_t kPageKeys = 1000;

  // What a fleet-scope limit of a key needs: the storage its buckets live
  // in, the clock, the queue (its counters count the calls). All outlive
  // this.
  struct Fleet {
    Storage* storage = nullptr;
    const Clock* clock = nullptr;
    QueueCounters* counters = nullptr;
    std::string queue;
  };
  // A key's limit as it applies now, and where it comes from (kOverride:
  // the key's own; kEveryKeyOverride: --per-key; kQueueConfig:
  // key_rate_limit; kDisabled: the kill switch; kNone), and its weight.
  struct KeyLimit {
    std::optional<RateLimit> limit;
    LimitSource source = LimitSource::kNone;
    uint32_t weight = 1;
  };
  // The rule above, for reports as for turns.
  static KeyLimit resolve(const Limits& config, const LimitResolver::KeyOverrides& overrides,
                          bool enabled, std::string_view key);

  // throttled_count (may be null; must outlive this): incremented each time
  // a key with ready jobs is passed over because its bucket is empty, or a
  // claim spends the last token of a key that has jobs left. fleet: needed
  // for a limit of scope fleet (without it such a limit is per process).
  explicit KeyTurns(Limits limits, std::atomic<uint64_t>* throttled_count = nullptr,
                    std::optional<Fleet> fleet = std::nullopt);
  ~KeyTurns();

  // New jobs may have become ready for keys not known yet: read the keys
  // again before the next allocation.
  void mark_stale();
  // Changes the per-key limits; buckets keep their tokens (at most the new
  // burst).
  void reconfigure(const Limits& limits, SteadyTime now);
  // The run-time settings of the queue's keys and the kill switch, as the
  // LimitResolver has them now (never null). Applied to each key at its
  // next turn.
  void set_overrides(std::shared_ptr<const LimitResolver::KeyOverrides> overrides, bool enabled);
  // key's limit and weight as they apply now.
  KeyLimit limit_of(std::string_view key) const;

  // How up to permits jobs should be shared between the ready keys now,
  // taking one token of each key's bucket per job given. Reads the keys
  // through list first when they may be stale (may throw what list throws;
  // then nothing was taken). Keys given nothing are left out.
  std::vector<Storage::KeyClaim> allocate(uint32_t permits, SteadyTime now, const ListPage& list);

  // After the claim_keys call made with asked: got are the jobs it returned
  // (any order). A key that gave fewer than asked has no more ready jobs (as
  // far as this process knows); its unused tokens go back. On a failed
  // claim, call with got empty and failed true: every token goes back and
  // the keys are read again next time.
  // filtered: the claim took only some kinds (a unit's local handlers, or
  // a remote worker's): a key that gave fewer than asked may still have
  // jobs of other kinds, so the keys are read again before the next
  // allocation (whose claim may want other kinds).
  void claimed(std::span<const Storage::KeyClaim> asked, std::span<const Job> got, SteadyTime now,
               bool failed = false, bool filtered = false);
  // The jobs the unit runs (after any were given back): each counts against
  // its key's key_max_workers until finished.
  void started(std::span<const Job> jobs);
  // A job started here ended (any thread). Unknown ids are ignored.
  void finished(int64_t job_id);
  // The downstream asked key to wait (backpressure): it gets no turn before
  // until; a later hold extends it. The other keys go on.
  void hold(const std::string& key, SteadyTime until);

  // Why the last allocation left ready keys without a job.
  struct Blocked {
    // The earliest time a throttled key has a token, or a held key's hold ends.
    std::optional<SteadyTime> tokens_at;
    bool by_workers = false;  // a key was (or is now) at key_max_workers
    // Permits were left while the last listing was a full page: more keys
    // with ready jobs lie beyond it (read at the next allocation).
    bool more_keys = false;
  };
  Blocked blocked() const;
  // Whether a known key has ready jobs and may take one now (after a claim
  // that came back short: claim again at once rather than wait).
  bool has_ready(SteadyTime now) const;

  // What the unit knows of its keys, for reports and tests.
  struct KeyView {
    std::string key;
    int64_t ready = 0;  // as last listed, less what was claimed since
    uint32_t running = 0;
    bool throttled = false;  // its bucket had no token at the last allocation
  };
  std::vector<KeyView> snapshot() const;
  // Whether any per-key limit or weight is set (key_rate_limit,
  // key_max_workers, a run-time setting).
  bool limits_keys() const;
  // Keys remembered (with ready or running jobs, or a bucket not full).
  size_t remembered() const;
  // Approximate bytes of state per remembered key (docs/design/keys.md).
  static size_t bytes_per_key();

 private:
  struct KeyState {
    int64_t ready = 0;
    bool ready_capped = false;  // ready was count_limit: there may be more
    uint32_t running = 0;
    std::optional<TokenBucket> bucket;   // a limit of scope process
    std::unique_ptr<FleetBucket> fleet;  // a limit of scope fleet
    uint64_t limit_generation = 0;       // overrides_generation_ the limit was set at
    uint32_t weight = 1;
    bool throttled = false;
    std::optional<SteadyTime> held_until;  // backpressure: no turn before it
  };
  using Keys = std::map<std::string, KeyState>;

  // The keys with ready jobs, read from the first key (and after cursor
  // when the first page is full and ends before it); whether the last page
  // read was full. Called without mu_: storage must not stall finished().
  static std::pair<std::vector<Storage::ReadyKey>, bool> read_keys(
      const std::optional<std::string>& cursor, uint32_t count_limit, const ListPage& list);
  // Makes listed the known ready keys; stale_count: mark_stale's count
  // when the reading began.
  void apply_listing(std::vector<Storage::ReadyKey> listed, bool full, uint64_t stale_count,
                     uint32_t count_limit, SteadyTime now) REQUIRES(mu_);
  // Whether state is the default again (nothing ready or running, bucket full).
  bool forgettable(const KeyState& k, SteadyTime now) const;
  void forget_idle(SteadyTime now) REQUIRES(mu_);
  uint32_t headroom(KeyState& k, SteadyTime now) const REQUIRES(mu_);
  // Makes k's bucket and weight follow its limit now (after a change of
  // limits or overrides, or for a new key).
  void apply_limit(const std::string& key, KeyState& k, SteadyTime now) REQUIRES(mu_);
  // Tokens k's bucket has now (the fleet's as last seen); max without one.
  static uint32_t tokens(const KeyState& k, SteadyTime now);
  // When k's bucket has its next token.
  static SteadyTime next_token(const KeyState& k, SteadyTime now);
  static void refund(KeyState& k, uint32_t n);
  void count_throttled(KeyState& k, SteadyTime now) REQUIRES(mu_);

  mutable Mutex mu_;
  Limits limits_ GUARDED_BY(mu_);
  std::shared_ptr<const LimitResolver::KeyOverrides> overrides_ GUARDED_BY(mu_);
  bool enabled_ GUARDED_BY(mu_) = true;
  uint64_t limit_generation_ GUARDED_BY(mu_) = 1;  // moves when limits or overrides change
  std::atomic<uint64_t>* const throttled_count_;
  const std::optional<Fleet> fleet_;
  Keys keys_ GUARDED_BY(mu_);
  std::unordered_map<int64_t, std::string> running_ GUARDED_BY(mu_);  // job id -> key
  std::optional<std::string> turn_after_ GUARDED_BY(mu_);             // the last key served
  // The key the last claim ran out of permits in the middle of its share,
  // and what it is still owed: it goes first next time.
  std::optional<std::pair<std::string, uint32_t>> resume_ GUARDED_BY(mu_);
  // mark_stale counts up; a listing remembers the count it began at, so a
  // wake that comes while the keys are read is not lost.
  uint64_t stale_count_ GUARDED_BY(mu_) = 1;
  size_t ready_keys_ GUARDED_BY(mu_) = 0;  // keys with ready > 0 (no walk to know none)
  uint64_t listed_count_ GUARDED_BY(mu_) = 0;
  bool page_full_ GUARDED_BY(mu_) = false;  // the last listing ended on a full page
  std::optional<SteadyTime> listed_at_ GUARDED_BY(mu_);
  Blocked blocked_ GUARDED_BY(mu_);
  bool warned_no_fleet_ GUARDED_BY(mu_) = false;  // apply_limit's fallback was logged
};

}  // namespace conveyor
