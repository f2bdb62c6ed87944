// ABI 1.6's fields on the API: NewJob.timeout_seconds is validated and
// reaches storage in whole milliseconds, Job.started_at and
// Job.timeout_seconds round-trip through the proto mapping, and the core's
// duration text (the CLI's --timeout) parses with units.
#include <conveyor/api_messages.hpp>
#include <conveyor/job_request.hpp>
#include <conveyor/validation.hpp>

#include <gtest/gtest.h>

#include <limits>

#include "conveyor/v1/task.pb.h"

namespace conveyor::api {
namespace {

JobRequest request(double timeout_s) {
  JobRequest r;
  r.queue = "q";
  r.kind = "noop";
  r.timeout_s = timeout_s;
  return r;
}

std::string field_of(const JobRequest& r) {
  try {
    validate_job_request(r);
  } catch (const ValidationError& e) {
    return e.field();
  }
  return "";
}

TEST(JobTimeoutApi, NewJobTimeoutIsValidatedAndStoredInMilliseconds) {
  for (double ok : {0.0, 0.001, 1.5, 604800.0}) EXPECT_EQ(field_of(request(ok)), "") << ok;
  for (double bad : {-1.0, 0.0004, 604800.001, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()})
    EXPECT_EQ(field_of(request(bad)), "timeout") << bad;
  try {
    validate_job_request(request(-2));
    FAIL() << "a negative timeout passed";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("from 0.001 to 604800"), std::string::npos) << e.what();
  }
  EXPECT_EQ(to_new_job(request(1.5), 10).timeout_ms, 1500);
  EXPECT_EQ(to_new_job(request(0.0016), 10).timeout_ms, 2) << "rounded to whole milliseconds";
  EXPECT_EQ(to_new_job(request(0), 10).timeout_ms, 0);

  // Through the proto: the field is timeoutSeconds in errors.
  v1::NewJob m;
  m.set_queue("q");
  m.set_kind("noop");
  m.set_timeout_seconds(30);
  EXPECT_EQ(from_proto(m, "job.").timeout_s, 30);
  v1::NewJob back;
  to_proto(from_proto(m, "job."), back);
  EXPECT_EQ(back.timeout_seconds(), 30);
  m.set_timeout_seconds(-1);
  try {
    from_proto(m, "job.");
    FAIL() << "a negative timeoutSeconds passed";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "job.timeoutSeconds");
  }
}

TEST(JobTimeoutApi, JobStartedAtAndTimeoutRoundTrip) {
  Job j;
  j.id = 7;
  j.queue = "q";
  j.kind = "noop";
  j.state = JobState::kCompleted;
  j.run_at_us = 1'700'000'000'000'000;
  j.created_at_us = j.run_at_us;
  j.started_at_us = j.run_at_us + 1'500'000;
  j.finalized_at_us = j.run_at_us + 2'000'000;
  j.timeout_ms = 45'000;
  v1::Job m;
  to_proto(j, m);
  EXPECT_EQ(m.started_at(), "2023-11-14T22:13:21.500000Z");
  EXPECT_EQ(m.timeout_seconds(), 45);
  const Job back = from_proto(m);
  EXPECT_EQ(back.started_at_us, j.started_at_us);
  EXPECT_EQ(back.timeout_ms, 45'000);
  // Never started: empty on the wire, 0 back.
  j.started_at_us = 0;
  to_proto(j, m);
  EXPECT_EQ(m.started_at(), "");
  EXPECT_EQ(from_proto(m).started_at_us, 0);
}

TEST(JobTimeoutText, DurationsWithUnits) {
  EXPECT_EQ(parse_timeout_ms("30s", "--timeout"), 30'000);
  EXPECT_EQ(parse_timeout_ms("30", "--timeout"), 30'000);
  EXPECT_EQ(parse_timeout_ms("1.5m", "--timeout"), 90'000);
  EXPECT_EQ(parse_timeout_ms("250ms", "--timeout"), 250);
  EXPECT_EQ(parse_timeout_ms("2h", "--timeout"), 7'200'000);
  EXPECT_EQ(parse_timeout_ms("7d", "--timeout"), kMaxJobTimeoutMs);
  EXPECT_EQ(parse_timeout_ms(".5s", "--timeout"), 500);
  for (const char* bad : {"", "0", "0ms", "-1", "8d", "7.0001d", "10 s", "s", "ms", "1x", "0x10",
                          "inf", "nan", "1e400", " 5s"}) {
    try {
      parse_timeout_ms(bad, "--timeout");
      ADD_FAILURE() << "\"" << bad << "\" parsed";
    } catch (const ValidationError& e) {
      EXPECT_EQ(e.field(), "timeout");
      EXPECT_EQ(std::string(e.what()).rfind("--timeout must be a duration from 1ms to 7d", 0), 0u)
          << e.what();
    }
  }
  EXPECT_THROW(validate_job_timeout_ms(-1), ValidationError);
  EXPECT_THROW(validate_job_timeout_ms(kMaxJobTimeoutMs + 1), ValidationError);
  EXPECT_NO_THROW(validate_job_timeout_ms(0));
  EXPECT_NO_THROW(validate_job_timeout_ms(kMaxJobTimeoutMs));
}

}  // namespace
}  // namespace conveyor::api
