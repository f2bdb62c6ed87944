// The commands' output (output.hpp).
#include "output.hpp"

#include "table.hpp"

#include <conveyor/api_messages.hpp>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <ctime>
#include <iostream>

namespace conveyor::cli {
namespace {

using nlohmann::json;

std::string iso8601(int64_t us) {
  std::time_t secs = static_cast<std::time_t>(us / 1'000'000);
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(secs));
}

// "50", "2.5", "0.333333"
std::string rate_text(double rate) { return fmt::format("{}", rate); }

// The line under `ratelimit set`'s: what the scope means for this rate;
// every_key: the limit of every key (a bucket per key).
std::string scope_line(const RateLimit& l, bool every_key = false) {
  const char* each = every_key ? " per key" : "";
  return l.scope == LimitScope::kFleet
             ? fmt::format(
                   "scope: fleet (one bucket{} shared by every process on this storage: "
                   "at most {}/s{} in all)",
                   each, rate_text(l.rate_per_sec), each)
             : fmt::format(
                   "scope: process (each process has its own bucket{}: N processes start "
                   "up to N x {}/s{})",
                   each, rate_text(l.rate_per_sec), each);
}

// A LIMIT cell: "50/s burst 10", or "unlimited".
std::string limit_cell(const std::optional<RateLimit>& l) {
  return l ? fmt::format("{}/s burst {}", rate_text(l->rate_per_sec), l->burst) : "unlimited";
}

// A key in the KEY column: one line, cut to 40 characters (not bytes, and
// never inside a UTF-8 sequence) with "...".
std::string key_cell(const std::string& key) {
  constexpr size_t kMax = 40;
  std::string flat;
  for (char c : key) flat += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  size_t chars = 0;
  for (size_t i = 0; i < flat.size(); ++i) {
    if ((static_cast<unsigned char>(flat[i]) & 0xC0) == 0x80) continue;  // a continuation byte
    if (++chars > kMax - 3) {
      // Is the rest longer than three characters?
      size_t rest = 0;
      for (size_t k = i; k < flat.size(); ++k)
        rest += (static_cast<unsigned char>(flat[k]) & 0xC0) != 0x80;
      if (rest > 3) return flat.substr(0, i) + "...";
      break;
    }
  }
  return flat;
}

// A key of the KEY columns: `""` for the empty key; "(every key)" for a
// setting of every key (nullopt).
std::string key_column(const std::optional<std::string>& key) {
  if (!key) return "(every key)";
  return key->empty() ? "\"\"" : key_cell(*key);
}

// Who a `ratelimit set` or `rm` changed: "queue Q", "queue Q key "K"", or
// "every key of queue Q".
std::string limit_subject(const std::string& queue, const api::LimitTarget& target) {
  if (!target.keys) return "queue " + queue;
  if (!target.key) return "every key of queue " + queue;
  return fmt::format("queue {} key {}", queue, api::key_for_message(*target.key));
}

// The queue (and key, or per_key) of a `ratelimit set` or `rm` in --json.
json target_json(const std::string& queue, const api::LimitTarget& target) {
  json j{{"queue", queue}};
  if (target.key)
    j["key"] = *target.key;
  else if (target.keys)
    j["per_key"] = true;
  return j;
}

json limit_json(const EffectiveLimit& l, int64_t backoff_until_us = 0,
                const std::string& backoff_reason = {}) {
  json j{{"rate", l.limit ? json(l.limit->rate_per_sec) : json(nullptr)},
         {"burst", l.limit ? json(l.limit->burst) : json(nullptr)},
         {"scope", l.limit ? json(to_string(l.limit->scope)) : json(nullptr)},
         {"source", to_string(l.source)}};
  if (l.source == LimitSource::kBackoff) {
    j["backoff_until"] = api::rfc3339(backoff_until_us);
    j["backoff_reason"] = backoff_reason;
  }
  return j;
}

void print(const json& j) { std::cout << j.dump(2) << "\n"; }

json unserved_json(const std::vector<KindCount>& kinds) {
  json out = json::array();
  for (const KindCount& k : kinds) out.push_back(json{{"kind", k.kind}, {"pending", k.pending}});
  return out;
}

}  // namespace

