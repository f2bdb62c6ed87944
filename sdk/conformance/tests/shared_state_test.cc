// ABI 1.2 swap_shared_state: a compare-and-set of (version, value) per key,
// and ABI 1.3 add_shared_state: a bounded add on the same records, both
// linearizable across threads, handles and processes (storage_plugin.h);
// ABI 1.5 add_shared_states: add_shared_state on many keys in one call.
#include "fixture.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace conveyor::conformance {
namespace {

class SharedState : public ConformanceTest {};

using Clock = std::chrono::steady_clock;
constexpr auto kDeadline = std::chrono::seconds(60);

// A swap that must succeed as a call (applied or not).
SharedCopy swap(Handle& h, std::string_view key, int64_t expected, int64_t value) {
  SharedCopy out;
  require_ok(h.swap_shared_state(key, expected, value, &out));
  return out;
}

// k increments of key's value by a read then compare-and-set retry loop, as
// the host takes tokens. Returns how many swaps applied (k unless a call
// failed; a failure's text goes to *error). UNAVAILABLE is retried like the
// host does.
int increment(Handle& h, std::string_view key, int k, Clock::time_point deadline,
              std::string* error) {
  SharedCopy cur;
  Status s = h.swap_shared_state(key, -1, 0, &cur);
  int applied = 0;
  while (applied < k && Clock::now() < deadline) {
    if (!s.ok() && s.code != CONVEYOR_E_UNAVAILABLE) {
      std::ostringstream msg;
      msg << s;
      *error = msg.str();
      return applied;
    }
    if (!s.ok()) {  // transient: read again
      s = h.swap_shared_state(key, -1, 0, &cur);
      continue;
    }
    SharedCopy next;
    s = h.swap_shared_state(key, cur.version, cur.value + 1, &next);
    if (!s.ok()) continue;
    if (next.applied == 1) {
      ++applied;
      if (next.version != cur.version + 1 || next.value != cur.value + 1) {
        *error = "an applied swap from version " + std::to_string(cur.version) + " reported (" +
                 std::to_string(next.version) + ", " + std::to_string(next.value) + "), not (" +
                 std::to_string(cur.version + 1) + ", " + std::to_string(cur.value + 1) + ")";
        return applied;
      }
    } else if (next.version == cur.version) {
      *error = "a swap from version " + std::to_string(cur.version) +
               " did not apply, yet reported that same version as the record after the call";
      return applied;
    }
    cur = next;  // the record after the call: the next swap starts from it
  }
  if (applied < k) *error = "did not finish " + std::to_string(k) + " increments in time";
  return applied;
}

TEST_F(SharedState, NeverWrittenKeyReadsAsVersionZeroValueZero) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, swap_shared_state);
  SharedCopy r = h->shared("ratelimit.bucket:never");
  EXPECT_EQ(r.version, 0);
  EXPECT_EQ(r.value, 0);
  EXPECT_EQ(r.applied, 0) << "a read (expected_version < 0) never applies";
}

TEST_F(SharedState, SwapFromTheCurrentVersionAppliesAndBumpsIt) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, swap_shared_state);
  SharedCopy first = swap(*h, "k", 0, 42);
  EXPECT_EQ(first.applied, 1) << "a never-written key is version 0: a swap from 0 applies";
  EXPECT_EQ(first.version, 1);
  EXPECT_EQ(first.value, 42);
  SharedCopy second = swap(*h, "k", 1, -7);
  EXPECT_EQ(second.applied, 1);
  EXPECT_EQ(second.version, 2);
  EXPECT_EQ(second.value, -7) << "values are any int64_t";
  SharedCopy read = h->shared("k");
  EXPECT_EQ(read.version, 2);
  EXPECT_EQ(read.value, -7);
  // Extremes survive.
  EXPECT_EQ(swap(*h, "k", 2, INT64_MAX).value, INT64_MAX);
  EXPECT_EQ(swap(*h, "k", 3, INT64_MIN).value, INT64_MIN);
  EXPECT_EQ(h->shared("k").value, INT64_MIN);
}

TEST_F(SharedState, SwapFromAnotherVersionChangesNothingAndReportsTheRecord) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, swap_shared_state);
  ASSERT_EQ(swap(*h, "k", 0, 5).applied, 1);
  ASSERT_EQ(swap(*h, "k", 1, 6).applied, 1);
  for (int64_t stale : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{1000}}) {
    SharedCopy lost = swap(*h, "k", stale, 99);
    EXPECT_EQ(lost.applied, 0) << "swap from version " << stale << " applied at version 2";
    EXPECT_EQ(lost.version, 2) << "a lost swap receives the record as it is after the call";
    EXPECT_EQ(lost.value, 6);
  }
  SharedCopy read = h->shared("k");
  EXPECT_EQ(read.version, 2);
  EXPECT_EQ(read.value, 6);
  // A never-written key and a version other than 0: nothing is created.
  SharedCopy absent = swap(*h, "other", 4, 1);
  EXPECT_EQ(absent.applied, 0);
  EXPECT_EQ(absent.version, 0);
  EXPECT_EQ(absent.value, 0);
  EXPECT_EQ(h->shared("other").version, 0);
}

TEST_F(SharedState, ReadsChangeNothing) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, swap_shared_state);
  ASSERT_EQ(swap(*h, "k", 0, 10).applied, 1);
  for (int64_t expected : {int64_t{-1}, int64_t{-2}, INT64_MIN}) {
    SharedCopy r = swap(*h, "k", expected, 555);
    EXPECT_EQ(r.applied, 0) << "expected_version " << expected << " is a read";
    EXPECT_EQ(r.version, 1);
    EXPECT_EQ(r.value, 10) << "a read must not store new_value";
  }
  EXPECT_EQ(h->shared("never").version, 0);
  EXPECT_EQ(swap(*h, "never", -1, 3).version, 0) << "a read must not create the key";
}

TEST_F(SharedState, KeysAreIndependentAndComparedWhole) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, swap_shared_state);
  const std::string longest(CONVEYOR_SHARED_KEY_MAX, 'k');
  ASSERT_EQ(swap(*h, "ratelimit.bucket:a", 0, 1).applied, 1);
  ASSERT_EQ(swap(*h, "ratelimit.bucket:ab", 0, 2).applied, 1);
  ASSERT_EQ(swap(*h, "ratelimit.bucket:A", 0, 3).applied, 1);
  ASSERT_EQ(swap(*h, longest, 0, 4).applied, 1)
      << "a key of CONVEYOR_SHARED_KEY_MAX bytes is valid";
  ASSERT_EQ(swap(*h, "ratelimit.bucket:a", 1, 10).applied, 1);
  EXPECT_EQ(h->shared("ratelimit.bucket:a").value, 10);
  EXPECT_EQ(h->shared("ratelimit.bucket:ab").value, 2) << "a key is not its prefix's record";
  EXPECT_EQ(h->shared("ratelimit.bucket:A").value, 3) << "keys are compared bytewise";
  EXPECT_EQ(h->shared(longest).value, 4);
  EXPECT_EQ(h->shared(longest.substr(1)).version, 0);
  const std::string utf8 = "ratelimit.bucket:\xc3\xa9t\xc3\xa9";
  ASSERT_EQ(swap(*h, utf8, 0, 8).applied, 1);
  EXPECT_EQ(h->shared(utf8).value, 8);
}

