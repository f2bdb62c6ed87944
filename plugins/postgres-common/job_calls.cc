#include "job_calls.hpp"

#include "connection_pool.hpp"
#include "due_wakes.hpp"
#include "pg_run.hpp"
#include "pg_text.hpp"

#include <pqxx/nontransaction>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string_view>
#include <utility>

namespace conveyor::postgres {

using sdk::Error;

CostedJobs split_costed(std::span<const conveyor_new_job_v2> jobs) {
  CostedJobs out;
  out.jobs.reserve(jobs.size());
  out.costs.reserve(jobs.size());
  for (const conveyor_new_job_v2& j : jobs) {
    out.jobs.push_back(j.job);
    out.costs.push_back(j.cost);
  }
  return out;
}

KeyedJobs split_keyed(std::span<const conveyor_new_job_v3> jobs) {
  KeyedJobs out;
  out.jobs.reserve(jobs.size());
  out.costs.reserve(jobs.size());
  out.keys.reserve(jobs.size());
  for (const conveyor_new_job_v3& j : jobs) {
    out.jobs.push_back(j.job.job);
    out.costs.push_back(j.job.cost);
    out.keys.push_back(sdk::view(j.key));
  }
  return out;
}

TimedJobs split_timed(std::span<const conveyor_new_job_v4> jobs) {
  TimedJobs out;
  out.jobs.reserve(jobs.size());
  out.costs.reserve(jobs.size());
  out.keys.reserve(jobs.size());
  out.timeouts.reserve(jobs.size());
  for (const conveyor_new_job_v4& j : jobs) {
    out.jobs.push_back(j.job.job.job);
    out.costs.push_back(j.job.job.cost);
    out.keys.push_back(sdk::view(j.job.key));
    out.timeouts.push_back(j.timeout_ms);
  }
  return out;
}

EnqueueArrays encode_enqueue_batch(std::span<const conveyor_new_job> jobs, int64_t now_us,
                                   std::span<const int32_t> costs,
                                   std::span<const std::string_view> keys,
                                   std::span<const int64_t> timeouts) {
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string where = "enqueue: job " + std::to_string(i) + ": ";
    if (keys[i].size() > CONVEYOR_JOB_KEY_MAX)
      throw Error(CONVEYOR_E_INVALID,
                  where + "key longer than " + std::to_string(CONVEYOR_JOB_KEY_MAX) + " bytes");
    if (!is_storable_text(keys[i]))
      throw Error(CONVEYOR_E_INVALID, where + "key must be valid UTF-8 without NUL bytes");
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    const conveyor_new_job& j = jobs[i];
    const std::string where = "enqueue: job " + std::to_string(i) + ": ";
    if ((j.payload.data == nullptr && j.payload.len != 0) ||
        (j.queue.data == nullptr && j.queue.len != 0) ||
        (j.kind.data == nullptr && j.kind.len != 0))
      throw Error(CONVEYOR_E_INVALID, where + "NULL string with non-zero length");
    if (sdk::view(j.queue).empty()) throw Error(CONVEYOR_E_INVALID, where + "queue is empty");
    if (sdk::view(j.kind).empty()) throw Error(CONVEYOR_E_INVALID, where + "kind is empty");
    if (!is_storable_text(sdk::view(j.queue)) || !is_storable_text(sdk::view(j.kind)))
      throw Error(CONVEYOR_E_INVALID,
                  where + "queue and kind must be valid UTF-8 without NUL bytes");
    if (j.max_attempts < 1)
      throw Error(CONVEYOR_E_INVALID,
                  where + "max_attempts must be >= 1, got " + std::to_string(j.max_attempts));
    if (j.payload.len > (size_t{1} << 29))
      throw Error(CONVEYOR_E_INVALID, where + "payload larger than 512 MiB");
  }
  std::vector<std::string_view> queues, kinds;
  std::vector<std::string> payload_hex;
  std::vector<int32_t> priorities, max_attempts;
  std::vector<int64_t> run_ats;
  queues.reserve(jobs.size());
  kinds.reserve(jobs.size());
  payload_hex.reserve(jobs.size());
  for (const conveyor_new_job& j : jobs) {
    queues.push_back(sdk::view(j.queue));
    kinds.push_back(sdk::view(j.kind));
    payload_hex.push_back(hex_encode(sdk::view(j.payload)));
    priorities.push_back(j.priority);
    max_attempts.push_back(j.max_attempts);
    run_ats.push_back(j.run_at_us);
  }
  std::vector<std::string_view> distinct = queues;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  EnqueueArrays out;
  out.queues = text_array(queues);
  out.kinds = text_array(kinds);
  {
    std::vector<std::string_view> hex_views(payload_hex.begin(), payload_hex.end());
    out.payloads_hex = text_array(hex_views);
  }
  out.priorities = int_array(priorities);
  out.max_attempts = int_array(max_attempts);
  out.run_ats = bigint_array(run_ats);
  out.costs = costs.empty() ? int_array(std::vector<int32_t>(jobs.size(), 1))
                            : int_array(std::vector<int32_t>(costs.begin(), costs.end()));
  out.keys =
      keys.empty() ? text_array(std::vector<std::string_view>(jobs.size())) : text_array(keys);
  out.timeouts = timeouts.empty()
                     ? bigint_array(std::vector<int64_t>(jobs.size(), 0))
                     : bigint_array(std::vector<int64_t>(timeouts.begin(), timeouts.end()));
  out.distinct_queues = text_array(distinct);
  std::set<std::pair<int64_t, std::string_view>> later;
  for (size_t i = 0; i < jobs.size(); ++i)
    if (run_ats[i] > now_us)
      later.emplace((run_ats[i] + kLaterGrainUs - 1) / kLaterGrainUs * kLaterGrainUs, queues[i]);
  std::vector<std::string> payloads;
  payloads.reserve(later.size());
  for (const auto& [at, queue] : later) payloads.push_back(later_payload(at, queue));
  out.later_payloads = text_array(std::vector<std::string_view>(payloads.begin(), payloads.end()));
  return out;
}