void print_enqueued(const GlobalOptions& g, const std::string& queue, const std::string& kind,
                    const std::vector<int64_t>& ids) {
  // Runs of consecutive ids: one run unless another enqueue interleaved
  // (PostgreSQL sequences are shared by concurrent transactions).
  std::vector<std::pair<int64_t, int64_t>> runs;
  std::vector<int64_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t id : sorted) {
    if (!runs.empty() && runs.back().second + 1 == id) {
      runs.back().second = id;
    } else {
      runs.emplace_back(id, id);
    }
  }
  const auto count = static_cast<int64_t>(ids.size());
  if (g.json) {
    json j{{"queue", queue},
           {"kind", kind},
           {"count", count},
           {"first_id", sorted.front()},
           {"last_id", sorted.back()}};
    if (runs.size() > 1) {  // only then: the usual answer keeps its shape
      j["contiguous"] = false;
      json list = json::array();
      for (const auto& [a, b] : runs) list.push_back(json::array({a, b}));
      j["id_ranges"] = std::move(list);
    }
    print(j);
  } else if (count == 1) {
    std::cout << fmt::format("enqueued job {} on queue {}\n", sorted.front(), queue);
  } else if (runs.size() == 1) {
    std::cout << fmt::format("enqueued {} jobs on queue {} (ids {}..{})\n", count, queue,
                             sorted.front(), sorted.back());
  } else {
    constexpr size_t kShown = 8;
    std::string shown;
    for (size_t i = 0; i < runs.size() && i < kShown; ++i) {
      if (i > 0) shown += ", ";
      shown += runs[i].first == runs[i].second
                   ? std::to_string(runs[i].first)
                   : fmt::format("{}..{}", runs[i].first, runs[i].second);
    }
    if (runs.size() > kShown) shown += fmt::format(" and {} more ranges", runs.size() - kShown);
    std::cout << fmt::format(
        "enqueued {} jobs on queue {} (ids not contiguous, other jobs were enqueued at the same "
        "time: {})\n",
        count, queue, shown);
  }
}

void print_rate_limit_set(const GlobalOptions& g, const std::string& queue, const RateLimit& limit,
                          const api::LimitTarget& target) {
  if (g.json) {
    json j = target_json(queue, target);
    j["rate"] = limit.rate_per_sec;
    j["burst"] = limit.burst;
    j["scope"] = to_string(limit.scope);
    print(j);
  } else {
    // The first line as before scopes existed; the scope on its own line.
    const bool every_key = target.keys && !target.key;
    std::cout << fmt::format("{} limited to {}/s (burst {}){}\n{}\n", limit_subject(queue, target),
                             rate_text(limit.rate_per_sec), limit.burst, every_key ? " each" : "",
                             scope_line(limit, every_key));
  }
}

namespace {

// The kill switch and where its state comes from, for `ratelimit ls`.
std::string switch_text(bool enabled, SwitchSource source) {
  if (source == SwitchSource::kStorage)
    return enabled ? "enabled (source: storage, set by conveyor ratelimit enable)"
                   : "DISABLED (source: storage, set by conveyor ratelimit disable: every limit "
                     "is ignored in every process; conveyor ratelimit enable turns them back on)";
  return enabled ? "enabled (source: config, [engine] rate_limit_enabled; nothing stored)"
                 : "DISABLED (source: config, rate_limit_enabled = false: every limit is "
                   "ignored; nothing stored)";
}

}  // namespace

void print_rate_limiting_switched(const GlobalOptions& g, const RateLimitingState& state) {
  if (g.json) {
    print(json{{"enabled", state.enabled}, {"enabled_source", to_string(state.source)}});
    return;
  }
  std::cout << (state.enabled ? "rate limiting enabled: every queue's limit applies again"
                              : "rate limiting disabled: no limit throttles any queue "
                                "(backpressure holds still apply)");
  if (state.source == SwitchSource::kStorage)
    std::cout << "; stored in storage, every process on it follows within a second";
  else  // not expected after a successful call; say what is in force
    std::cout << "; but storage holds no switch: the config file's [engine] rate_limit_enabled "
                 "is in force";
  std::cout << "\n";
}

