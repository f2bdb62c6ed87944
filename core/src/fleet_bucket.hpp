// FleetBucket: a queue's rate limit of scope "fleet", one bucket for every
// process on the same storage. The arithmetic is bucket_math.hpp's, as for
// the process bucket; the state (full_at, ns on the wall clock) lives in
// storage under "ratelimit.bucket:" + queue and changes only through
// swap_shared_state (compare-and-set), so every take and refund by any
// process applies to the latest state exactly once, and the bound holds for
// the fleet: tokens taken in [a, b] <= burst + rate * (b - a), or
// max(burst, the largest cost) + rate * (b - a) with takes of a cost above
// the burst: they wait for a full bucket and put the shared record in debt
// (bucket_math.hpp), on either path (a debt take's add is one unit of all
// its tokens, which fits only from a full bucket).
//
// Cost: the record is cached. A take the cache says cannot succeed makes no
// call. On a plugin with add_shared_state (ABI 1.3) a take is that one call:
// the plugin applies bucket::take's clamp and division to the stored record
// atomically, so it cannot lose a race (it gets fewer tokens, or none when
// another process took the last). On a 1.2 plugin, one swap, and after a
// lost race (another process took first; the reply carries its record) one
// more, at most kMaxSwaps in all.
// Tokens a claim took and did not use (refund) stay here as a spare, no
// call: the next take within kSpareHold of the take they came from is
// served from it, and a later take returns them to the fleet in its own
// swap. So a claim that finds fewer jobs than tokens costs no extra call:
// a steady queue at its limit, whose claims often find fewer jobs than
// tokens, would otherwise pay a refund call and a take call per claim.
//
// Contention: processes waiting for the same next token all wake when it is
// due, and every one but the first loses its race (a call each). A process
// whose take lost its race and then found too few tokens (with
// add_shared_state: whose add got none where its cached record promised
// some) backs off: no call
// before kBackOffFirst, doubling per such take up to burst / rate (at most
// kBackOffMost), so while it waits the bucket cannot overflow and no token
// is wasted. The winner's record is its own last write, fresh, so it keeps
// taking at one call per take while it has work and free permits; the
// others check back within the back-off. An applied take ends the back-off.
//
// Slack: a token is taken just before the claim, and the job starts after
// the claim returns, so a window of starts can hold the takes of a slightly
// longer window: rate * (the spread of claim latencies) jobs (documented in
// docs/reference.md, "Rate limits"). A spare is used at most kSpareHold after
// its take: rate * kSpareHold more (0.5 jobs at 50/s, 50 at 5,000/s).
// Clocks: full_at is wall-clock time, so hosts whose clocks differ by d may
// take up to rate * d early.
//
// Not thread-safe: each bucket belongs to one dispatcher thread. Calls may
// throw StorageError (the state is then as before, or as the swap left it).
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/internal/bucket_math.hpp>
#include <conveyor/internal/metrics.hpp>
#include <conveyor/internal/storage.hpp>
#include <conveyor/rate_limit.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace conveyor {

class FleetBucket {
 public:
  // Most swaps one take or hold makes before giving up (then it takes
  // nothing and the dispatcher tries again at the next token).
  static constexpr int kMaxSwaps = 3;
  // How long after its take a spare token may still be used.
  static constexpr std::chrono::milliseconds kSpareHold{10};
  // The first back-off after a lost race that left too few tokens, and the
  // longest (burst / rate, when shorter, bounds it too).
  static constexpr std::chrono::milliseconds kBackOffFirst{10};
  static constexpr std::chrono::milliseconds kBackOffMost{1000};

  // limit must be validated; storage, clock and counters (fleet_swaps,
  // fleet_conflicts are counted there) outlive the bucket. Makes no call.
  FleetBucket(Storage& storage, std::string_view queue, const RateLimit& limit, const Clock& clock,
              QueueCounters& counters);

  // As above, for a record named by the caller (a key's fleet bucket).
  struct Record {
    std::string name;
  };
  FleetBucket(Storage& storage, Record record, const RateLimit& limit, const Clock& clock,
              QueueCounters& counters);

