// Concurrency: claimers on several threads, handles and processes never
// receive the same job (storage_plugin.h claim: "Two concurrent claims (any
// thread, any process) never return the same job").
#include "fixture.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace conveyor::conformance {
namespace {

class Concurrency : public ConformanceTest {};

using Clock = std::chrono::steady_clock;
constexpr auto kDeadline = std::chrono::seconds(60);

// What every claimer saw, merged.
struct Tally {
  std::mutex mu;
  std::vector<int64_t> ids;         // every job id claimed, duplicates kept
  std::vector<std::string> errors;  // unexpected statuses
  std::atomic<int64_t> claimed{0};
  std::atomic<int64_t> lost{0};  // completions that came back LEASE_LOST
};

enum class Step { kClaimed, kNothingReady, kRetry, kFailed };

// One claim of up to 7 jobs from queue "load", completed at once.
Step claim_batch(Handle& h, Tally& tally, Clock::time_point deadline) {
  std::vector<JobCopy> jobs;
  Status s = h.claim("load", 7, next_lease_token(), kT0, kT0 + 1000 * kLease, &jobs);
  if (s.code == CONVEYOR_E_UNAVAILABLE) return Step::kRetry;  // transient: the host retries
  if (!s.ok()) {
    std::ostringstream msg;
    msg << s;
    std::lock_guard lock(tally.mu);
    tally.errors.push_back(msg.str());
    return Step::kFailed;
  }
  if (jobs.empty()) return Step::kNothingReady;
  std::vector<conveyor_lease> leases;
  for (const JobCopy& j : jobs) leases.push_back(j.lease());
  std::vector<conveyor_status> results;
  Status c = h.complete(leases, kT0 + 1, &results);
  while (c.code == CONVEYOR_E_UNAVAILABLE && Clock::now() < deadline)
    c = h.complete(leases, kT0 + 1, &results);
  {
    std::lock_guard lock(tally.mu);
    for (const JobCopy& j : jobs) tally.ids.push_back(j.id);
    if (!c.ok()) {
      std::ostringstream msg;
      msg << c;
      tally.errors.push_back(msg.str());
    }
  }
  for (conveyor_status r : results)
    if (r != CONVEYOR_OK) tally.lost.fetch_add(1);
  tally.claimed.fetch_add(static_cast<int64_t>(jobs.size()));
  return c.ok() ? Step::kClaimed : Step::kFailed;
}

// Claims until `total` jobs have been claimed overall (or the deadline
// passes). Nothing ready is retried: another claimer may hold the rest
// between its claim and its commit.
void claim_until_done(Handle& h, int64_t total, Tally& tally, Clock::time_point deadline) {
  while (tally.claimed.load() < total && Clock::now() < deadline) {
    const Step step = claim_batch(h, tally, deadline);
    if (step == Step::kFailed) return;
    if (step != Step::kClaimed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Every enqueued id claimed exactly once, nothing else.
void expect_each_claimed_once(const std::vector<int64_t>& enqueued, Tally& tally) {
  std::lock_guard lock(tally.mu);
  for (const std::string& e : tally.errors) ADD_FAILURE() << "a claimer failed: " << e;
  std::map<int64_t, int> seen;
  for (int64_t id : tally.ids) ++seen[id];
  int duplicates = 0;
  int64_t example = 0;
  for (const auto& [id, n] : seen)
    if (n > 1) ++duplicates, example = id;
  EXPECT_EQ(duplicates, 0) << duplicates << " job(s) were handed to more than one claimer (e.g. "
                           << "job " << example << ")";
  const std::set<int64_t> want(enqueued.begin(), enqueued.end());
  std::set<int64_t> got;
  for (const auto& [id, n] : seen) got.insert(id);
  EXPECT_EQ(got.size(), want.size())
      << "claimed " << got.size() << " distinct jobs of " << want.size() << " enqueued";
  EXPECT_TRUE(got == want) << "the claimed ids are not the enqueued ids";
  EXPECT_EQ(tally.lost.load(), 0) << "completions under a fresh lease came back LEASE_LOST";
}

std::vector<int64_t> enqueue_load(Handle& h, int n) {
  return h.add_all(std::vector<JobSpec>(n, JobSpec{.queue = "load"}));
}

TEST_F(Concurrency, EightThreadsOnOneHandleClaimEachJobOnce) {
  constexpr int kJobs = 2000;
  auto h = open();
  const std::vector<int64_t> ids = enqueue_load(*h, kJobs);
  Tally tally;
  const auto deadline = Clock::now() + kDeadline;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] { claim_until_done(*h, kJobs, tally, deadline); });
  for (auto& t : threads) t.join();
  expect_each_claimed_once(ids, tally);
  EXPECT_EQ(h->stats_of("load", kT0 + 1).value_or(StatsCopy{}).completed, kJobs);
}

TEST_F(Concurrency, TwoHandlesWithFourThreadsEachClaimEachJobOnce) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_MULTI_PROCESS);
  constexpr int kJobs = 2000;
  auto a = open();
  auto b = open();
  const std::vector<int64_t> ids = enqueue_load(*a, kJobs);
  Tally tally;
  const auto deadline = Clock::now() + kDeadline;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] { claim_until_done(t % 2 ? *a : *b, kJobs, tally, deadline); });
  for (auto& t : threads) t.join();
  expect_each_claimed_once(ids, tally);
  EXPECT_EQ(b->stats_of("load", kT0 + 1).value_or(StatsCopy{}).completed, kJobs);
}