void print_rate_limits(const GlobalOptions& g, const api::RateLimitListing& listing) {
  const auto& overrides = listing.overrides;
  const auto& def = listing.default_limit;
  if (g.json) {
    json list = json::array();
    for (const auto& o : overrides)
      list.push_back(json{{"queue", o.queue},
                          {"rate", o.limit.rate_per_sec},
                          {"burst", o.limit.burst},
                          {"scope", to_string(o.limit.scope)},
                          {"updated_at", iso8601(o.updated_at_us)}});
    json keys = json::array();
    for (const KeyOverride& k : listing.key_settings)
      keys.push_back(json{{"queue", k.queue},
                          {"key", k.key ? json(*k.key) : json(nullptr)},
                          {"rate", k.limit ? json(k.limit->rate_per_sec) : json(nullptr)},
                          {"burst", k.limit ? json(k.limit->burst) : json(nullptr)},
                          {"scope", k.limit ? json(to_string(k.limit->scope)) : json(nullptr)},
                          {"weight", k.weight ? json(*k.weight) : json(nullptr)},
                          {"updated_at", iso8601(k.updated_at_us)}});
    print(json{{"enabled", listing.enabled},
               {"enabled_source", to_string(listing.enabled_source)},
               {"default", json{{"rate", def ? json(def->rate_per_sec) : json(nullptr)},
                                {"burst", def ? json(def->burst) : json(nullptr)},
                                {"scope", def ? json(to_string(def->scope)) : json(nullptr)}}},
               {"overrides", list},
               {"key_settings", keys}});
    return;
  }
  Table t({"QUEUE", "RATE", "BURST", "SCOPE", "UPDATED"});
  for (const auto& o : overrides)
    t.add({o.queue, rate_text(o.limit.rate_per_sec), std::to_string(o.limit.burst),
           to_string(o.limit.scope), iso8601(o.updated_at_us)});
  if (overrides.empty())
    std::cout << "no per-queue overrides\n";
  else
    std::cout << t.render();
  // The settings of keys, only when there are some.
  if (!listing.key_settings.empty()) {
    Table k({"QUEUE", "KEY", "RATE", "BURST", "SCOPE", "WEIGHT", "UPDATED"});
    k.text_column(1);
    for (const KeyOverride& o : listing.key_settings)
      k.add({o.queue, key_column(o.key), o.limit ? rate_text(o.limit->rate_per_sec) : "-",
             o.limit ? std::to_string(o.limit->burst) : "-",
             o.limit ? to_string(o.limit->scope) : "-", o.weight ? std::to_string(*o.weight) : "-",
             iso8601(o.updated_at_us)});
    std::cout << "key settings (a key's own limit wins over the one for every key, which wins "
                 "over key_rate_limit):\n"
              << k.render();
  }
  std::cout << fmt::format(
      "default: {}\n", def ? fmt::format("{}/s (burst {}), scope {}", rate_text(def->rate_per_sec),
                                         def->burst, to_string(def->scope))
                           : std::string("none (queues without a limit are unlimited)"));
  std::cout << fmt::format("rate limiting: {}\n",
                           switch_text(listing.enabled, listing.enabled_source));
}

void print_rate_limit_cleared(const GlobalOptions& g, const std::string& queue,
                              const api::LimitTarget& target) {
  if (g.json) {
    json j = target_json(queue, target);
    j["cleared"] = true;
    print(j);
  } else if (target.keys && !target.key) {
    std::cout << fmt::format("queue {} rate limit for every key cleared\n", queue);
  } else {
    std::cout << fmt::format("{} rate limit cleared\n", limit_subject(queue, target));
  }
}

void print_key_weight(const GlobalOptions& g, const std::string& queue, const std::string& key,
                      std::optional<uint32_t> weight) {
  if (g.json) {
    json j{{"queue", queue}, {"key", key}, {"weight", weight.value_or(1)}};
    if (!weight) j["reset"] = true;
    print(j);
  } else if (weight) {
    std::cout << fmt::format(
        "queue {} key {} weight {} ({} job{} a round where weight 1 gets one)\n", queue,
        api::key_for_message(key), *weight, *weight, *weight == 1 ? "" : "s");
  } else {
    std::cout << fmt::format("queue {} key {} weight reset to 1\n", queue,
                             api::key_for_message(key));
  }
}