TEST_F(SharedState, InvalidKeysAndNullOutParametersAreRefused) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, swap_shared_state);
  const std::string too_long(CONVEYOR_SHARED_KEY_MAX + 1, 'k');
  for (const std::string& key : {std::string(), too_long}) {
    SharedCopy out;
    Status s = h->swap_shared_state(key, 0, 1, &out);
    EXPECT_STATUS(s.code, CONVEYOR_E_INVALID)
        << "a key of " << key.size() << " bytes (storage_plugin.h: \"key empty or longer than "
        << "CONVEYOR_SHARED_KEY_MAX bytes\")";
  }
  EXPECT_EQ(h->shared(too_long.substr(0, CONVEYOR_SHARED_KEY_MAX)).version, 0)
      << "the refused key was stored cut to CONVEYOR_SHARED_KEY_MAX bytes";
  // NULL out-parameters, straight through the table (the binding never
  // passes NULL): CONVEYOR_E_INVALID with nothing changed, never a crash.
  int64_t version = 0, value = 0;
  int32_t applied = 0;
  conveyor_error err = poisoned_error();
  const conveyor_str key{"nulls", 5};
  EXPECT_STATUS(table().swap_shared_state(h->raw(), key, 0, 1, nullptr, &value, &applied, &err),
                CONVEYOR_E_INVALID);
  err = poisoned_error();
  EXPECT_STATUS(table().swap_shared_state(h->raw(), key, 0, 1, &version, nullptr, &applied, &err),
                CONVEYOR_E_INVALID);
  err = poisoned_error();
  EXPECT_STATUS(table().swap_shared_state(h->raw(), key, 0, 1, &version, &value, nullptr, &err),
                CONVEYOR_E_INVALID);
  EXPECT_EQ(h->shared("nulls").version, 0) << "a refused swap must change nothing";
}

TEST_F(SharedState, AppliedSwapsSurviveCloseAndReopen) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_DURABLE);
  {
    auto h = open();
    CONFORMANCE_REQUIRE_SLOT(h, swap_shared_state);
    ASSERT_EQ(swap(*h, "ratelimit.enabled", 0, 1).applied, 1);
    ASSERT_EQ(swap(*h, "ratelimit.enabled", 1, 0).applied, 1);
  }
  auto h = open();
  SharedCopy r = h->shared("ratelimit.enabled");
  EXPECT_EQ(r.version, 2) << "storage_plugin.h: \"An applied swap is durable when the call "
                             "returns\"";
  EXPECT_EQ(r.value, 0);
}

TEST_F(SharedState, TwoHandlesSeeOneRecord) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_MULTI_PROCESS);
  auto a = open();
  CONFORMANCE_REQUIRE_SLOT(a, swap_shared_state);
  auto b = open(/*migrate=*/false);
  ASSERT_EQ(swap(*a, "k", 0, 1).applied, 1);
  SharedCopy lost = swap(*b, "k", 0, 2);
  EXPECT_EQ(lost.applied, 0) << "the second handle's swap from version 0 applied after the first";
  EXPECT_EQ(lost.version, 1);
  EXPECT_EQ(lost.value, 1);
  EXPECT_EQ(swap(*b, "k", 1, 3).applied, 1);
  EXPECT_EQ(a->shared("k").value, 3);
}

TEST_F(SharedState, ConcurrentThreadsLoseNoUpdate) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, swap_shared_state);
  constexpr int kThreads = 8, kIncrements = 40;
  const auto deadline = Clock::now() + kDeadline;
  std::vector<int> applied(kThreads, 0);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      applied[t] = increment(*h, "ratelimit.bucket:hot", kIncrements, deadline, &errors[t]);
    });
  for (auto& t : threads) t.join();
  int total = 0;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
    total += applied[t];
  }
  EXPECT_EQ(total, kThreads * kIncrements);
  SharedCopy end = h->shared("ratelimit.bucket:hot");
  EXPECT_EQ(end.value, total) << "an increment was lost: two swaps from one version applied";
  EXPECT_EQ(end.version, total) << "the version must count every applied swap";
}

// What one caller's share of a concurrent test reports: units added (or
// increments), calls that applied, and what went wrong (empty: nothing).
struct Share {
  int64_t count = 0;
  int64_t applied = 0;
  std::string error;
};

// Runs body in kChildren forked processes and in this one, all at once, each
// on its own handle from open_handle (nothing crosses fork), and returns the
// children's shares, then the parent's. A child reports through a pipe,
// never back into gtest.
constexpr int kChildren = 3;
std::vector<Share> in_processes(const std::function<std::unique_ptr<Handle>()>& open_handle,
                                const std::function<Share(Handle&)>& body) {
  struct Child {
    pid_t pid = -1;
    int out = -1;  // its report: "<count> <applied> <error text>"
  };
  std::vector<Share> shares;
  int go[2];
  if (::pipe(go) != 0) return {Share{0, 0, "pipe failed"}};
  std::vector<Child> children;
  for (int c = 0; c < kChildren; ++c) {
    int fds[2];
    if (::pipe(fds) != 0) return {Share{0, 0, "pipe failed"}};
    const pid_t pid = ::fork();
    if (pid < 0) return {Share{0, 0, "fork failed"}};
    if (pid == 0) {
      ::close(fds[0]);
      ::close(go[1]);
      Share mine;
      {
        std::unique_ptr<Handle> h;
        try {
          h = open_handle();
        } catch (const std::exception& e) {
          mine.error = std::string("its open failed: ") + e.what();
        }
        if (h) {
          char byte = 0;
          (void)::read(go[0], &byte, 1);  // start with the others (EOF: go)
          mine = body(*h);
        }
      }
      const std::string msg =
          std::to_string(mine.count) + " " + std::to_string(mine.applied) + " " + mine.error;
      const bool written = ::write(fds[1], msg.data(), msg.size()) == ssize_t(msg.size());
      ::_exit(written ? 0 : 13);
    }
    ::close(fds[1]);
    children.push_back(Child{pid, fds[0]});
  }
  ::close(go[0]);
  auto h = open_handle();
  ::close(go[1]);  // every child starts now (end of file)
  const Share parent = body(*h);
  for (int c = 0; c < kChildren; ++c) {
    std::string out;
    char buf[512];
    for (ssize_t n; (n = ::read(children[c].out, buf, sizeof buf)) > 0;) out.append(buf, n);
    ::close(children[c].out);
    int status = 0;
    ::waitpid(children[c].pid, &status, 0);
    Share share;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      share.error = "did not exit cleanly (status " + std::to_string(status) + ")";
    } else {
      std::istringstream in(out);
      in >> share.count >> share.applied;
      std::getline(in, share.error);
      if (!share.error.empty() && share.error.front() == ' ') share.error.erase(0, 1);
    }
    shares.push_back(share);
  }
  shares.push_back(parent);
  return shares;
}

