#include "new_jobs.hpp"

#include <conveyor/validation.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace conveyor {

NewJob make_new_job(std::string_view queue, std::string_view kind, std::string_view payload,
                    const EnqueueOptions& options, int64_t now_us) {
  NewJob job;
  job.queue = std::string(queue);
  job.kind = std::string(kind);
  job.payload = std::string(payload);
  job.priority = options.priority;
  job.max_attempts = options.max_attempts.value_or(0);
  job.run_at_us = options.delay.count() > 0 ? now_us + options.delay.count() : 0;
  job.cost = options.cost;
  job.key = options.key;
  job.timeout_ms = options.timeout.count();
  return job;
}

void check_job_costs(std::span<const NewJob> jobs, const LimitResolver& limits,
                     const Storage& storage) {
  for (const NewJob& j : jobs) {
    if (j.cost == 1) continue;
    if (j.cost < 1 || j.cost > kMaxJobCost)
      throw ValidationError("cost", fmt::format("cost must be 1..{} (tokens the job takes from "
                                                "its queue's rate limit), got {}",
                                                kMaxJobCost, j.cost));
    if (std::string missing =
            missing_slot_reason(storage, StorageSlot::kEnqueueV3, "a job cost other than 1");
        !missing.empty())
      throw ValidationError("cost", missing);
    // Checked against the limit even while the kill switch is off: it is
    // the limit that applies once limits apply again. A job dearer than the
    // burst could run (it waits for a full bucket and puts it in debt:
    // token_settlement.cc), but one job would then take more than the burst
    // the user set as the most at once, so a cost known to exceed it is
    // refused here; only a limit lowered after enqueue leaves such jobs.
    const EffectiveLimit e = limits.resolve(j.queue, /*ignore_switch=*/true);
    if (e.limit && static_cast<uint32_t>(j.cost) > e.limit->burst)
      throw ValidationError(
          "cost",
          fmt::format("cost {} is more than queue '{}''s burst of {} (limit {}/s, from "
                      "{}): one such job would take more than the burst at once; lower "
                      "the cost or raise the burst",
                      j.cost, j.queue, e.limit->burst, e.limit->rate_per_sec, to_string(e.source)));
  }
}

namespace {

// The key key_from names in payload: a string as it is, a number or a
// boolean as JSON spells it; anything else (no such member, not JSON, null,
// an object or array) is the empty key.
std::string key_from_payload(std::string_view payload, const nlohmann::json::json_pointer& at) {
  const nlohmann::json doc = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.contains(at)) return {};
  const nlohmann::json& v = doc.at(at);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number() || v.is_boolean()) return v.dump();
  return {};
}

}  // namespace

void apply_job_keys(std::span<NewJob> jobs, const std::map<std::string, QueueConfig>& queues,
                    const Storage& storage) {
  for (NewJob& j : jobs) {
    if (j.key.empty()) {
      const auto q = queues.find(j.queue);
      if (q != queues.end() && !q->second.key_from.empty())
        j.key = key_from_payload(j.payload, nlohmann::json::json_pointer(q->second.key_from));
    }
    if (j.key.empty()) continue;
    validate_job_key(j.key);
    if (std::string missing = missing_slot_reason(storage, StorageSlot::kEnqueueV4, "a job key");
        !missing.empty())
      throw ValidationError("key", missing);
  }
}

void check_job_timeouts(std::span<const NewJob> jobs, const Storage& storage) {
  bool timed = false;
  for (const NewJob& j : jobs) {
    validate_job_timeout_ms(j.timeout_ms);
    timed = timed || j.timeout_ms != 0;
  }
  if (!timed) return;
  if (std::string missing = missing_slot_reason(storage, StorageSlot::kEnqueueV5, "a job timeout");
      !missing.empty())
    throw ValidationError("timeout", missing);
}

void prepare_new_jobs(std::vector<NewJob>& jobs, const EngineConfig& engine, int64_t now_us) {
  for (NewJob& j : jobs) {
    validate_queue_name(j.queue);
    validate_job_kind(j.kind);
    if (j.payload.size() > kMaxPayloadBytes)
      throw ValidationError("payload", fmt::format("payload is {} bytes; the limit is {} bytes",
                                                   j.payload.size(), kMaxPayloadBytes));
    if (j.max_attempts == 0) j.max_attempts = static_cast<int32_t>(engine.max_attempts);
    if (j.max_attempts < 1) throw ValidationError("max_attempts", "max_attempts must be >= 1");
    if (j.run_at_us == 0) j.run_at_us = now_us;
  }
}

}  // namespace conveyor