void print_queues(const GlobalOptions& g, const std::vector<QueueReport>& reports) {
  if (g.json) {
    json list = json::array();
    for (const auto& r : reports)
      list.push_back(json{{"queue", r.stats.queue},
                          {"paused", r.stats.paused},
                          {"pending", r.stats.pending},
                          {"scheduled", r.stats.scheduled},
                          {"running", r.stats.running},
                          {"completed", r.stats.completed},
                          {"failed", r.stats.failed},
                          {"cancelled", r.stats.cancelled},
                          {"limit", limit_json(r.limit, r.backoff_until_us, r.backoff_reason)},
                          {"oldest_pending_age_seconds", r.oldest_pending_age_seconds},
                          {"unserved_kinds", unserved_json(r.unserved_kinds)}});
    print(list);
    return;
  }
  if (reports.empty()) {
    std::cout << "no queues yet (enqueue a job: conveyor enqueue QUEUE noop)\n";
    return;
  }
  Table t({"QUEUE", "PAUSED", "PENDING", "SCHEDULED", "RUNNING", "COMPLETED", "FAILED", "LIMIT",
           "SCOPE", "SOURCE"});
  for (const auto& r : reports) {
    const auto& s = r.stats;
    t.add({s.queue, s.paused ? "yes" : "no", std::to_string(s.pending), std::to_string(s.scheduled),
           std::to_string(s.running), std::to_string(s.completed), std::to_string(s.failed),
           limit_cell(r.limit.limit), r.limit.limit ? to_string(r.limit.limit->scope) : "-",
           r.limit.source == LimitSource::kBackoff
               ? fmt::format("backoff until {} ({})", api::rfc3339(r.backoff_until_us),
                             r.backoff_reason.substr(0, 60))
               : std::string(to_string(r.limit.source))});
  }
  std::cout << t.render();
  // Jobs that wait because no consumer of the server runs their kind.
  for (const auto& r : reports) {
    if (r.unserved_kinds.empty()) continue;
    std::string kinds;
    for (const KindCount& k : r.unserved_kinds)
      kinds += fmt::format("{}{} ({} pending)", kinds.empty() ? "" : ", ", k.kind, k.pending);
    std::cout << fmt::format("queue {}: no consumer serves kind(s) {}\n", r.stats.queue, kinds);
  }
}

void print_queue_paused(const GlobalOptions& g, const std::string& queue, bool paused) {
  if (g.json)
    print(json{{"queue", queue}, {"paused", paused}});
  else
    std::cout << fmt::format("queue {} {}\n", queue,
                             paused ? "paused (no new claims in any process)" : "resumed");
}