TEST_F(SharedState, ConcurrentProcessesLoseNoUpdate) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_MULTI_PROCESS);
  {
    auto h = open();
    CONFORMANCE_REQUIRE_SLOT(h, swap_shared_state);
  }  // closed: no connection may be open across fork()
  constexpr int kIncrements = 40;
  const std::vector<Share> shares =
      in_processes([this] { return open(/*migrate=*/false); },
                   [](Handle& h) {
                     Share s;
                     s.count = increment(h, "ratelimit.bucket:fleet", kIncrements,
                                         Clock::now() + kDeadline, &s.error);
                     return s;
                   });
  ASSERT_EQ(shares.size(), size_t{kChildren + 1}) << shares.front().error;
  int64_t total = 0;
  for (size_t p = 0; p < shares.size(); ++p) {
    EXPECT_TRUE(shares[p].error.empty()) << "process " << p << ": " << shares[p].error;
    EXPECT_EQ(shares[p].count, kIncrements) << "process " << p;
    total += shares[p].count;
  }
  auto h = open(/*migrate=*/false);
  SharedCopy end = h->shared("ratelimit.bucket:fleet");
  EXPECT_EQ(total, (kChildren + 1) * kIncrements);
  EXPECT_EQ(end.value, total) << "an increment was lost across processes: two swaps from one "
                                 "version applied";
  EXPECT_EQ(end.version, total) << "the version must count every applied swap";
}

// ---- ABI 1.3 add_shared_state: a bounded add on the same records ----

class SharedStateAdd : public ConformanceTest {};

// An add that must succeed as a call (whatever it added).
SharedAddCopy add(Handle& h, std::string_view key, int64_t credit, int64_t low, int64_t high,
                  int64_t unit, uint32_t min_count, uint32_t max_count) {
  SharedAddCopy out;
  require_ok(h.add_shared_state(key, credit, low, high, unit, min_count, max_count, &out));
  return out;
}

TEST_F(SharedStateAdd, AddsTheMostUnitsThatStayUnderHigh) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, add_shared_state);
  SharedAddCopy first = add(*h, "k", 0, 0, 100, 10, 1, 3);
  EXPECT_EQ(first.count, 3u) << "a never-written key is (0, 0): 3 units of 10 fit under 100";
  EXPECT_EQ(first.value, 30);
  EXPECT_EQ(first.version, 1);
  SharedAddCopy second = add(*h, "k", 0, 0, 55, 10, 1, 5);
  EXPECT_EQ(second.count, 2u) << "from 30, 2 units of 10 fit under 55 (max_count 5)";
  EXPECT_EQ(second.value, 50);
  EXPECT_EQ(second.version, 2);
  SharedAddCopy full = add(*h, "k", 0, 0, 55, 10, 1, 5);
  EXPECT_EQ(full.count, 0u) << "from 50 no unit of 10 fits under 55";
  EXPECT_EQ(full.version, 2) << "an add of nothing changes nothing";
  EXPECT_EQ(full.value, 50) << "an add of nothing still reports the record";
  SharedCopy read = h->shared("k");
  EXPECT_EQ(read.version, 2);
  EXPECT_EQ(read.value, 50);
  SharedAddCopy exact = add(*h, "k", 0, 0, 60, 10, 1, 5);
  EXPECT_EQ(exact.count, 1u) << "base + unit * count may equal high";
  EXPECT_EQ(exact.value, 60);
}

TEST_F(SharedStateAdd, LowRaisesTheBaseAndCreditLowersItNeverBelowLow) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, add_shared_state);
  SharedAddCopy r = add(*h, "k", 0, 1000, 2000, 100, 1, 1);
  EXPECT_EQ(r.value, 1100) << "base = max(0 - 0, low 1000), plus one unit";
  r = add(*h, "k", 300, 0, 10000, 100, 1, 1);
  EXPECT_EQ(r.value, 900) << "base = max(1100 - credit 300, low 0), plus one unit";
  r = add(*h, "k", 5000, 850, 10000, 1, 1, 1);
  EXPECT_EQ(r.value, 851) << "credit lowers the base only down to low";
  EXPECT_EQ(r.version, 3);
}

TEST_F(SharedStateAdd, FewerThanMinCountChangesNothingAndCreatesNoKey) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, add_shared_state);
  SharedAddCopy r = add(*h, "fresh", 0, 0, 25, 10, 3, 5);
  EXPECT_EQ(r.count, 0u) << "2 units fit, min_count is 3";
  EXPECT_EQ(r.version, 0);
  EXPECT_EQ(r.value, 0);
  EXPECT_EQ(h->shared("fresh").version, 0) << "an add of nothing must not create the key";
  // The credit is not applied either when nothing is added.
  ASSERT_EQ(add(*h, "k", 0, 0, 100, 10, 1, 10).value, 100);
  r = add(*h, "k", 40, 0, 100, 10, 5, 10);
  EXPECT_EQ(r.count, 0u) << "credit 40 frees 4 units, min_count is 5";
  EXPECT_EQ(h->shared("k").value, 100) << "a refused add must not apply its credit";
  EXPECT_EQ(r.version, 1);
}

TEST_F(SharedStateAdd, AddsAndSwapsShareOneVersion) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, add_shared_state);
  CONFORMANCE_REQUIRE_SLOT(h, swap_shared_state);
  ASSERT_EQ(swap(*h, "k", 0, 7).applied, 1);
  SharedAddCopy r = add(*h, "k", 0, 0, 100, 1, 1, 3);
  EXPECT_EQ(r.version, 2) << "an add moves the version a swap set";
  EXPECT_EQ(r.value, 10) << "from the swapped value 7";
  SharedCopy lost = swap(*h, "k", 1, 0);
  EXPECT_EQ(lost.applied, 0) << "a swap from the version before an add must lose";
  EXPECT_EQ(lost.version, 2);
  EXPECT_EQ(lost.value, 10);
  EXPECT_EQ(swap(*h, "k", 2, 3).applied, 1);
  EXPECT_EQ(add(*h, "k", 0, 0, 100, 1, 1, 1).value, 4);
}