void run_lease_batch(ConnectionPool& pool, const char* op, const char* statement,
                     std::span<const conveyor_lease> leases, int64_t value,
                     std::span<conveyor_status> results) {
  std::vector<std::pair<int64_t, int64_t>> sorted;
  sorted.reserve(leases.size());
  for (const conveyor_lease& l : leases) sorted.emplace_back(l.job_id, l.lease_token);
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> ids, tokens;
  ids.reserve(sorted.size());
  tokens.reserve(sorted.size());
  for (const auto& [id, token] : sorted) {
    ids.push_back(id);
    tokens.push_back(token);
  }
  const std::string ids_text = bigint_array(ids), tokens_text = bigint_array(tokens);
  std::vector<std::pair<int64_t, int64_t>> current;  // (id, token) the statement applied to
  run_on_pool(pool, op, Retry::kNever, [&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    pqxx::result r = tx.exec_prepared(statement, value, ids_text, tokens_text);
    current.clear();
    current.reserve(r.size());
    for (const auto& row : r) current.emplace_back(int_at(row, 0), int_at(row, 1));
  });
  std::sort(current.begin(), current.end());
  for (size_t i = 0; i < leases.size(); ++i)
    results[i] = std::binary_search(current.begin(), current.end(),
                                    std::pair(leases[i].job_id, leases[i].lease_token))
                     ? CONVEYOR_OK
                     : CONVEYOR_E_LEASE_LOST;
}

OwnedJob claimed_job_at(const pqxx::row& row, const std::string& queue, int64_t lease_token,
                        int64_t lease_expires_us) {
  OwnedJob j;
  j.id = int_at(row, 0);
  j.kind = text_at(row, 1);
  j.payload = bytea_from_text(row[2].c_str());
  j.priority = int32_at(row, 3);
  j.attempt = int32_at(row, 4);
  j.max_attempts = int32_at(row, 5);
  j.run_at = int_at(row, 6);
  j.created_at = int_at(row, 7);
  j.last_error = text_at(row, 8);
  j.cost = int32_at(row, 9);
  j.key = text_at(row, 10);
  j.started_at = int_at(row, 11);
  j.timeout_ms = int_at(row, 12);
  j.state = CONVEYOR_JOB_RUNNING;
  j.queue = queue;
  j.lease_token = lease_token;
  j.lease_expires = lease_expires_us;
  return j;
}

void report_claimed(std::vector<OwnedJob>& jobs, const sdk::JobSink& sink) {
  std::sort(jobs.begin(), jobs.end(), [](const OwnedJob& a, const OwnedJob& b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.run_at != b.run_at) return a.run_at < b.run_at;
    return a.id < b.id;
  });
  for (const OwnedJob& j : jobs) {
    conveyor_job v = j.view();
    sink(v);
  }
}

