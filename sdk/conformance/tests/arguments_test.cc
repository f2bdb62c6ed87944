// Bad arguments get an error, never a crash. An out-parameter or callback a
// function writes through or calls is required (results are "caller-owned, n
// elements"; "*out_claimed = number claimed"; "on_job is called once per
// claimed job"): NULL there is an invalid argument, CONVEYOR_E_INVALID (the
// host does not retry it), and nothing happens. err itself may be NULL
// ("writes ... into the caller's conveyor_error (when err is non-NULL)").
#include "fixture.hpp"

#include <functional>

namespace conveyor::conformance {
namespace {

class NullArguments : public ConformanceTest {};
class NullError : public ConformanceTest {};

conveyor_str cstr(std::string_view s) { return conveyor_str{s.data(), s.size()}; }

// Checks the status of a call given a NULL it cannot use.
void expect_invalid(const char* what, conveyor_status code, const conveyor_error& err) {
  EXPECT_STATUS(code, CONVEYOR_E_INVALID) << what
                                          << " (a NULL out-parameter or callback is an invalid "
                                             "argument: CONVEYOR_E_INVALID, not a crash)";
  if (code != CONVEYOR_OK)
    if (std::string problems = check_error(code, err); !problems.empty())
      ADD_FAILURE() << what << ": " << problems;
}

TEST_F(NullArguments, OpenWithNullOut) {
  std::vector<conveyor_option> c;
  for (const auto& [k, v] : options()) c.push_back({cstr(k), cstr(v)});
  conveyor_error err = poisoned_error();
  expect_invalid("open(out = NULL)", table().open(c.data(), c.size(), nullptr, &err), err);
}

TEST_F(NullArguments, EnqueueWithNullJobsOrIds) {
  auto h = open();
  conveyor_new_job job{cstr("default"), cstr("k"), cstr("{}"), 0, 1, kT0};
  int64_t id = 0;
  conveyor_error err = poisoned_error();
  expect_invalid("enqueue(jobs = NULL, n = 1)", table().enqueue(h->raw(), nullptr, 1, &id, &err),
                 err);
  err = poisoned_error();
  expect_invalid("enqueue(out_ids = NULL, n = 1)",
                 table().enqueue(h->raw(), &job, 1, nullptr, &err), err);
  EXPECT_TRUE(h->claim_jobs("default", 10, kT0).empty())
      << "enqueue stored a job although it could not report its id";
}

TEST_F(NullArguments, ClaimWithNullCallbackOrCount) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  uint32_t n = 0;
  conveyor_error err = poisoned_error();
  expect_invalid("claim(on_job = NULL)",
                 table().claim(h->raw(), cstr("default"), 1, next_lease_token(), kT0, kT0 + kLease,
                               nullptr, nullptr, &n, &err),
                 err);
  err = poisoned_error();
  int ctx = 0;
  expect_invalid(
      "claim(out_claimed = NULL)",
      table().claim(
          h->raw(), cstr("default"), 1, next_lease_token(), kT0, kT0 + kLease,
          [](void* c, const conveyor_job*) { ++*static_cast<int*>(c); }, &ctx, nullptr, &err),
      err);
  EXPECT_STATE(h->job(id, kT0).state, CONVEYOR_JOB_AVAILABLE)
      << "a rejected claim took the job anyway: it would never be reported to a worker";
}

TEST_F(NullArguments, LeaseBatchesWithNullArrays) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  JobCopy running = h->claim_one("default", kT0);
  const conveyor_lease lease = running.lease();
  conveyor_status result = 0;
  struct Op {
    const char* name;
    std::function<conveyor_status(const conveyor_lease*, conveyor_status*, conveyor_error*)> call;
  };
  const std::vector<Op> ops = {
      {"complete",
       [&](auto* l, auto* r, auto* e) { return table().complete(h->raw(), l, 1, kT0, r, e); }},
      {"extend_leases",
       [&](auto* l, auto* r, auto* e) {
         return table().extend_leases(h->raw(), l, 1, kT0 + 99 * kLease, r, e);
       }},
      {"release",
       [&](auto* l, auto* r, auto* e) { return table().release(h->raw(), l, 1, kT0, r, e); }},
  };
  for (const Op& op : ops) {
    conveyor_error err = poisoned_error();
    expect_invalid((std::string(op.name) + "(leases = NULL, n = 1)").c_str(),
                   op.call(nullptr, &result, &err), err);
    err = poisoned_error();
    expect_invalid((std::string(op.name) + "(results = NULL, n = 1)").c_str(),
                   op.call(&lease, nullptr, &err), err);
  }
  JobCopy j = h->job(id, kT0);
  EXPECT_STATE(j.state, CONVEYOR_JOB_RUNNING) << "a rejected call changed the job";
  EXPECT_EQ(j.lease_expires, running.lease_expires);
  EXPECT_EQ(j.attempt, 1);
}