TEST_F(SharedStateAdd, ExtremeValuesDoNotOverflow) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, add_shared_state);
  CONFORMANCE_REQUIRE_SLOT(h, swap_shared_state);
  constexpr int64_t kMax = CONVEYOR_SHARED_ADD_MAX;
  ASSERT_EQ(swap(*h, "k", 0, INT64_MIN).applied, 1);
  SharedAddCopy r = add(*h, "k", kMax, -kMax, -kMax + 10, 1, 1, 100);
  EXPECT_EQ(r.count, 10u) << "INT64_MIN is below low: the base is low";
  EXPECT_EQ(r.value, -kMax + 10);
  ASSERT_EQ(swap(*h, "k", 2, INT64_MAX).applied, 1);
  r = add(*h, "k", 0, kMax - 5, kMax, 1, 1, 100);
  EXPECT_EQ(r.count, 0u) << "INT64_MAX is above high: nothing fits";
  EXPECT_EQ(r.value, INT64_MAX);
  r = add(*h, "k", kMax, 0, kMax, 1, 1, 100);
  EXPECT_EQ(r.count, 1u) << "INT64_MAX - 2^62 = 2^62 - 1: one unit fits under 2^62";
  EXPECT_EQ(r.value, kMax);
  r = add(*h, "big", 0, 0, kMax, kMax, 1, UINT32_MAX);
  EXPECT_EQ(r.count, 1u) << "one unit of 2^62 fits under 2^62";
  EXPECT_EQ(r.value, kMax);
}

TEST_F(SharedStateAdd, OutOfRangeInputsAndNullOutParametersAreRefused) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, add_shared_state);
  ASSERT_EQ(add(*h, "k", 0, 0, 100, 10, 1, 1).value, 10);
  constexpr int64_t kMax = CONVEYOR_SHARED_ADD_MAX;
  struct Bad {
    const char* why;
    int64_t credit, low, high, unit;
    uint32_t min_count, max_count;
  };
  const Bad bad[] = {
      {"credit < 0", -1, 0, 100, 10, 1, 1},
      {"credit > CONVEYOR_SHARED_ADD_MAX", kMax + 1, 0, 100, 10, 1, 1},
      {"unit < 1", 0, 0, 100, 0, 1, 1},
      {"unit > CONVEYOR_SHARED_ADD_MAX", 0, 0, 100, kMax + 1, 1, 1},
      {"min_count < 1", 0, 0, 100, 10, 0, 1},
      {"max_count < min_count", 0, 0, 100, 10, 3, 2},
      {"low > high", 0, 101, 100, 10, 1, 1},
      {"low < -CONVEYOR_SHARED_ADD_MAX", 0, -kMax - 1, 100, 10, 1, 1},
      {"high > CONVEYOR_SHARED_ADD_MAX", 0, 0, kMax + 1, 10, 1, 1},
      {"high - low > CONVEYOR_SHARED_ADD_MAX", 0, -kMax, 1, 10, 1, 1},
  };
  for (const Bad& b : bad) {
    SharedAddCopy out;
    Status s =
        h->add_shared_state("k", b.credit, b.low, b.high, b.unit, b.min_count, b.max_count, &out);
    EXPECT_STATUS(s.code, CONVEYOR_E_INVALID) << b.why;
  }
  const std::string too_long(CONVEYOR_SHARED_KEY_MAX + 1, 'k');
  for (const std::string& key : {std::string(), too_long}) {
    SharedAddCopy out;
    EXPECT_STATUS(h->add_shared_state(key, 0, 0, 100, 10, 1, 1, &out).code, CONVEYOR_E_INVALID)
        << "a key of " << key.size() << " bytes";
  }
  int64_t version = 0, value = 0;
  uint32_t count = 0;
  const conveyor_str key{"k", 1};
  conveyor_error err = poisoned_error();
  EXPECT_STATUS(
      table().add_shared_state(h->raw(), key, 0, 0, 100, 10, 1, 1, nullptr, &value, &count, &err),
      CONVEYOR_E_INVALID);
  err = poisoned_error();
  EXPECT_STATUS(
      table().add_shared_state(h->raw(), key, 0, 0, 100, 10, 1, 1, &version, nullptr, &count, &err),
      CONVEYOR_E_INVALID);
  err = poisoned_error();
  EXPECT_STATUS(
      table().add_shared_state(h->raw(), key, 0, 0, 100, 10, 1, 1, &version, &value, nullptr, &err),
      CONVEYOR_E_INVALID);
  SharedCopy after = h->shared("k");
  EXPECT_EQ(after.version, 1) << "a refused add must change nothing";
  EXPECT_EQ(after.value, 10);
}

TEST_F(SharedStateAdd, AppliedAddsSurviveCloseAndReopen) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_DURABLE);
  {
    auto h = open();
    CONFORMANCE_REQUIRE_SLOT(h, add_shared_state);
    ASSERT_EQ(add(*h, "ratelimit.bucket:q", 0, 0, 100, 10, 1, 4).count, 4u);
  }
  auto h = open();
  SharedCopy r = h->shared("ratelimit.bucket:q");
  EXPECT_EQ(r.version, 1) << "an applied add is durable when the call returns";
  EXPECT_EQ(r.value, 40);
}

// Adds of 1..7 units under one high, until none fits: what every caller got
// sums to exactly high (nothing added twice, nothing past the bound), and the
// version counts the applied adds.
Share fill(Handle& h, std::string_view key, int64_t high, Clock::time_point deadline) {
  Share s;
  while (Clock::now() < deadline) {
    SharedAddCopy out;
    Status st = h.add_shared_state(key, 0, 0, high, 1, 1, 7, &out);
    if (st.code == CONVEYOR_E_UNAVAILABLE) continue;  // transient: the host retries too
    if (!st.ok()) {
      std::ostringstream msg;
      msg << st;
      s.error = msg.str();
      return s;
    }
    if (out.value > high) {
      s.error = "an add left the value at " + std::to_string(out.value) + ", above high";
      return s;
    }
    if (out.count == 0) {
      if (out.value != high)
        s.error = "an add found nothing to add at value " + std::to_string(out.value) +
                  ", below high " + std::to_string(high);
      return s;
    }
    s.count += out.count;
    ++s.applied;
  }
  s.error = "did not fill the record in time";
  return s;
}