  // The storage key of queue's fleet bucket.
  static std::string key_for(std::string_view queue);
  // The storage key of the fleet bucket of one key of queue
  // (key_rate_limit of scope fleet): kKeyPrefix + queue + "/=" + key when
  // that fits CONVEYOR_SHARED_KEY_MAX, else kKeyPrefix + queue + "/#" + the
  // first 40 hex digits of the key's SHA-256. ('/' is not in queue names.)
  static std::string key_for(std::string_view queue, std::string_view key);
  // The start of every key bucket's record: their full-again times are
  // wall ns, so records below "now" minus a margin are full and are
  // deleted (delete_shared_states) to keep shared storage bounded.
  static constexpr std::string_view kKeyPrefix = "ratelimit.key:";

  // Whole tokens the last record seen says are available (an estimate:
  // other processes may have taken some since). No call.
  uint32_t available() const;
  // Takes up to n tokens, none when fewer than at_least are available; how
  // many were taken (0: too few, or the races were all lost). No call when
  // the spare has min(n, at_least) or more (it serves alone), while backing
  // off, or when the cached record already says too few; otherwise the swap
  // also returns the whole spare.
  uint32_t take(uint32_t n, uint32_t at_least = 1);
  // take() in two steps, for takes of many buckets in one call
  // (Storage::add_shared_states; only with add_shared_state, ABI 1.3):
  // prepare_take serves the take from the spare (from_spare), or says it
  // cannot succeed (no add), or gives the add to make; finish_take applies
  // that add's result and returns the tokens taken. After a failed call,
  // lost_reply for each prepared add (the record is read again).
  struct PreparedTake {
    uint32_t from_spare = 0;
    std::optional<Storage::SharedAdd> add;
    int64_t at = 0;                 // wall ns of the take
    bool known = false;             // the cached record was read
    bool promised = false;          // and it said the take would succeed
    uint32_t tokens_per_count = 1;  // tokens per unit the add counts (a debt take: all of them)
  };
  PreparedTake prepare_take(uint32_t n, uint32_t at_least = 1);
  uint32_t finish_take(const PreparedTake& prepared, const Storage::SharedAdded& result);
  void lost_reply();
  // The shared record's key.
  const std::string& record() const { return key_; }
  // Whether takes may be prepared (the plugin has add_shared_state).
  bool prepares() const { return adds_; }

  // Gives back n tokens taken and not used: kept as the spare (at most the
  // burst), no call.
  void refund(uint32_t n);
  // Tokens in the spare (fresh or waiting to be returned).
  uint32_t spare() const { return spare_; }
  // From the last record seen: how long until n tokens are available (n
  // above the burst: until the bucket is full), or the back-off ends if
  // that is later.
  std::chrono::nanoseconds time_until(uint32_t n) const;
  // Until then no process takes a token; the bucket refills from empty
  // after (backpressure held fleet-wide); the spare is dropped. until is on
  // the steady clock.
  void empty_until(SteadyTime until);
  // Changes rate and burst; the shared state is kept (its meaning is "full
  // again at", valid under any shape).
  void reconfigure(const RateLimit& limit);

  const RateLimit& limit() const { return limit_; }
  int64_t token_ns() const { return shape_.token_ns; }

 private:
  int64_t wall_ns() const;
  // Reads the record when it was never read (first use).
  void read_once();
  // One compare-and-set from the cached record; updates the cache.
  bool swap(int64_t new_full_at);
  // Tokens of the spare a take of n (at least at_least) may use now, taken
  // from it; 0 when the take must go to storage.
  uint32_t from_spare(uint32_t n, uint32_t at_least, int64_t now);
  // After a take that lost a race and then found too few tokens at wall ns at.
  void back_off(int64_t at);

  Storage& storage_;
  const std::string key_;
  const Clock& clock_;
  RateLimit limit_;
  bucket::Shape shape_;
  const bool adds_;           // the plugin has add_shared_state (ABI 1.3)
  int64_t version_ = -1;      // of the cached record; -1: not read yet
  int64_t full_at_ = 0;       // the cached record's value
  uint32_t spare_ = 0;        // tokens refunded, not yet used or returned
  int64_t last_take_ns_ = 0;  // wall ns of the last applied take (the spare's hold starts here)
  int64_t back_off_ns_ = 0;   // the current back-off; 0: none
  int64_t quiet_until_ = 0;   // wall ns: no call before (backing off)
  QueueCounters& counters_;
};

}  // namespace conveyor
