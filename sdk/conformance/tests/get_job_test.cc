// get_job: every field a job was enqueued with comes back unchanged.
#include "fixture.hpp"

#include <cstddef>

namespace conveyor::conformance {
namespace {

class GetJob : public ConformanceTest {};

TEST_F(GetJob, FieldsRoundTrip) {
  auto h = open();
  // A NUL byte and multi-byte UTF-8 inside the payload: opaque bytes.
  const std::string payload = std::string("{\"to\":\"jos\xC3\xA9@example.com\",\"nul\":\"") +
                              std::string(1, '\0') + "\",\"jp\":\"\xE6\x97\xA5\xE6\x9C\xAC\"}";
  const JobSpec spec{.queue = "mail.outbound:eu-1",
                     .kind = "send.welcome.v2",
                     .payload = payload,
                     .priority = -17,
                     .max_attempts = 9,
                     .run_at_us = kT0 - 123};
  const int64_t id = h->add(spec);
  JobCopy j = h->job(id, kT0);
  EXPECT_EQ(j.id, id);
  EXPECT_STATE(j.state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(j.queue, spec.queue);
  EXPECT_EQ(j.kind, spec.kind);
  EXPECT_EQ(j.payload.size(), payload.size()) << "payload length changed (a NUL byte cut it?)";
  EXPECT_EQ(j.payload, payload) << "payload bytes changed";
  EXPECT_EQ(j.priority, -17);
  EXPECT_EQ(j.max_attempts, 9);
  EXPECT_EQ(j.run_at, kT0 - 123);
  EXPECT_EQ(j.attempt, 0);
  EXPECT_EQ(j.finalized_at, 0);
  EXPECT_EQ(j.lease_token, 0);
  EXPECT_EQ(j.lease_expires, 0);
  EXPECT_EQ(j.last_error, "");
  EXPECT_GE(j.struct_size, offsetof(conveyor_job, cost));  // the 1.0 size
  // The claim reports the same bytes.
  JobCopy claimed = h->claim_one(spec.queue, kT0);
  EXPECT_EQ(claimed.payload, payload);
  EXPECT_EQ(claimed.kind, spec.kind);
}

TEST_F(GetJob, PayloadOfEveryByteValueRoundTrips) {
  auto h = open();
  // conveyor_new_job.payload: "opaque bytes (JSON by convention)".
  std::string payload;
  for (int i = 0; i < 256; ++i) payload += static_cast<char>(i);
  const int64_t id = h->add(JobSpec{.payload = payload});
  EXPECT_EQ(h->job(id, kT0).payload, payload)
      << "a payload holding all 256 byte values did not round-trip (storage_plugin.h: payload is "
         "\"opaque bytes\"; store it as a blob, not as text)";
}

TEST_F(GetJob, EmptyPayloadWithNullDataRoundTrips) {
  auto h = open();
  conveyor_new_job job{
      conveyor_str{"default", 7}, conveyor_str{"k", 1}, conveyor_str{nullptr, 0}, 0, 1, kT0};
  int64_t id = 0;
  conveyor_error err = poisoned_error();
  const conveyor_status code = table().enqueue(h->raw(), &job, 1, &id, &err);
  ASSERT_STATUS(code, CONVEYOR_OK) << ": " << err.message
                                   << " (conveyor_str: \"data may be NULL only when len is 0\"; "
                                      "payload \"may be empty\")";
  EXPECT_EQ(h->job(id, kT0).payload, "");
}

TEST_F(GetJob, LargePayloadRoundTrips) {
  auto h = open();
  std::string payload(1 << 20, '\0');
  uint32_t x = 12345;
  for (char& c : payload) {
    x = x * 1103515245u + 12345u;
    c = "abcdefghijklmnopqrstuvwxyz0123456789{}[]:,\""[(x >> 16) % 43];
  }
  const int64_t id = h->add(JobSpec{.payload = payload});
  JobCopy j = h->job(id, kT0);
  EXPECT_EQ(j.payload.size(), payload.size());
  EXPECT_TRUE(j.payload == payload) << "a 1 MiB payload came back different";
  JobCopy claimed = h->claim_one("default", kT0);
  EXPECT_TRUE(claimed.payload == payload) << "claim reported a different 1 MiB payload";
}

TEST_F(GetJob, UnknownIdIsNotFound) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  std::optional<JobCopy> j;
  Status s = h->get_job(id + 1000, kT0, &j);
  EXPECT_STATUS(s.code, CONVEYOR_E_NOT_FOUND) << s;
  for (int64_t bad : {int64_t{0}, int64_t{-1}}) {
    Status b = h->get_job(bad, kT0, &j);
    EXPECT_TRUE(b.code == CONVEYOR_E_NOT_FOUND || b.code == CONVEYOR_E_INVALID)
        << "get_job(" << bad << "): " << b;
  }
}

TEST_F(GetJob, ReportsTheLeaseOfARunningJobOnly) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  JobCopy running = h->claim_one("default", kT0);
  JobCopy during = h->job(id, kT0);
  EXPECT_EQ(during.lease_token, running.lease_token);
  h->complete_one(running.lease(), kT0 + 1);
  JobCopy after = h->job(id, kT0 + 1);
  EXPECT_EQ(after.lease_token, 0)
      << "storage_plugin.h conveyor_job.lease_token: \"0 unless RUNNING\"";
  EXPECT_EQ(after.lease_expires, 0);
}

}  // namespace
}  // namespace conveyor::conformance