TEST_F(SharedStateAdd, ConcurrentThreadsNeverAddPastTheBound) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, add_shared_state);
  constexpr int kThreads = 8;
  constexpr int64_t kHigh = 400;
  const auto deadline = Clock::now() + kDeadline;
  std::vector<Share> shares(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] { shares[t] = fill(*h, "ratelimit.bucket:hot", kHigh, deadline); });
  for (auto& t : threads) t.join();
  int64_t units = 0, adds = 0;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(shares[t].error.empty()) << "thread " << t << ": " << shares[t].error;
    units += shares[t].count;
    adds += shares[t].applied;
  }
  EXPECT_EQ(units, kHigh) << "the units every caller was told it added must sum to high";
  SharedCopy end = h->shared("ratelimit.bucket:hot");
  EXPECT_EQ(end.value, kHigh);
  EXPECT_EQ(end.version, adds) << "the version must count every applied add";
}

TEST_F(SharedStateAdd, ConcurrentProcessesNeverAddPastTheBound) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_MULTI_PROCESS);
  {
    auto h = open();
    CONFORMANCE_REQUIRE_SLOT(h, add_shared_state);
  }  // closed: no connection may be open across fork()
  constexpr int64_t kHigh = 300;
  const std::vector<Share> shares = in_processes(
      [this] { return open(/*migrate=*/false); },
      [](Handle& h) { return fill(h, "ratelimit.bucket:fleet", kHigh, Clock::now() + kDeadline); });
  ASSERT_EQ(shares.size(), size_t{kChildren + 1}) << shares.front().error;
  int64_t units = 0, adds = 0;
  for (size_t p = 0; p < shares.size(); ++p) {
    EXPECT_TRUE(shares[p].error.empty()) << "process " << p << ": " << shares[p].error;
    units += shares[p].count;
    adds += shares[p].applied;
  }
  EXPECT_EQ(units, kHigh) << "units added twice or lost across processes";
  auto h = open(/*migrate=*/false);
  SharedCopy end = h->shared("ratelimit.bucket:fleet");
  EXPECT_EQ(end.value, kHigh);
  EXPECT_EQ(end.version, adds) << "the version must count every applied add";
}

// ---- ABI 1.5 add_shared_states: add_shared_state on many keys in one call ----

class AddSharedStates : public ConformanceTest {};

KeyedAdd keyed(std::string key, int64_t credit, int64_t low, int64_t high, int64_t unit,
               uint32_t min_count, uint32_t max_count) {
  return KeyedAdd{std::move(key), credit, low, high, unit, min_count, max_count};
}

// A key's record: a read by swap_shared_state where the plugin has it, else
// an add that cannot fit (high = low = -CONVEYOR_SHARED_ADD_MAX: no unit
// fits above any base) and so changes nothing and reports the record.
SharedCopy read(Handle& h, const std::string& key) {
  if (h.has_slot(host::StorageSlot::kSwapSharedState)) return h.shared(key);
  constexpr int64_t kMax = CONVEYOR_SHARED_ADD_MAX;
  const SharedAddCopy r = h.add_many({keyed(key, 0, -kMax, -kMax, 1, 1, 1)}).at(0);
  return SharedCopy{r.version, r.value, 0};
}

std::string describe(const SharedAddCopy& r) {
  return "(version " + std::to_string(r.version) + ", value " + std::to_string(r.value) +
         ", count " + std::to_string(r.count) + ")";
}

// Each round is applied twice: as one add_shared_states call on the keys
// "many:*" and as add_shared_state calls, one by one, on the keys "one:*",
// which hold the same records. Each add's result, and the records after,
// must be the same: rounds include adds of nothing, never-written keys,
// credit, low, and keys in a different order each round, and the last add of
// each round applies.
TEST_F(AddSharedStates, EachAddIsAddSharedStateOnItsKey) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, add_shared_states);
  CONFORMANCE_REQUIRE_SLOT(h, add_shared_state);
  const std::vector<std::vector<KeyedAdd>> rounds = {
      {keyed("a", 0, 0, 100, 10, 1, 3), keyed("b", 0, 1000, 2000, 100, 1, 1),
       keyed("c", 0, 0, 25, 10, 3, 5), keyed("d", 0, 0, 7, 1, 1, 100),
       keyed("e", 0, -50, 50, 5, 2, 4)},
      {keyed("e", 10, 0, 100, 1, 1, 1), keyed("a", 0, 0, 55, 10, 1, 5),
       keyed("d", 0, 0, 7, 1, 1, 1), keyed("b", 300, 0, 10000, 100, 1, 1),
       keyed("f", 0, 0, 9, 3, 1, 2)},
      {keyed("c", 0, 0, 25, 10, 1, 5), keyed("a", 40, 0, 100, 10, 5, 10),
       keyed("b", 5000, 850, 10000, 1, 1, 1), keyed("d", 3, 0, 7, 1, 1, 2),
       keyed("e", 0, 0, 11, 1, 1, 1), keyed("f", 0, 0, 100, 1, 1, 1)},
  };
  for (size_t round = 0; round < rounds.size(); ++round) {
    std::vector<KeyedAdd> many = rounds[round];
    for (KeyedAdd& a : many) a.key = "many:" + a.key;
    const std::vector<SharedAddCopy> got = h->add_many(many);
    ASSERT_EQ(got.size(), many.size());
    for (size_t i = 0; i < many.size(); ++i) {
      const KeyedAdd& a = rounds[round][i];
      SharedAddCopy want;
      require_ok(h->add_shared_state("one:" + a.key, a.credit, a.low, a.high, a.unit, a.min_count,
                                     a.max_count, &want));
      EXPECT_TRUE(got[i].version == want.version && got[i].value == want.value &&
                  got[i].count == want.count)
          << "round " << round << ", adds[" << i << "] on key \"" << a.key
          << "\": add_shared_states reported " << describe(got[i]) << ", add_shared_state "
          << describe(want) << " on the same record (storage_plugin.h: \"adds[i] is applied to "
          << "adds[i].key exactly as add_shared_state would\")";
    }
    if (round == 0) {  // what the header's arithmetic gives, from never-written keys
      EXPECT_EQ(got[0].value, 30);
      EXPECT_EQ(got[1].value, 1100);
      EXPECT_EQ(got[2].count, 0u) << "2 units fit, min_count is 3";
      EXPECT_EQ(got[3].value, 7);
      EXPECT_EQ(got[4].value, 20);
    }
  }
  for (const char* k : {"a", "b", "c", "d", "e", "f"}) {
    const SharedCopy many = read(*h, std::string("many:") + k);
    const SharedCopy one = read(*h, std::string("one:") + k);
    EXPECT_EQ(many.version, one.version) << "key " << k;
    EXPECT_EQ(many.value, one.value) << "key " << k;
  }
}