// A child process opens its own handle (nothing is inherited across fork) and
// claims alongside the parent; it reports its ids through a pipe.
TEST_F(Concurrency, TwoProcessesClaimEachJobOnce) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_MULTI_PROCESS);
  constexpr int kJobs = 1000;
  std::vector<int64_t> ids;
  {
    auto h = open();
    ids = enqueue_load(*h, kJobs);
  }  // closed: no connection may be open across fork()
  ASSERT_FALSE(HasFailure());
  // fds: child -> parent ("R" once it has claimed a first batch, then its
  // ids; or "X" and why it gave up before that); go: parent -> child (one
  // byte: go on), so both claim at once; errs: the child's stderr.
  int fds[2], go[2], errs[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(errs), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0) << "fork failed";
  if (pid == 0) {
    // Child: plain calls, results through the pipe, never back into gtest.
    ::close(fds[0]);
    ::close(go[1]);
    ::close(errs[0]);
    ::dup2(errs[1], STDERR_FILENO);
    const auto give_up = [&](int code, const std::string& why) {
      const std::string msg = "X" + why;
      if (::write(fds[1], msg.data(), msg.size()) < 0) code = 13;
      ::_exit(code);
    };
    int code = 0;
    {
      std::unique_ptr<Handle> h;
      try {
        h = open(/*migrate=*/false);
      } catch (const std::exception& e) {
        give_up(10, std::string("its open failed: ") + e.what());
      } catch (...) {
        give_up(10, "its open threw a non-standard exception");
      }
      std::string out;
      // Signals "ready" after its first batch, so both processes surely claim.
      bool signalled = false;
      for (;;) {
        if (!signalled && !out.empty()) {
          char byte = 'R';
          if (::write(fds[1], &byte, 1) != 1 || ::read(go[0], &byte, 1) != 1) ::_exit(13);
          signalled = true;
        }
        std::vector<JobCopy> jobs;
        Status s = h->claim("load", 5, next_lease_token(), kT0, kT0 + 1000 * kLease, &jobs);
        if (s.code == CONVEYOR_E_UNAVAILABLE) continue;
        if (!s.ok()) {
          std::ostringstream why;
          why << "its claim failed: " << s;
          if (!signalled) give_up(11, why.str());
          code = 11;
          break;
        }
        if (jobs.empty()) {
          // Every job was enqueued before the fork: none ready at the start
          // means this process does not see them.
          if (!signalled)
            give_up(15, "its first claim found no job on queue 'load', so it does not see the " +
                            std::to_string(kJobs) +
                            " jobs the parent enqueued before the fork (is the storage not shared "
                            "between processes, as CONVEYOR_CAP_MULTI_PROCESS promises?)");
          break;
        }
        std::vector<conveyor_lease> leases;
        for (const JobCopy& j : jobs) leases.push_back(j.lease());
        std::vector<conveyor_status> results;
        Status c = h->complete(leases, kT0 + 1, &results);
        if (!c.ok()) {
          std::ostringstream why;
          why << "its complete failed: " << c;
          if (!signalled) give_up(12, why.str());
          code = 12;
          break;
        }
        for (const JobCopy& j : jobs) out += std::to_string(j.id) + "\n";
      }
      for (size_t off = 0; off < out.size();) {
        const ssize_t n = ::write(fds[1], out.data() + off, out.size() - off);
        if (n <= 0) ::_exit(13);
        off += static_cast<size_t>(n);
      }
    }                                                           // handle closed
    if (code == 0 && ::testing::Test::HasFailure()) code = 14;  // a convention broken in the child
    ::_exit(code);
  }
  ::close(fds[1]);
  ::close(go[0]);
  ::close(errs[1]);
  std::string child_err;
  std::thread err_reader([&] {
    char buf[4096];
    for (ssize_t n; (n = ::read(errs[0], buf, sizeof buf)) > 0;) child_err.append(buf, n);
  });
  std::unique_ptr<Handle> h;
  std::string child_out;
  char ready = 0;
  try {
    h = open(/*migrate=*/false);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  // Start together, then read the child's ids on a thread while claiming too.
  const bool got_first = h && ::read(fds[0], &ready, 1) == 1;
  const bool started = got_first && ready == 'R' && ::write(go[1], &ready, 1) == 1;
  ::close(go[1]);  // a child still waiting sees end-of-file and gives up
  std::thread reader([&] {
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) child_out.append(buf, n);
  });
  Tally tally;
  const auto deadline = Clock::now() + kDeadline;
  bool child_done = false;
  int status = 0;
  while (started && Clock::now() < deadline) {
    const Step step = claim_batch(*h, tally, deadline);
    if (step == Step::kFailed) break;
    if (step == Step::kClaimed) continue;
    // Nothing ready for us. Once the child had exited before this claim, that is final.
    if (step == Step::kNothingReady && child_done) break;
    if (!child_done) child_done = ::waitpid(pid, &status, WNOHANG) == pid;
    if (!child_done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  bool killed = false;
  if (!child_done) {
    // Past the deadline the child is stopped; otherwise (a failed claim here) it finishes.
    if (started && Clock::now() >= deadline && ::kill(pid, SIGKILL) == 0) killed = true;
    ::waitpid(pid, &status, 0);
  }
  reader.join();
  err_reader.join();
  ::close(fds[0]);
  ::close(errs[0]);
  const std::string exit_text =
      WIFEXITED(status)     ? "exit status " + std::to_string(WEXITSTATUS(status))
      : WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                            : "status " + std::to_string(status);
  const std::string child_stderr =
      child_err.empty() ? " (its stderr was empty)" : "; its stderr:\n" + child_err;
  if (!started) {
    std::string what;
    if (!h)
      what = "this process could not open its handle (see the failure above)";
    else if (got_first && ready == 'X')
      what = "the child gave up before claiming: " + child_out;
    else
      what = "the child exited before reporting that it had claimed a first batch";
    FAIL() << "the two processes did not start claiming: " << what << " (child " << exit_text << ")"
           << child_stderr;
  }
  ASSERT_FALSE(killed) << "the two processes did not finish within " << kDeadline.count() << " s";
  ASSERT_TRUE(WIFEXITED(status)) << "the child process died of signal " << WTERMSIG(status)
                                 << child_stderr;
  ASSERT_EQ(WEXITSTATUS(status), 0)
      << "the child process failed (11 claim, 12 complete, 13 pipe, 14 convention)" << child_stderr;
  std::istringstream in(child_out);
  int64_t from_child = 0;
  {
    std::lock_guard lock(tally.mu);
    for (int64_t id; in >> id; ++from_child) tally.ids.push_back(id);
  }
  EXPECT_GT(from_child, 0) << "the child claimed nothing: the test did not run two claimers";
  expect_each_claimed_once(ids, tally);
}

TEST_F(Concurrency, ConcurrentEnqueuesGetDistinctIds) {
  auto h = open();
  constexpr int kThreads = 8, kBatches = 25, kPerBatch = 4;
  std::mutex mu;
  std::vector<int64_t> all;
  std::vector<std::string> errors;
  const auto deadline = Clock::now() + kDeadline;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int b = 0; b < kBatches; ++b) {
        std::vector<int64_t> ids;
        Status s = h->enqueue(std::vector<JobSpec>(kPerBatch), &ids);
        while (s.code == CONVEYOR_E_UNAVAILABLE && Clock::now() < deadline)
          s = h->enqueue(std::vector<JobSpec>(kPerBatch), &ids);  // transient: the host retries
        std::lock_guard lock(mu);
        if (!s.ok()) {
          std::ostringstream msg;
          msg << s;
          errors.push_back(msg.str());
          return;
        }
        all.insert(all.end(), ids.begin(), ids.end());
      }
    });
  for (auto& t : threads) t.join();
  for (const std::string& e : errors) ADD_FAILURE() << e;
  EXPECT_EQ(all.size(), size_t{kThreads * kBatches * kPerBatch});
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), all.size())
      << "concurrent enqueues handed out the same id twice";
  EXPECT_EQ(h->stats_of("default", kT0).value_or(StatsCopy{}).pending,
            int64_t{kThreads * kBatches * kPerBatch});
}