OwnedJob stored_job_at(const pqxx::row& row, pqxx::row::size_type first, int64_t now_us) {
  const auto c = [first](pqxx::row::size_type i) { return first + i; };
  OwnedJob j;
  j.id = int_at(row, c(0));
  j.queue = text_at(row, c(1));
  j.kind = text_at(row, c(2));
  j.payload = bytea_from_text(row[c(3)].c_str());
  j.priority = int32_at(row, c(4));
  j.state = int32_at(row, c(5));
  j.attempt = int32_at(row, c(6));
  j.max_attempts = int32_at(row, c(7));
  j.run_at = int_at(row, c(8));
  j.created_at = int_at(row, c(9));
  j.finalized_at = int_at(row, c(10));
  j.lease_token = int_at(row, c(11));
  j.lease_expires = int_at(row, c(12));
  j.last_error = text_at(row, c(13));
  j.cost = int32_at(row, c(14));
  j.key = text_at(row, c(15));
  j.started_at = int_at(row, c(16));
  j.timeout_ms = int_at(row, c(17));
  if (j.state == CONVEYOR_JOB_AVAILABLE && j.run_at > now_us) j.state = CONVEYOR_JOB_SCHEDULED;
  if (j.state != CONVEYOR_JOB_RUNNING) {
    j.lease_token = 0;
    j.lease_expires = 0;
  }
  return j;
}

std::vector<sdk::KeyClaim> wanted_keys(std::span<const sdk::KeyClaim> keys, const char* op) {
  std::vector<sdk::KeyClaim> out;
  out.reserve(keys.size());
  for (const sdk::KeyClaim& k : keys) {
    if (!is_storable_text(k.key))
      throw Error(CONVEYOR_E_INVALID,
                  std::string(op) + ": keys must be valid UTF-8 without NUL bytes");
    if (k.max_jobs > 0) out.push_back(k);
  }
  return out;
}

KeyClaimArrays key_claim_arrays(std::span<const sdk::KeyClaim> keys) {
  std::vector<std::string_view> names;
  std::vector<int64_t> counts;
  names.reserve(keys.size());
  counts.reserve(keys.size());
  uint64_t total = 0;
  for (const sdk::KeyClaim& k : keys) {
    names.push_back(k.key);
    counts.push_back(k.max_jobs);
    total += k.max_jobs;
  }
  KeyClaimArrays out;
  out.keys = text_array(names);
  out.counts = bigint_array(counts);
  out.total = static_cast<uint32_t>(std::min<uint64_t>(total, UINT32_MAX));
  return out;
}

void check_ready_keys_call(std::string_view queue, std::optional<std::string_view> after_key) {
  require_queue(queue, "list_ready_keys");
  if (after_key && !is_storable_text(*after_key))
    throw Error(CONVEYOR_E_INVALID,
                "list_ready_keys: after_key must be valid UTF-8 without NUL bytes");
}

std::vector<sdk::OwnedReadyKey> ready_key_rows(const pqxx::result& r) {
  std::vector<sdk::OwnedReadyKey> out;
  out.reserve(r.size());
  for (const auto& row : r) out.push_back(sdk::OwnedReadyKey{text_at(row, 0), int_at(row, 1)});
  return out;
}

uint32_t report_ready_keys(std::vector<sdk::OwnedReadyKey>& keys, uint32_t limit,
                           const sdk::ReadyKeySink& sink) {
  // The statements list keys in order already; sorted again (std::string
  // compares bytewise, as COLLATE "C" does) so that no plan can break the
  // keyset.
  std::sort(keys.begin(), keys.end(),
            [](const sdk::OwnedReadyKey& a, const sdk::OwnedReadyKey& b) { return a.key < b.key; });
  if (keys.size() > limit) keys.resize(limit);
  for (const sdk::OwnedReadyKey& k : keys) {
    conveyor_ready_key v = k.view();
    sink(v);
  }
  return static_cast<uint32_t>(keys.size());
}

void report_job(const std::optional<OwnedJob>& job, int64_t job_id, const sdk::JobSink& sink) {
  if (!job)
    throw Error(CONVEYOR_E_NOT_FOUND, "get_job: job " + std::to_string(job_id) + " not found");
  conveyor_job v = job->view();
  sink(v);
}

std::vector<sdk::OwnedQueueStats> queue_stats_rows(const pqxx::result& r) {
  std::vector<sdk::OwnedQueueStats> rows;
  rows.reserve(r.size());
  for (const auto& row : r) {
    sdk::OwnedQueueStats& out = rows.emplace_back();
    out.queue = text_at(row, 0);
    out.paused = bool_at(row, 1);
    for (int i = 0; i < 6; ++i) out.counts[i] = int_at(row, 2 + i);
  }
  return rows;
}

}  // namespace conveyor::postgres
