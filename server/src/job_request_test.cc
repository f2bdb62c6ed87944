// Job requests: one validation for the CLI and the API.
#include <conveyor/job_request.hpp>
#include <conveyor/validation.hpp>

#include <gtest/gtest.h>

#include <cmath>

namespace conveyor {
namespace {

std::string field_of(const JobRequest& r) {
  try {
    validate_job_request(r);
  } catch (const ValidationError& e) {
    return e.field();
  }
  return "";
}

JobRequest ok() {
  JobRequest r;
  r.queue = "email";
  r.kind = "noop";
  return r;
}

TEST(JobRequest, ValidRequestsPass) {
  EXPECT_EQ(field_of(ok()), "");
  JobRequest r = ok();
  r.payload = R"({"ms": 5})";
  r.max_attempts = 1;
  r.delay_s = kMaxDelaySeconds;
  EXPECT_EQ(field_of(r), "");
}

TEST(JobRequest, EachBadFieldIsNamed) {
  JobRequest r = ok();
  r.queue = "bad queue";
  EXPECT_EQ(field_of(r), "queue");
  r = ok();
  r.kind = "has space";
  EXPECT_EQ(field_of(r), "kind");
  r = ok();
  r.payload = "{not json";
  EXPECT_EQ(field_of(r), "payload");
  r = ok();
  r.payload = std::string(kMaxPayloadBytes + 1, ' ');
  EXPECT_EQ(field_of(r), "payload");
  r = ok();
  r.max_attempts = 0;
  EXPECT_EQ(field_of(r), "max_attempts");
  for (double bad : {-1.0, kMaxDelaySeconds + 1, std::nan(""), HUGE_VAL}) {
    r = ok();
    r.delay_s = bad;
    EXPECT_EQ(field_of(r), "delay") << bad;
  }
  for (int32_t bad : {0, -1, kMaxJobCost + 1}) {
    r = ok();
    r.cost = bad;
    EXPECT_EQ(field_of(r), "cost") << bad;
  }
  r = ok();
  r.cost = kMaxJobCost;
  EXPECT_EQ(field_of(r), "");
  // A key: at most kMaxJobKeyBytes bytes of UTF-8; the empty key is a key.
  for (const std::string& good :
       {std::string(), std::string("tenant-42"), std::string(kMaxJobKeyBytes, 'k'),
        std::string("caf\xc3\xa9 \xf0\x9f\x9a\x80 \xe2\x82\xac")}) {
    r = ok();
    r.key = good;
    EXPECT_EQ(field_of(r), "") << good;
  }
  for (const std::string& bad :
       {std::string(kMaxJobKeyBytes + 1, 'k'), std::string("a\xff"), std::string("\xc3"),
        std::string("\xc0\xaf"), std::string("\xed\xa0\x80"), std::string("\xf4\x90\x80\x80")}) {
    r = ok();
    r.key = bad;
    EXPECT_EQ(field_of(r), "key") << bad.size();
  }
}

TEST(JobRequest, KeyMessagesSayWhatIsAllowed) {
  JobRequest r = ok();
  r.key = std::string(kMaxJobKeyBytes + 1, 'k');
  try {
    validate_job_request(r);
    ADD_FAILURE() << "a 201-byte key was accepted";
  } catch (const ValidationError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("key is 201 bytes; the longest is 200 bytes (UTF-8)", 0),
              0u)
        << e.what();
  }
  r.key = "ab\xff";
  try {
    validate_job_request(r);
    ADD_FAILURE() << "a key that is not UTF-8 was accepted";
  } catch (const ValidationError& e) {
    EXPECT_EQ(std::string(e.what()), "key must be UTF-8 text; byte 2 is not, got \"ab\\xff\"");
  }
}

TEST(JobRequest, ToNewJobSchedulesByDelay) {
  JobRequest r = ok();
  r.delay_s = 1.5;
  r.priority = 4;
  const NewJob j = to_new_job(r, 1'000'000);
  EXPECT_EQ(j.run_at_us, 2'500'000);
  EXPECT_EQ(j.priority, 4);
  EXPECT_EQ(j.max_attempts, 0);  // the engine's default
  EXPECT_EQ(j.payload, "{}");
  EXPECT_EQ(j.cost, 1);
  r.cost = 7;
  EXPECT_EQ(to_new_job(r, 0).cost, 7);
  EXPECT_EQ(j.key, "");
  r.key = "tenant-42";
  EXPECT_EQ(to_new_job(r, 0).key, "tenant-42");
}

}  // namespace
}  // namespace conveyor