TEST_F(AddSharedStates, AnAddOfNothingLeavesItsRecordAndDoesNotStopTheOthers) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, add_shared_states);
  const std::vector<SharedAddCopy> before =
      h->add_many({keyed("full", 0, 0, 100, 10, 1, 10), keyed("credited", 0, 0, 100, 10, 1, 10)});
  ASSERT_EQ(before.at(0).value, 100);
  ASSERT_EQ(before.at(1).value, 100);
  const std::vector<SharedAddCopy> r = h->add_many({
      keyed("full", 0, 0, 100, 10, 1, 1),        // nothing fits
      keyed("fresh", 0, 0, 25, 10, 3, 5),        // 2 units fit, min_count is 3
      keyed("credited", 40, 0, 100, 10, 5, 10),  // credit frees 4 units, min_count is 5
      keyed("after", 0, 0, 100, 10, 1, 2),
  });
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].count, 0u);
  EXPECT_EQ(r[0].version, 1) << "an add of nothing changes nothing";
  EXPECT_EQ(r[0].value, 100) << "an add of nothing still reports the record";
  EXPECT_EQ(r[1].count, 0u) << "2 units fit, min_count is 3";
  EXPECT_EQ(r[1].version, 0);
  EXPECT_EQ(r[1].value, 0);
  EXPECT_EQ(r[2].count, 0u) << "credit 40 frees 4 units, min_count is 5";
  EXPECT_EQ(r[2].version, 1);
  EXPECT_EQ(r[2].value, 100) << "a refused add must not apply its credit";
  EXPECT_EQ(r[3].count, 2u) << "an add of nothing before it must not stop the others";
  EXPECT_EQ(r[3].version, 1);
  EXPECT_EQ(r[3].value, 20);
  EXPECT_EQ(read(*h, "fresh").version, 0) << "an add of nothing must not create the key";
  const SharedCopy full = read(*h, "full"), credited = read(*h, "credited");
  EXPECT_EQ(full.version, 1);
  EXPECT_EQ(full.value, 100);
  EXPECT_EQ(credited.version, 1);
  EXPECT_EQ(credited.value, 100);
  EXPECT_EQ(read(*h, "after").value, 20);
}

TEST_F(AddSharedStates, NoAddsIsANoOp) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, add_shared_states);
  EXPECT_TRUE(h->add_many({}).empty());
  conveyor_error err = poisoned_error();
  EXPECT_STATUS(table().add_shared_states(h->raw(), nullptr, 0, nullptr, &err), CONVEYOR_OK)
      << "storage_plugin.h: \"n == 0 is a no-op (OK)\", whatever adds and out are: " << err.message;
  const conveyor_shared_add one{conveyor_str{"k", 1}, 0, 0, 100, 1, 1, 1};
  conveyor_shared_added out{host::kUnwrittenValue, host::kUnwrittenValue, host::kUnwrittenCount, 0};
  err = poisoned_error();
  EXPECT_STATUS(table().add_shared_states(h->raw(), &one, 0, &out, &err), CONVEYOR_OK)
      << err.message;
  EXPECT_EQ(read(*h, "k").version, 0) << "n == 0 applies nothing";
}

// Whether text names index as a number of its own ("adds[3]", "add 3", ...).
bool names_index(const std::string& text, size_t index) {
  const std::string n = std::to_string(index);
  for (size_t at = text.find(n); at != std::string::npos; at = text.find(n, at + 1)) {
    const bool before = at == 0 || text[at - 1] < '0' || text[at - 1] > '9';
    const size_t end = at + n.size();
    const bool after = end == text.size() || text[end] < '0' || text[end] > '9';
    if (before && after) return true;
  }
  return false;
}