TEST_F(Concurrency, MixedOperationsOnOneHandle) {
  // Threading: "every function on one handle may be called concurrently".
  auto h = open();
  constexpr int kJobs = 300;
  enqueue_load(*h, kJobs);
  Tally tally;
  std::atomic<bool> stop{false};
  std::atomic<int> reader_errors{0};
  const auto deadline = Clock::now() + kDeadline;
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] { claim_until_done(*h, kJobs, tally, deadline); });
  threads.emplace_back([&] {  // readers and writers of everything else
    for (int i = 0; !stop.load(); ++i) {
      std::vector<StatsCopy> stats;
      std::vector<QueueCopy> queues;
      std::vector<LimitCopy> limits;
      int64_t marker = 0;
      uint32_t rescued = 0;
      for (const Status& s :
           {h->queue_stats(kT0, &stats), h->list_queues(&queues), h->list_rate_limits(&limits),
            h->change_marker(&marker), h->set_rate_limit("side", 1 + i % 5, 1, kT0),
            h->set_queue_paused("side", i % 2 == 0, kT0), h->rescue_expired(kT0, 10, &rescued)})
        if (!s.ok() && s.code != CONVEYOR_E_UNAVAILABLE) {
          ADD_FAILURE() << s;
          reader_errors.fetch_add(1);
        }
      if (reader_errors.load() > 0) return;
    }
  });
  for (size_t t = 0; t < 3; ++t) threads[t].join();
  stop.store(true);
  threads.back().join();
  EXPECT_EQ(tally.claimed.load(), kJobs);
  std::lock_guard lock(tally.mu);
  for (const std::string& e : tally.errors) ADD_FAILURE() << e;
  EXPECT_EQ(std::set<int64_t>(tally.ids.begin(), tally.ids.end()).size(), tally.ids.size())
      << "a job was claimed twice";
}

}  // namespace
}  // namespace conveyor::conformance