namespace {

// An RFC 3339 time, null for 0 (not set).
// A run time as "1.234 s" (ms resolution), "250 ms" or "2 h 3 min 4 s".
std::string format_run_time(int64_t us) {
  const int64_t ms = us / 1000;
  if (ms < 1000) return fmt::format("{} ms", ms);
  if (ms < 60'000) return fmt::format("{}.{:03} s", ms / 1000, ms % 1000);
  const int64_t s = ms / 1000;
  if (s < 3600) return fmt::format("{} min {} s", s / 60, s % 60);
  return fmt::format("{} h {} min {} s", s / 3600, s / 60 % 60, s % 60);
}

json time_json(int64_t us) { return us == 0 ? json(nullptr) : json(api::rfc3339(us)); }

json job_json(const Job& j) {
  return json{{"id", j.id},
              {"queue", j.queue},
              {"kind", j.kind},
              {"state", to_string(j.state)},
              {"priority", j.priority},
              {"attempt", j.attempt},
              {"max_attempts", j.max_attempts},
              {"run_at", time_json(j.run_at_us)},
              {"created_at", time_json(j.created_at_us)},
              {"finalized_at", time_json(j.finalized_at_us)},
              {"lease_expires_at",
               j.state == JobState::kRunning ? time_json(j.lease_expires_us) : json(nullptr)},
              {"last_error", j.last_error},
              {"cost", j.cost},
              {"key", j.key},
              {"started_at", time_json(j.started_at_us)},
              {"timeout_ms", j.timeout_ms},
              {"payload", j.payload}};
}

// One line of at most n characters (errors may be long or multi-line).
std::string one_line(const std::string& text, size_t n) {
  std::string out;
  for (char c : text) out += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  if (out.size() > n) out = out.substr(0, n - 3) + "...";
  return out;
}

const char* outcome_text(const std::string& op, JobOutcome::Status status) {
  if (status == JobOutcome::Status::kNotFound) return "not found";
  if (op == "retry") return "not retried: only failed or cancelled jobs can be retried";
  return "not removed: only final jobs (completed, failed, cancelled) can be removed; cancel it "
         "first";
}

}  // namespace

void print_jobs(const GlobalOptions& g, const JobPage& page) {
  if (g.json) {
    json list = json::array();
    for (const Job& j : page.jobs) list.push_back(job_json(j));
    print(json{{"jobs", list}, {"next_after_id", page.next_after_id}});
    return;
  }
  if (page.jobs.empty()) {
    std::cout << "no jobs\n";
    return;
  }
  // A KEY column only when a job of the page has a key: queues without keys
  // read as before.
  const bool keys =
      std::any_of(page.jobs.begin(), page.jobs.end(), [](const Job& j) { return !j.key.empty(); });
  std::vector<std::string> header{"ID",      "QUEUE",  "KIND",    "STATE",
                                  "ATTEMPT", "RUN AT", "STARTED", "LAST ERROR"};
  if (keys) header.insert(header.begin() + 2, "KEY");
  Table t(std::move(header));
  if (keys) t.text_column(2);
  for (const Job& j : page.jobs) {
    std::vector<std::string> row{std::to_string(j.id),
                                 j.queue,
                                 j.kind,
                                 to_string(j.state),
                                 fmt::format("{}/{}", j.attempt, j.max_attempts),
                                 api::rfc3339(j.run_at_us),
                                 j.started_at_us == 0 ? "-" : api::rfc3339(j.started_at_us),
                                 one_line(j.last_error, 60)};
    if (keys) row.insert(row.begin() + 2, j.key.empty() ? "-" : key_cell(j.key));
    t.add(std::move(row));
  }
  std::cout << t.render();
  if (page.next_after_id != 0)
    std::cout << fmt::format("more: add --after {} for the next page\n", page.next_after_id);
}

void print_job(const GlobalOptions& g, const Job& j) {
  if (g.json) {
    print(job_json(j));
    return;
  }
  const auto line = [](const char* key, const std::string& value) {
    std::cout << fmt::format("{:<18}{}\n", std::string(key) + ":", value);
  };
  line("id", std::to_string(j.id));
  line("queue", j.queue);
  line("kind", j.kind);
  line("state", to_string(j.state));
  line("priority", std::to_string(j.priority));
  line("cost", fmt::format("{} token{} of the queue's limit", j.cost, j.cost == 1 ? "" : "s"));
  line("key", j.key.empty() ? "(none: the empty key)" : one_line(j.key, kMaxJobKeyBytes));
  line("attempt", fmt::format("{} of {}", j.attempt, j.max_attempts));
  line("run at", api::rfc3339(j.run_at_us));
  line("created at", api::rfc3339(j.created_at_us));
  if (j.timeout_ms != 0)
    line("timeout", fmt::format("{} ms per attempt (the job's own)", j.timeout_ms));
  if (j.started_at_us != 0) line("started at", api::rfc3339(j.started_at_us));
  if (j.finalized_at_us != 0) line("finalized at", api::rfc3339(j.finalized_at_us));
  if (j.finalized_at_us != 0 && j.started_at_us != 0 && j.finalized_at_us >= j.started_at_us)
    line("last attempt ran", format_run_time(j.finalized_at_us - j.started_at_us));
  if (j.state == JobState::kRunning && j.lease_expires_us != 0)
    line("lease expires at", api::rfc3339(j.lease_expires_us));
  if (!j.last_error.empty()) line("last error", j.last_error);
  line("payload", j.payload);
}

void print_outcomes(const GlobalOptions& g, const std::string& op,
                    const std::vector<JobOutcome>& outcomes) {
  int64_t ok = 0;
  for (const JobOutcome& o : outcomes) ok += o.status == JobOutcome::Status::kOk;
  const char* done = op == "retry" ? "retried" : "removed";
  if (g.json) {
    json list = json::array();
    for (const JobOutcome& o : outcomes)
      list.push_back(json{{"id", o.id}, {"outcome", api::outcome_name(o.status)}});
    print(json{{"outcomes", list}, {done, ok}});
    return;
  }
  for (const JobOutcome& o : outcomes) {
    if (o.status == JobOutcome::Status::kOk)
      std::cout << fmt::format("job {} {}\n", o.id, done);
    else
      std::cerr << fmt::format("conveyor: job {} {}\n", o.id, outcome_text(op, o.status));
  }
  if (outcomes.size() > 1)
    std::cout << fmt::format("{} of {} jobs {}\n", ok, outcomes.size(), done);
}

void print_bulk_retried(const GlobalOptions& g, const std::string& queue, const std::string& state,
                        int64_t total, int64_t batches) {
  if (g.json)
    print(json{{"queue", queue}, {"state", state}, {"retried", total}, {"batches", batches}});
  else
    std::cout << fmt::format("retried {} {} jobs of queue {}\n", total, state, queue);
}

void print_bulk_done(const GlobalOptions& g, const std::string& op, const std::string& queue,
                     const std::vector<JobState>& states, int64_t done, int64_t refused,
                     int64_t batches) {
  const bool cancel = op == "cancel";
  std::vector<std::string> names;
  for (JobState s : states) names.emplace_back(to_string(s));
  if (g.json) {
    print(json{{"queue", queue},
               {"states", names},
               {cancel ? "cancelled" : "deleted", done},
               {"refused", refused},
               {"batches", batches}});
    return;
  }
  std::cout << fmt::format("{} {} {} jobs of queue {}\n", cancel ? "cancelled" : "deleted", done,
                           fmt::join(names, "/"), queue);
  if (refused > 0)
    std::cout << fmt::format(
        "{} refused: listed, then {} before the {} reached them\n", refused,
        cancel ? "already final (finished) or deleted" : "no longer final (retried) or deleted",
        cancel ? "cancel" : "delete");
}

void print_queue_removed(const GlobalOptions& g, const std::string& queue,
                         const Engine::QueueRemoval& t, int64_t batches) {
  if (g.json) {
    print(json{{"queue", queue},
               {"deleted", t.deleted},
               {"cancelled", t.cancelled},
               {"running_cancelled", t.running_cancelled},
               {"kept", t.kept},
               {"override_removed", t.override_removed},
               {"key_settings_removed", t.key_settings_removed},
               {"was_paused", t.was_paused},
               {"configured", t.configured},
               {"batches", batches}});
    return;
  }
  std::cout << fmt::format("queue {} removed: {} job(s) deleted ({} not final, cancelled first)\n",
                           queue, t.deleted, t.cancelled);
  std::cout << fmt::format(
      "rate-limit override: {}; key settings removed: {}; paused flag: {}\n",
      t.override_removed ? "removed" : "none", t.key_settings_removed,
      t.was_paused ? "cleared (it was paused)" : "cleared (it was not paused)");
  if (t.running_cancelled > 0)
    std::cout << fmt::format(
        "{} running job(s) cancelled (--force): their handlers may still be running; what they "
        "report is refused, and they are not run again\n",
        t.running_cancelled);
  if (t.kept > 0)
    std::cout << fmt::format(
        "{} job(s) kept: they started, or changed, while the queue was removed; run conveyor "
        "queues rm {} again once they are final\n",
        t.kept, queue);
  if (t.configured)
    std::cout << fmt::format(
        "note: [queues.{}] is in the config: the queue stays listed, empty, with its configured "
        "settings; remove it from the config to forget it\n",
        queue);
}

void print_cancelled(const GlobalOptions& g, const std::vector<CancelOutcome>& outcomes) {
  if (g.json) {
    json list = json::array();
    for (const CancelOutcome& o : outcomes) {
      json one{{"id", o.id}, {"outcome", api::outcome_name(o.status)}};
      if (o.job) one["state"] = to_string(o.job->state);
      list.push_back(std::move(one));
    }
    print(json{{"outcomes", list}});
    return;
  }
  for (const CancelOutcome& o : outcomes) {
    if (o.status == CONVEYOR_OK)
      std::cout << fmt::format("job {} cancelled\n", o.id);
    else if (o.status == CONVEYOR_E_NOT_FOUND)
      std::cerr << fmt::format("conveyor: job {} not found\n", o.id);
    else
      std::cerr << fmt::format("conveyor: job {} not cancelled: it is already {}\n", o.id,
                               o.job ? to_string(o.job->state) : "final");
  }
}

void print_keys(const GlobalOptions& g, const KeysReport& r) {
  if (g.json) {
    json list = json::array();
    for (const KeyReport& k : r.keys)
      list.push_back(json{{"key", k.key},
                          {"ready", k.ready},
                          {"ready_capped", k.ready_capped},
                          {"running", r.live ? json(k.running) : json(nullptr)},
                          {"throttled", r.live ? json(k.throttled) : json(nullptr)},
                          {"limit", limit_json(EffectiveLimit{k.limit, k.limit_source})},
                          {"weight", k.weight}});
    json limit{
        {"rate", r.key_rate_limit ? json(r.key_rate_limit->rate_per_sec) : json(nullptr)},
        {"burst", r.key_rate_limit ? json(r.key_rate_limit->burst) : json(nullptr)},
        {"scope", r.key_rate_limit ? json(to_string(r.key_rate_limit->scope)) : json(nullptr)},
        {"max_workers", r.key_max_workers ? json(*r.key_max_workers) : json(nullptr)},
        {"source", to_string(r.limit_source)}};
    print(json{{"queue", r.queue},
               {"keys", list},
               {"total_keys", r.total_keys},
               {"complete", r.complete},
               {"live", r.live},
               {"fairness", to_string(r.fairness)},
               {"key_limit", limit}});
    return;
  }
  if (r.keys.empty()) {
    std::cout << fmt::format("queue {}: no keys with ready{} jobs\n", r.queue,
                             r.live ? " or running" : "");
  } else {
    Table t({"KEY", "READY", "RUNNING", "THROTTLED", "LIMIT", "SOURCE", "WEIGHT"});
    t.text_column(0);
    for (const KeyReport& k : r.keys)
      t.add({key_column(k.key), std::to_string(k.ready) + (k.ready_capped ? "+" : ""),
             r.live ? std::to_string(k.running) : "-", r.live ? (k.throttled ? "yes" : "no") : "-",
             limit_cell(k.limit) +
                 (k.limit && k.limit->scope == LimitScope::kFleet ? " (fleet)" : ""),
             to_string(k.limit_source), std::to_string(k.weight)});
    std::cout << t.render();
    std::cout << fmt::format(
        "{} of {} key(s), busiest first{}\n", r.keys.size(), r.total_keys,
        r.complete ? "" : " (only the first 100000 keys with ready jobs read)");
  }
  std::string limit;
  if (r.key_rate_limit)
    limit = fmt::format("{}/s burst {} per key{}", rate_text(r.key_rate_limit->rate_per_sec),
                        r.key_rate_limit->burst,
                        r.key_rate_limit->scope == LimitScope::kFleet ? " (fleet)" : "");
  if (r.key_max_workers)
    limit +=
        fmt::format("{}at most {} running per key", limit.empty() ? "" : ", ", *r.key_max_workers);
  std::cout << fmt::format("key limit: {} (source: {}); fairness: {}\n",
                           limit.empty() ? "none" : limit, to_string(r.limit_source),
                           to_string(r.fairness));
}

}  // namespace conveyor::cli