// Every refusal is CONVEYOR_E_INVALID and changes nothing on any key, not
// even on the keys of valid adds listed before the bad one.
TEST_F(AddSharedStates, InvalidBatchesAreRefusedAndChangeNothingOnAnyKey) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, add_shared_states);
  const std::vector<std::string> keys = {"batch:a", "batch:b", "batch:c", "batch:d"};
  {
    std::vector<KeyedAdd> fill;
    for (size_t i = 0; i < keys.size(); ++i)
      fill.push_back(keyed(keys[i], 0, 0, 1000, 10, 1, static_cast<uint32_t>(i + 1)));
    h->add_many(fill);
  }
  std::vector<SharedCopy> before;
  for (const std::string& k : keys) before.push_back(read(*h, k));
  const auto unchanged = [&](const std::string& why) {
    for (size_t i = 0; i < keys.size(); ++i) {
      const SharedCopy now = read(*h, keys[i]);
      EXPECT_TRUE(now.version == before[i].version && now.value == before[i].value)
          << why << ": key \"" << keys[i] << "\" moved from (" << before[i].version << ", "
          << before[i].value << ") to (" << now.version << ", " << now.value
          << ") (storage_plugin.h: \"CONVEYOR_E_INVALID, nothing changed\")";
    }
    EXPECT_EQ(read(*h, "batch:new").version, 0) << why << ": a refused call created a key";
  };
  // Valid adds on two keys and a new one, then bad (index 3), then one more
  // valid add.
  const auto with_bad = [&](const KeyedAdd& bad) {
    return std::vector<KeyedAdd>{
        keyed(keys[0], 0, 0, 1000, 1, 1, 1), keyed(keys[1], 0, 0, 1000, 1, 1, 1),
        keyed("batch:new", 0, 0, 1000, 1, 1, 1), bad, keyed(keys[3], 0, 0, 1000, 1, 1, 1)};
  };

  {
    std::vector<KeyedAdd> too_many;
    for (const std::string& k : keys) too_many.push_back(keyed(k, 0, 0, 1000, 1, 1, 1));
    too_many.push_back(keyed("batch:new", 0, 0, 1000, 1, 1, 1));
    for (int i = 0; too_many.size() <= CONVEYOR_SHARED_ADDS_MAX; ++i)
      too_many.push_back(keyed("batch:more:" + std::to_string(i), 0, 0, 1000, 1, 1, 1));
    std::vector<SharedAddCopy> out;
    EXPECT_STATUS(h->add_shared_states(too_many, &out).code, CONVEYOR_E_INVALID)
        << "n is " << too_many.size() << ", above CONVEYOR_SHARED_ADDS_MAX";
    unchanged("n above CONVEYOR_SHARED_ADDS_MAX");
    EXPECT_EQ(read(*h, "batch:more:0").version, 0);
  }
  {
    std::vector<SharedAddCopy> out;
    EXPECT_STATUS(h->add_shared_states(with_bad(keyed(keys[0], 0, 0, 1000, 1, 1, 1)), &out).code,
                  CONVEYOR_E_INVALID)
        << "the key \"" << keys[0] << "\" listed twice";
    unchanged("the same key twice");
  }
  constexpr int64_t kMax = CONVEYOR_SHARED_ADD_MAX;
  struct Bad {
    const char* why;
    KeyedAdd add;
  };
  const std::string too_long(CONVEYOR_SHARED_KEY_MAX + 1, 'k');
  const Bad bad[] = {
      {"unit 0", keyed(keys[2], 0, 0, 100, 0, 1, 1)},
      {"credit < 0", keyed(keys[2], -1, 0, 100, 10, 1, 1)},
      {"credit > CONVEYOR_SHARED_ADD_MAX", keyed(keys[2], kMax + 1, 0, 100, 10, 1, 1)},
      {"unit > CONVEYOR_SHARED_ADD_MAX", keyed(keys[2], 0, 0, 100, kMax + 1, 1, 1)},
      {"min_count 0", keyed(keys[2], 0, 0, 100, 10, 0, 1)},
      {"max_count < min_count", keyed(keys[2], 0, 0, 100, 10, 5, 4)},
      {"low > high", keyed(keys[2], 0, 101, 100, 10, 1, 1)},
      {"low < -CONVEYOR_SHARED_ADD_MAX", keyed(keys[2], 0, -kMax - 1, 100, 10, 1, 1)},
      {"high > CONVEYOR_SHARED_ADD_MAX", keyed(keys[2], 0, 0, kMax + 1, 10, 1, 1)},
      {"high - low > CONVEYOR_SHARED_ADD_MAX", keyed(keys[2], 0, -kMax, 1, 10, 1, 1)},
      {"an empty key", keyed("", 0, 0, 100, 10, 1, 1)},
      {"a key above CONVEYOR_SHARED_KEY_MAX bytes", keyed(too_long, 0, 0, 100, 10, 1, 1)},
  };
  for (const Bad& b : bad) {
    std::vector<SharedAddCopy> out;
    const Status s = h->add_shared_states(with_bad(b.add), &out);
    EXPECT_STATUS(s.code, CONVEYOR_E_INVALID) << b.why << " at index 3";
    if (s.code == CONVEYOR_E_INVALID) {
      EXPECT_TRUE(names_index(s.message, 3))
          << b.why << " at index 3: the message \"" << s.message << "\" does not name index 3 "
          << "(storage_plugin.h: \"any add whose arguments add_shared_state refuses (its index "
          << "in the message)\")";
    }
    unchanged(std::string(b.why) + " at index 3");
  }

  // NULL adds or out with n > 0, through the table: the binding never passes them.
  const std::vector<conveyor_shared_add> adds = {
      conveyor_shared_add{conveyor_str{keys[0].data(), keys[0].size()}, 0, 0, 1000, 1, 1, 1},
      conveyor_shared_add{conveyor_str{"batch:new", 9}, 0, 0, 1000, 1, 1, 1}};
  std::vector<conveyor_shared_added> out(adds.size());
  conveyor_error err = poisoned_error();
  EXPECT_STATUS(table().add_shared_states(h->raw(), nullptr, adds.size(), out.data(), &err),
                CONVEYOR_E_INVALID)
      << "adds NULL with n 2";
  if (std::string problems = check_error(CONVEYOR_E_INVALID, err); !problems.empty())
    ADD_FAILURE() << "adds NULL: " << problems;
  err = poisoned_error();
  EXPECT_STATUS(table().add_shared_states(h->raw(), adds.data(), adds.size(), nullptr, &err),
                CONVEYOR_E_INVALID)
      << "out NULL with n 2";
  if (std::string problems = check_error(CONVEYOR_E_INVALID, err); !problems.empty())
    ADD_FAILURE() << "out NULL: " << problems;
  unchanged("adds or out NULL");
}

TEST_F(AddSharedStates, VersionsMoveAsAddSharedStatesDo) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, add_shared_states);
  CONFORMANCE_REQUIRE_SLOT(h, swap_shared_state);
  ASSERT_EQ(swap(*h, "k", 0, 7).applied, 1);
  std::vector<SharedAddCopy> r =
      h->add_many({keyed("k", 0, 0, 100, 1, 1, 3), keyed("j", 0, 0, 100, 1, 1, 1)});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].version, 2) << "an applied add moves the version a swap set by one";
  EXPECT_EQ(r[0].value, 10) << "from the swapped value 7";
  EXPECT_EQ(r[1].version, 1) << "the first add on a never-written key makes version 1";
  EXPECT_EQ(r[1].value, 1);
  SharedCopy lost = swap(*h, "k", 1, 0);
  EXPECT_EQ(lost.applied, 0) << "a swap from the version before the add must lose";
  EXPECT_EQ(lost.version, 2);
  EXPECT_EQ(lost.value, 10);
  EXPECT_EQ(swap(*h, "j", 0, 5).applied, 0) << "a swap from version 0 after the add must lose";
  EXPECT_EQ(swap(*h, "k", 2, 3).applied, 1);
  r = h->add_many({keyed("k", 0, 0, 3, 1, 1, 1), keyed("j", 0, 0, 100, 1, 1, 1)});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].count, 0u) << "from 3 nothing fits under 3";
  EXPECT_EQ(r[0].version, 3) << "an add of nothing does not move the version";
  EXPECT_EQ(r[1].version, 2);
  EXPECT_EQ(swap(*h, "k", 3, 0).applied, 1) << "the add of nothing left version 3 current";
  EXPECT_EQ(swap(*h, "j", 2, 0).applied, 1);
}

TEST_F(AddSharedStates, TwoHandlesSeeTheAdds) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_MULTI_PROCESS);
  auto a = open();
  CONFORMANCE_REQUIRE_SLOT(a, add_shared_states);
  auto b = open(/*migrate=*/false);
  ASSERT_EQ(a->add_many({keyed("x", 0, 0, 100, 10, 1, 2), keyed("y", 0, 0, 100, 1, 1, 1)}).size(),
            2u);
  SharedCopy x = read(*b, "x"), y = read(*b, "y");
  EXPECT_EQ(x.version, 1);
  EXPECT_EQ(x.value, 20);
  EXPECT_EQ(y.version, 1);
  EXPECT_EQ(y.value, 1);
  std::vector<SharedAddCopy> r =
      b->add_many({keyed("y", 0, 0, 100, 1, 1, 1), keyed("x", 0, 0, 30, 10, 1, 5)});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].value, 2) << "the second handle adds to the first one's record";
  EXPECT_EQ(r[1].count, 1u) << "from 20, one unit of 10 fits under 30";
  EXPECT_EQ(read(*a, "x").value, 30);
  EXPECT_EQ(read(*a, "y").version, 2);
}