TEST_F(NullArguments, CountsWithNullOut) {
  auto h = open();
  const int64_t done = h->add(JobSpec{.queue = "done"});
  h->complete_one(h->claim_one("done", kT0).lease(), kT0);
  const int64_t running = h->add(JobSpec{.queue = "run"});
  h->claim_one("run", kT0);
  conveyor_error err = poisoned_error();
  expect_invalid("rescue_expired(out_rescued = NULL)",
                 table().rescue_expired(h->raw(), kT0 + 99 * kLease, 10, nullptr, &err), err);
  err = poisoned_error();
  expect_invalid("purge_finished(out_deleted = NULL)",
                 table().purge_finished(h->raw(), kT0 + 99 * kLease, 10, nullptr, &err), err);
  err = poisoned_error();
  expect_invalid("change_marker(out_marker = NULL)", table().change_marker(h->raw(), nullptr, &err),
                 err);
  EXPECT_STATE(h->job(running, kT0).state, CONVEYOR_JOB_RUNNING) << "a rejected rescue rescued";
  EXPECT_STATE(h->job(done, kT0).state, CONVEYOR_JOB_COMPLETED) << "a rejected purge purged";
}

TEST_F(NullArguments, ReportsWithNullCallback) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  ASSERT_TRUE(h->set_rate_limit("default", 1, 1, kT0).ok());
  conveyor_error err = poisoned_error();
  expect_invalid("get_job(on_job = NULL)",
                 table().get_job(h->raw(), id, kT0, nullptr, nullptr, &err), err);
  err = poisoned_error();
  expect_invalid("queue_stats(on_stats = NULL)",
                 table().queue_stats(h->raw(), kT0, nullptr, nullptr, &err), err);
  err = poisoned_error();
  expect_invalid("list_queues(on_queue = NULL)",
                 table().list_queues(h->raw(), nullptr, nullptr, &err), err);
  err = poisoned_error();
  expect_invalid("list_rate_limits(on_limit = NULL)",
                 table().list_rate_limits(h->raw(), nullptr, nullptr, &err), err);
}

TEST_F(NullArguments, WaitForNotificationWithNullCallback) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_NOTIFY);
  auto h = open();
  conveyor_error err = poisoned_error();
  expect_invalid("wait_for_notification(on_notify = NULL)",
                 table().wait_for_notification(h->raw(), 1000, nullptr, nullptr, &err), err);
}

TEST_F(NullArguments, EmptyLeaseBatchesAreNoOps) {
  auto h = open();
  conveyor_error err = poisoned_error();
  // n == 0: nothing to read or write, so NULL arrays are fine.
  EXPECT_STATUS(table().complete(h->raw(), nullptr, 0, kT0, nullptr, &err), CONVEYOR_OK)
      << err.message;
  EXPECT_STATUS(table().extend_leases(h->raw(), nullptr, 0, kT0, nullptr, &err), CONVEYOR_OK)
      << err.message;
  EXPECT_STATUS(table().release(h->raw(), nullptr, 0, kT0, nullptr, &err), CONVEYOR_OK)
      << err.message;
}

// ---- err = NULL ----

TEST_F(NullError, FailingCallsReturnTheirStatus) {
  auto h = open();
  int ctx = 0;
  auto count = [](void* c, const conveyor_job*) { ++*static_cast<int*>(c); };
  EXPECT_STATUS(table().get_job(h->raw(), 424242, kT0, count, &ctx, nullptr), CONVEYOR_E_NOT_FOUND);
  EXPECT_STATUS(table().cancel(h->raw(), 424242, kT0, nullptr), CONVEYOR_E_NOT_FOUND);
  EXPECT_STATUS(table().delete_rate_limit(h->raw(), cstr("none"), nullptr), CONVEYOR_E_NOT_FOUND);
  EXPECT_STATUS(table().set_rate_limit(h->raw(), cstr("q"), -1.0, 1, kT0, nullptr),
                CONVEYOR_E_INVALID);
  conveyor_new_job bad{cstr("default"), cstr(""), cstr("{}"), 0, 1, kT0};
  int64_t id = 0;
  EXPECT_STATUS(table().enqueue(h->raw(), &bad, 1, &id, nullptr), CONVEYOR_E_INVALID);
  const int64_t real = h->add(JobSpec{});
  JobCopy running = h->claim_one("default", kT0);
  EXPECT_STATUS(table().fail(h->raw(), conveyor_lease{real, running.lease_token + 1}, cstr("x"), -1,
                             kT0, nullptr),
                CONVEYOR_E_LEASE_LOST);
  EXPECT_EQ(ctx, 0);
}

TEST_F(NullError, OpenWithUnknownOption) {
  std::vector<conveyor_option> c;
  for (const auto& [k, v] : options()) c.push_back({cstr(k), cstr(v)});
  c.push_back({cstr("conformance_no_such_option"), cstr("1")});
  conveyor_storage* out = nullptr;
  const conveyor_status code = table().open(c.data(), c.size(), &out, nullptr);
  if (code == CONVEYOR_OK && out != nullptr) table().close(out);
  EXPECT_STATUS(code, CONVEYOR_E_INVALID);
}

}  // namespace
}  // namespace conveyor::conformance
