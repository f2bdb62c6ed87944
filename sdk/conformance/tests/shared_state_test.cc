// ABI 1.2 swap_shared_state: a compare-and-set of (version, value) per key,
// linearizable across threads, handles and processes (storage_plugin.h).
#include "fixture.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
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
  CONFORMANCE_REQUIRE_SLOT_1_2(h, swap_shared_state);
  SharedCopy r = h->shared("ratelimit.bucket:never");
  EXPECT_EQ(r.version, 0);
  EXPECT_EQ(r.value, 0);
  EXPECT_EQ(r.applied, 0) << "a read (expected_version < 0) never applies";
}

TEST_F(SharedState, SwapFromTheCurrentVersionAppliesAndBumpsIt) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT_1_2(h, swap_shared_state);
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
  CONFORMANCE_REQUIRE_SLOT_1_2(h, swap_shared_state);
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
  CONFORMANCE_REQUIRE_SLOT_1_2(h, swap_shared_state);
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
  CONFORMANCE_REQUIRE_SLOT_1_2(h, swap_shared_state);
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
  CONFORMANCE_REQUIRE_SLOT_1_2(h, swap_shared_state);
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
    CONFORMANCE_REQUIRE_SLOT_1_2(h, swap_shared_state);
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
  CONFORMANCE_REQUIRE_SLOT_1_2(a, swap_shared_state);
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
  CONFORMANCE_REQUIRE_SLOT_1_2(h, swap_shared_state);
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

// Children open their own handles (nothing crosses fork) and increment the
// same key as the parent; each reports how many of its swaps applied.
TEST_F(SharedState, ConcurrentProcessesLoseNoUpdate) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_MULTI_PROCESS);
  {
    auto h = open();
    CONFORMANCE_REQUIRE_SLOT_1_2(h, swap_shared_state);
  }  // closed: no connection may be open across fork()
  constexpr int kChildren = 3, kIncrements = 40;
  struct Child {
    pid_t pid = -1;
    int out = -1;  // its report: "<applied> <error text>"
  };
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<Child> children;
  for (int c = 0; c < kChildren; ++c) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      // Child: plain calls, the outcome through the pipe, never back into gtest.
      ::close(fds[0]);
      ::close(go[1]);
      std::string report;
      int applied = 0;
      {
        std::unique_ptr<Handle> h;
        try {
          h = open(/*migrate=*/false);
        } catch (const std::exception& e) {
          report = std::string("its open failed: ") + e.what();
        }
        if (h) {
          char byte = 0;
          (void)::read(go[0], &byte, 1);  // start with the others (EOF: go)
          std::string error;
          applied = increment(*h, "ratelimit.bucket:fleet", kIncrements, Clock::now() + kDeadline,
                              &error);
          report = error;
        }
      }
      const std::string msg = std::to_string(applied) + " " + report;
      const bool written = ::write(fds[1], msg.data(), msg.size()) == ssize_t(msg.size());
      ::_exit(written ? 0 : 13);
    }
    ::close(fds[1]);
    children.push_back(Child{pid, fds[0]});
  }
  ::close(go[0]);
  auto h = open(/*migrate=*/false);
  ::close(go[1]);  // every child starts now (end of file)
  std::string error;
  int total =
      increment(*h, "ratelimit.bucket:fleet", kIncrements, Clock::now() + kDeadline, &error);
  EXPECT_TRUE(error.empty()) << "parent: " << error;
  for (int c = 0; c < kChildren; ++c) {
    std::string out;
    char buf[512];
    for (ssize_t n; (n = ::read(children[c].out, buf, sizeof buf)) > 0;) out.append(buf, n);
    ::close(children[c].out);
    int status = 0;
    ::waitpid(children[c].pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "child " << c << " did not exit cleanly (status " << status << ")";
    std::istringstream in(out);
    int applied = 0;
    in >> applied;
    std::string why;
    std::getline(in, why);
    if (!why.empty() && why.front() == ' ') why.erase(0, 1);
    EXPECT_TRUE(why.empty()) << "child " << c << ": " << why;
    EXPECT_EQ(applied, kIncrements) << "child " << c;
    total += applied;
  }
  SharedCopy end = h->shared("ratelimit.bucket:fleet");
  EXPECT_EQ(total, (kChildren + 1) * kIncrements);
  EXPECT_EQ(end.value, total) << "an increment was lost across processes: two swaps from one "
                                 "version applied";
  EXPECT_EQ(end.version, total) << "the version must count every applied swap";
}

}  // namespace
}  // namespace conveyor::conformance