// Batches of adds of 1..7 units under one high per key, over keys, each
// batch in a rotated order, until every key reports nothing to add at high.
// units[k] / adds[k]: what the caller was told it added to keys[k].
struct BatchShare {
  std::vector<int64_t> units, adds;
  std::string error;
};
BatchShare fill_many(Handle& h, const std::vector<std::string>& keys, int64_t high, int seed,
                     Clock::time_point deadline) {
  BatchShare s;
  s.units.assign(keys.size(), 0);
  s.adds.assign(keys.size(), 0);
  std::vector<size_t> pending(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) pending[i] = i;
  for (int round = 0; !pending.empty(); ++round) {
    if (Clock::now() >= deadline) {
      s.error = "did not fill the records in time";
      return s;
    }
    std::rotate(pending.begin(), pending.begin() + (round + seed) % pending.size(), pending.end());
    std::vector<KeyedAdd> adds;
    for (size_t p = 0; p < pending.size(); ++p)
      adds.push_back(keyed(keys[pending[p]], 0, 0, high, 1, 1,
                           static_cast<uint32_t>(1 + (seed + round + p) % 7)));
    std::vector<SharedAddCopy> out;
    const Status st = h.add_shared_states(adds, &out);
    if (st.code == CONVEYOR_E_UNAVAILABLE) continue;  // transient: the host reads again
    if (!st.ok() || out.size() != adds.size()) {
      std::ostringstream msg;
      msg << st;
      s.error = msg.str();
      return s;
    }
    std::vector<size_t> still;
    for (size_t p = 0; p < pending.size(); ++p) {
      const size_t k = pending[p];
      if (out[p].value > high) {
        s.error =
            "an add left \"" + keys[k] + "\" at " + std::to_string(out[p].value) + ", above high";
        return s;
      }
      if (out[p].count == 0) {
        if (out[p].value != high) {
          s.error = "an add found nothing to add to \"" + keys[k] + "\" at value " +
                    std::to_string(out[p].value) + ", below high " + std::to_string(high);
          return s;
        }
        continue;  // full: no longer listed
      }
      s.units[k] += out[p].count;
      ++s.adds[k];
      still.push_back(k);
    }
    pending = std::move(still);
  }
  return s;
}

std::vector<std::string> fleet_keys(int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back("ratelimit.key:q:" + std::to_string(i));
  return keys;
}

// Threads on one handle, and where the plugin is multi-process half of them
// on a second handle: each fills an overlapping window of the keys. Per key,
// what every caller was told it added sums to exactly high.
TEST_F(AddSharedStates, ConcurrentBatchesOnOverlappingKeysNeverAddPastTheBound) {
  auto a = open();
  CONFORMANCE_REQUIRE_SLOT(a, add_shared_states);
  std::unique_ptr<Handle> b;
  if (has(CONVEYOR_CAP_MULTI_PROCESS)) b = open(/*migrate=*/false);
  constexpr int kThreads = 8, kKeys = 6, kWindow = 4;
  constexpr int64_t kHigh = 120;
  const std::vector<std::string> keys = fleet_keys(kKeys);
  const auto deadline = Clock::now() + kDeadline;
  std::vector<std::vector<size_t>> windows(kThreads);
  std::vector<BatchShare> shares(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    std::vector<std::string> mine;
    for (int w = 0; w < kWindow; ++w) {
      windows[t].push_back((t + w) % kKeys);
      mine.push_back(keys[(t + w) % kKeys]);
    }
    Handle* h = (b && t % 2 == 1) ? b.get() : a.get();
    threads.emplace_back([&, t, mine, h] { shares[t] = fill_many(*h, mine, kHigh, t, deadline); });
  }
  for (auto& t : threads) t.join();
  std::vector<int64_t> units(kKeys, 0), adds(kKeys, 0);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(shares[t].error.empty()) << "thread " << t << ": " << shares[t].error;
    for (int w = 0; w < kWindow; ++w) {
      units[windows[t][w]] += shares[t].units[w];
      adds[windows[t][w]] += shares[t].adds[w];
    }
  }
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_EQ(units[k], kHigh) << "key \"" << keys[k] << "\": the units every caller was told "
                               << "it added must sum to high (more: added past the bound)";
    const SharedCopy end = read(*a, keys[k]);
    EXPECT_EQ(end.value, kHigh) << "key \"" << keys[k] << "\"";
    EXPECT_EQ(end.version, adds[k]) << "key \"" << keys[k]
                                    << "\": the version must count every "
                                       "applied add";
  }
}

TEST_F(AddSharedStates, ConcurrentProcessesNeverAddPastTheBound) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_MULTI_PROCESS);
  {
    auto h = open();
    CONFORMANCE_REQUIRE_SLOT(h, add_shared_states);
  }  // closed: no connection may be open across fork()
  constexpr int kKeys = 5;
  constexpr int64_t kHigh = 100;
  const std::vector<std::string> keys = fleet_keys(kKeys);
  const std::vector<Share> shares =
      in_processes([this] { return open(/*migrate=*/false); },
                   [&](Handle& h) {
                     const int mine = static_cast<int>(::getpid() % 7);  // orders differ
                     const BatchShare b = fill_many(h, keys, kHigh, mine, Clock::now() + kDeadline);
                     Share s;
                     s.error = b.error;
                     for (int k = 0; k < kKeys; ++k) {
                       s.count += b.units[k];
                       s.applied += b.adds[k];
                     }
                     return s;
                   });
  ASSERT_EQ(shares.size(), size_t{kChildren + 1}) << shares.front().error;
  int64_t units = 0, adds = 0;
  for (size_t p = 0; p < shares.size(); ++p) {
    EXPECT_TRUE(shares[p].error.empty()) << "process " << p << ": " << shares[p].error;
    units += shares[p].count;
    adds += shares[p].applied;
  }
  EXPECT_EQ(units, kKeys * kHigh) << "units added twice or lost across processes";
  auto h = open(/*migrate=*/false);
  int64_t versions = 0;
  for (const std::string& k : keys) {
    const SharedCopy end = read(*h, k);
    EXPECT_EQ(end.value, kHigh) << "key \"" << k << "\"";
    versions += end.version;
  }
  EXPECT_EQ(versions, adds) << "the versions must count every applied add";
}

}  // namespace
}  // namespace conveyor::conformance
