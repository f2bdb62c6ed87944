// conveyor: the command line. Parses arguments with CLI11 and runs a command.
// Exit codes (docs/reference.md): 0 success; 1 runtime failure; 2 usage or
// validation error. Errors are one line on stderr starting with "conveyor:".
#include "commands.hpp"

#include <conveyor/admin_server.hpp>
#include <conveyor/api_error.hpp>
#include <conveyor/config.hpp>
#include <conveyor/host/plugin_loader.hpp>
#include <conveyor/internal/log.hpp>
#include <conveyor/internal/storage.hpp>
#include <conveyor/rate_limit.hpp>
#include <conveyor/validation.hpp>

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string_view>

namespace {

int fail(int code, const std::string& message) {
  std::string line = message;
  for (char& c : line)
    if (c == '\n') c = ' ';
  std::cerr << "conveyor: " << line << "\n";
  return code;
}

// CLI11 words a value of the wrong type as "Could not convert: --rate = fast";
// say what the option takes instead. Options not listed keep CLI11's words.
std::string conversion_problem(const CLI::ConversionError& e) {
  static const std::map<std::string, std::string> kTakes = {
      {"--burst", "a whole number from 1 to 4294967295"},
      {"--count", "a whole number from 1 to 1000000"},
      {"--priority", "a whole number from -2147483648 to 2147483647 (lower runs first)"},
      {"--delay", "a number of seconds >= 0"},
      {"--max-attempts", "a whole number >= 1"},
      {"--cost", "a whole number of tokens from 1 to " + std::to_string(conveyor::kMaxJobCost)},
      {"--limit", "a whole number from 1 to 1000"},
      {"--batch", "a whole number from 1 to 1000"},
      {"--max-backpressure", "a whole number of seconds from 0 to 2592000"},
      {"weight", "a whole number from 1 to " + std::to_string(conveyor::kKeyWeightMax)},
  };
  const std::string what = e.what();
  constexpr std::string_view kPrefix = "Could not convert: ";
  const size_t eq = what.find(" = ");
  if (what.rfind(kPrefix, 0) == 0 && eq != std::string::npos) {
    const std::string name = what.substr(kPrefix.size(), eq - kPrefix.size());
    if (auto it = kTakes.find(name); it != kTakes.end())
      return name + " must be " + it->second + ", got " +
             conveyor::quote_for_message(what.substr(eq + 3));
  }
  return what + " (see conveyor --help)";
}

// Text logs until a command reads its config ([log] may change them). A
// CONVEYOR_LOG_LEVEL that is not a level is an error, not silence.
void setup_logging(bool serving) {
  conveyor::LogLevel level = serving ? conveyor::LogLevel::kInfo : conveyor::LogLevel::kWarn;
  const char* env = std::getenv("CONVEYOR_LOG_LEVEL");
  if (env != nullptr && *env != '\0') {
    auto parsed = conveyor::parse_log_level(env);
    if (!parsed)
      throw conveyor::ConfigError(std::string("environment variable CONVEYOR_LOG_LEVEL: must be "
                                              "one of ") +
                                  conveyor::kLogLevelNames + " (any case), got " +
                                  conveyor::quote_for_message(env));
    level = *parsed;
  }
  conveyor::setup_logging(level, conveyor::LogFormat::kText);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace conveyor::cli;
  // A peer that closes a socket while this process writes to it (a server
  // refusing a request body over its max_body_bytes before it is all sent)
  // is an error to report, not a signal that kills the process silently.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"Conveyor: a durable background-job queue with per-queue rate limits", "conveyor"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "conveyor 0.1.0");

  GlobalOptions g;
  std::string config_path;
  std::string server_url;
  app.add_option("--config", config_path,
                 "config file (default: $CONVEYOR_CONFIG or config/conveyor.toml)");
  app.add_option(
      "--server", server_url,
      "a running server's URL (http://HOST:PORT): enqueue, ratelimit, queues, keys and jobs use "
      "its API instead of storage; token from $CONVEYOR_ADMIN_TOKEN");
  app.add_flag("--json", g.json, "machine-readable output");
  // Subcommands made after this inherit it: options they do not know (the
  // global ones above) go up to the parent, so `conveyor queues --json`
  // works as well as `conveyor --json queues`.
  app.fallthrough();

  auto* serve_cmd = app.add_subcommand("serve", "run the engine and its workers until Ctrl-C");

  EnqueueArgs ea;
  int64_t count = 1;
  auto* enqueue_cmd = app.add_subcommand("enqueue", "add jobs to a queue");
  enqueue_cmd->add_option("queue", ea.job.queue, "queue name")->required();
  enqueue_cmd->add_option("kind", ea.job.kind, "job kind (built-in: noop, sleep, http)")
      ->required();
  enqueue_cmd->add_option("--payload", ea.job.payload, "JSON payload (default {})");
  enqueue_cmd->add_option(
      "--payload-file", ea.payload_file,
      "read the JSON payload from this file (- for standard input), for payloads too large "
      "for the command line; not with --payload");
  enqueue_cmd->add_option("--count", count, "how many identical jobs (default 1)");
  enqueue_cmd->add_option("--priority", ea.job.priority, "lower runs first (default 0)");
  enqueue_cmd->add_option("--delay", ea.job.delay_s, "seconds before the jobs may run (default 0)");
  enqueue_cmd->add_option("--max-attempts", ea.job.max_attempts,
                          "attempts before failing (default [engine] max_attempts)");
  enqueue_cmd->add_option("--cost", ea.job.cost,
                          "tokens each job takes from its queue's rate limit, 1.." +
                              std::to_string(conveyor::kMaxJobCost) +
                              " (default 1); more than the queue's burst is refused");
  // Read as text and checked by conveyor::parse_timeout_ms: a duration with
  // a unit (30s, 1.5m, 500ms, 2h; no unit: seconds).
  std::string timeout_text;
  enqueue_cmd->add_option("--timeout", timeout_text,
                          "how long one attempt of each job may run before it fails as timed "
                          "out: a duration from 1ms to 7d, e.g. 30s, 1.5m, 500ms, 2h (no unit: "
                          "seconds; default: the queue's job_timeout_s)");
  enqueue_cmd->add_option("--key", ea.job.key,
                          "the jobs' key: the queue's per-key limits and fair turns count them "
                          "under it (up to " +
                              std::to_string(conveyor::kMaxJobKeyBytes) +
                              " bytes of UTF-8; default: the empty key)");

  auto* rl = app.add_subcommand("ratelimit",
                                "per-queue and per-key rate-limit overrides and the kill switch");
  rl->require_subcommand(1);
  std::string rl_queue;
  // Read as text and checked by conveyor::parse_rate, as the environment's
  // rate is: CLI11 alone would take 0x10 (16) and 1e-320.
  std::string rate_text;
  std::optional<int64_t> burst;
  KeyTargetArgs rl_target;
  // --key / --per-key of `ratelimit set` and `rm`.
  const auto add_key_target = [&rl_target](CLI::App* cmd, const std::string& what) {
    cmd->add_option("--key", rl_target.key,
                    what +
                        " one key's own limit instead of the queue's (\"\" is the empty key; "
                        "it wins over --per-key and key_rate_limit)");
    cmd->add_flag("--per-key", rl_target.per_key,
                  what +
                      " the limit of every key of the queue instead of the queue's (it "
                      "replaces key_rate_limit)");
  };
  auto* rl_set = rl->add_subcommand(
      "set", "set a queue's override, or a key's (durable, seen by every process)");
  rl_set->add_option("queue", rl_queue, "queue name")->required();
  rl_set
      ->add_option("--rate", rate_text,
                   "jobs started per second: a plain decimal number from 0.001 to 1e9 (e.g. "
                   "50, 2.5 or 1e3)")
      ->required();
  rl_set->add_option("--burst", burst, "largest instantaneous spike, >= 1 (default ceil(rate))");
  std::string scope = "process";
  rl_set->add_option("--scope", scope,
                     "process (each process has its own bucket, the default) or fleet (one bucket "
                     "per queue, or per key, shared by every process on the same storage)");
  add_key_target(rl_set, "set");
  auto* rl_ls = rl->add_subcommand(
      "ls", "list overrides, the default, the kill switch and the settings of keys");
  auto* rl_rm = rl->add_subcommand(
      "rm", "remove a queue's override (back to its config or default), or a key's");
  rl_rm->add_option("queue", rl_queue, "queue name")->required();
  add_key_target(rl_rm, "remove");
  auto* rl_disable = rl->add_subcommand(
      "disable",
      "kill switch: ignore every limit in every process on this storage (stored, followed "
      "within a second)");
  auto* rl_enable =
      rl->add_subcommand("enable", "turn the limits back on in every process (stored)");

  auto* queues_cmd = app.add_subcommand("queues", "per-queue counts, paused, limit and its source");
  std::string pause_queue;
  auto* queues_pause_cmd = queues_cmd->add_subcommand(
      "pause", "stop claims from a queue in every process (durable; jobs stay queued)");
  queues_pause_cmd->add_option("queue", pause_queue, "queue name")->required();
  auto* queues_resume_cmd =
      queues_cmd->add_subcommand("resume", "let a paused queue be claimed again");
  queues_resume_cmd->add_option("queue", pause_queue, "queue name")->required();
  bool rm_force = false;
  auto* queues_rm_cmd = queues_cmd->add_subcommand(
      "rm",
      "remove a queue: its jobs, its rate-limit override, its key settings and its paused flag "
      "(refused while jobs of it run, unless --force)");
  queues_rm_cmd->add_option("queue", pause_queue, "queue name")->required();
  queues_rm_cmd->add_flag("--force", rm_force,
                          "also while jobs of it are running: they are cancelled (their "
                          "handlers' results refused) and deleted");

  std::string keys_queue;
  int64_t keys_limit = 20;
  auto* keys_cmd = app.add_subcommand(
      "keys",
      "a keyed queue's keys, busiest first: ready jobs per key (storage, every process), and "
      "with --server running jobs and throttled keys (those live in the serving process: "
      "without --server they are unknown and shown as -), each key's limit with its source and "
      "its weight, and the per-key limit and its source");
  // Not required here: `conveyor keys weight ...` has its own (checked below).
  keys_cmd->add_option("queue", keys_queue, "queue name");
  keys_cmd->add_option("--limit", keys_limit, "keys shown, 1..1000 (default 20)");
  std::string weight_queue, weight_key;
  std::optional<int64_t> weight;
  bool weight_reset = false;
  auto* keys_weight_cmd = keys_cmd->add_subcommand(
      "weight",
      "set a key's share of its queue's turns: weight W gets W jobs a round where weight 1 (the "
      "default) gets one (durable, seen by every process); --reset returns it to 1");
  keys_weight_cmd->add_option("queue", weight_queue, "queue name")->required();
  keys_weight_cmd->add_option("key", weight_key, "the key (\"\" is the empty key)")->required();
  keys_weight_cmd->add_option("weight", weight, "1.." + std::to_string(conveyor::kKeyWeightMax));
  keys_weight_cmd->add_flag("--reset", weight_reset,
                            "remove the key's weight: back to the default, 1");

  auto* jobs_cmd = app.add_subcommand("jobs", "list, show, retry, cancel and remove jobs");
  jobs_cmd->require_subcommand(1);
  JobsLsArgs ls;
  auto* jobs_ls_cmd = jobs_cmd->add_subcommand("ls", "list jobs in id order, a page at a time");
  jobs_ls_cmd->add_option("--queue", ls.queue, "only this queue (default: every queue)");
  jobs_ls_cmd->add_option("--state", ls.states,
                          "only these states: pending (= available), scheduled, running, "
                          "completed, failed, cancelled; repeat or separate with commas");
  jobs_ls_cmd->add_option("--kind", ls.kind, "only this job kind");
  jobs_ls_cmd->add_option("--limit", ls.limit, "jobs per page, 1..1000 (default 100)");
  jobs_ls_cmd->add_option("--after", ls.after,
                          "list jobs with ids after this one (the cursor a full page prints)");
  std::string show_id;
  auto* jobs_show_cmd = jobs_cmd->add_subcommand("show", "one job in full");
  jobs_show_cmd->add_option("id", show_id, "job id")->required();
  JobsRetryArgs ra;
  auto* jobs_retry_cmd = jobs_cmd->add_subcommand(
      "retry", "run failed or cancelled jobs again: by id, or a queue's in batches (--queue)");
  jobs_retry_cmd->add_option("ids", ra.ids, "job ids");
  jobs_retry_cmd->add_option("--queue", ra.queue, "retry this queue's jobs in --state");
  jobs_retry_cmd->add_option("--state", ra.state, "with --queue: failed (default) or cancelled");
  jobs_retry_cmd->add_option("--after", ra.after,
                             "with --queue: start after this id (resume an interrupted run)");
  jobs_retry_cmd->add_option("--batch", ra.batch,
                             "with --queue: jobs per call, 1..1000 (default 1000)");
  JobsBulkArgs bulk;
  // The bulk options of jobs cancel and rm (a queue's jobs, in batches).
  const auto add_bulk = [&bulk](CLI::App* cmd, const std::string& states) {
    cmd->add_option("ids", bulk.ids, "job ids (or --queue)");
    cmd->add_option("--queue", bulk.queue, "instead of ids: this queue's jobs in --state");
    cmd->add_option("--state", bulk.states, states);
    cmd->add_option("--after", bulk.after,
                    "with --queue: start after this id (resume an interrupted run)");
    cmd->add_option("--batch", bulk.batch, "with --queue: jobs per call, 1..1000 (default 1000)");
  };
  auto* jobs_cancel_cmd = jobs_cmd->add_subcommand(
      "cancel",
      "cancel jobs that are not final, by id or a queue's (--queue); a running job's result is "
      "then refused");
  add_bulk(jobs_cancel_cmd,
           "with --queue: pending (= available), scheduled, running; repeat or separate with "
           "commas (default: all three)");
  auto* jobs_rm_cmd = jobs_cmd->add_subcommand(
      "rm", "delete final jobs (completed, failed, cancelled), by id or a queue's (--queue)");
  add_bulk(jobs_rm_cmd,
           "with --queue, required: completed, failed, cancelled; repeat or separate with commas");

  TokenNewArgs token_args;
  int64_t max_backpressure = -1;
  auto* token_cmd = app.add_subcommand("token", "make worker tokens for [server.worker_tokens]");
  token_cmd->require_subcommand(1);
  auto* token_new_cmd = token_cmd->add_subcommand(
      "new", "print a new random token once, and its config block (only its SHA-256)");
  token_new_cmd->add_option("name", token_args.name, "the token's name (in refusals and logs)")
      ->required();
  token_new_cmd->add_option("--queues", token_args.queues,
                            "queues it may work, comma-separated ('*': every queue); required");
  token_new_cmd->add_option("--methods", token_args.methods,
                            "methods it may call (default: claim,complete,fail,heartbeat,"
                            "release; also enqueue, get_job)");
  token_new_cmd->add_option("--max-backpressure", max_backpressure,
                            "longest hold (s) its backpressure fails may set");
  auto* token_hash_cmd = token_cmd->add_subcommand(
      "hash", "print the SHA-256 (hex) of the token on standard input, for sha256 = \"...\"");

  std::string plugin;
  auto* plugin_cmd = app.add_subcommand("plugin", "storage plugins");
  plugin_cmd->require_subcommand(1);
  auto* plugin_info_cmd =
      plugin_cmd->add_subcommand("info", "what a plugin is and why it loads or not");
  plugin_info_cmd->add_option("plugin", plugin, "plugin name or path to a .so")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ConversionError& e) {
    return fail(2, conversion_problem(e));
  } catch (const CLI::ParseError& e) {
    // CLI11 says "A subcommand is required" for a mistyped command: name it.
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--config" || arg == "--server") {
        ++i;
        continue;
      }
      if (arg.rfind("-", 0) == 0) continue;
      if (app.get_subcommands([&](CLI::App* sub) { return sub->get_name() == arg; }).empty())
        return fail(
            2, "unknown command '" + arg +
                   "' (commands: serve, enqueue, ratelimit, queues, keys, jobs, token, plugin; see "
                   "conveyor --help)");
      break;
    }
    return fail(2, std::string(e.what()) + " (see conveyor --help)");
  }
  if (!config_path.empty()) g.config_path = config_path;
  if (!server_url.empty()) g.server_url = server_url;
  ea.count = count;
  ea.payload_given = enqueue_cmd->count("--payload") > 0;

  try {
    setup_logging(serve_cmd->parsed());
    if (serve_cmd->parsed()) return serve(g);
    if (enqueue_cmd->parsed()) {
      if (enqueue_cmd->count("--timeout") > 0)
        ea.job.timeout_s =
            static_cast<double>(conveyor::parse_timeout_ms(timeout_text, "--timeout")) / 1e3;
      return enqueue(g, ea);
    }
    if (rl_set->parsed())
      return ratelimit_set(g, rl_queue, conveyor::parse_rate(rate_text, "--rate"), burst, scope,
                           rl_target);
    if (rl_disable->parsed()) return ratelimit_switch(g, false);
    if (rl_enable->parsed()) return ratelimit_switch(g, true);
    if (rl_ls->parsed()) return ratelimit_ls(g);
    if (rl_rm->parsed()) return ratelimit_rm(g, rl_queue, rl_target);
    if (queues_pause_cmd->parsed()) return queues_pause(g, pause_queue, true);
    if (queues_resume_cmd->parsed()) return queues_pause(g, pause_queue, false);
    if (queues_rm_cmd->parsed()) return queues_rm(g, pause_queue, rm_force);
    if (queues_cmd->parsed()) return queues(g);
    if (keys_weight_cmd->parsed()) {
      if (!keys_queue.empty() || keys_cmd->count("--limit") > 0)
        return fail(2,
                    "keys weight takes QUEUE KEY W (or --reset) after the word weight, and no "
                    "--limit (see conveyor keys weight --help)");
      return keys_weight(g, weight_queue, weight_key, weight, weight_reset);
    }
    if (keys_cmd->parsed()) {
      if (keys_queue.empty())
        return fail(2,
                    "give a queue: conveyor keys QUEUE [--limit N], or conveyor keys weight "
                    "QUEUE KEY W (see conveyor keys --help)");
      return keys(g, keys_queue, keys_limit);
    }
    if (jobs_ls_cmd->parsed()) return jobs_ls(g, ls);
    if (jobs_show_cmd->parsed()) return jobs_show(g, show_id);
    if (jobs_retry_cmd->parsed()) return jobs_retry(g, ra);
    if (jobs_cancel_cmd->parsed()) return jobs_cancel_bulk(g, bulk);
    if (jobs_rm_cmd->parsed()) return jobs_rm_bulk(g, bulk);
    if (plugin_info_cmd->parsed()) return plugin_info(g, plugin);
    if (token_new_cmd->parsed()) {
      if (token_new_cmd->count("--max-backpressure") > 0)
        token_args.max_backpressure_s = max_backpressure;
      return token_new(token_args);
    }
    if (token_hash_cmd->parsed()) return token_hash();
    return fail(2, "no command given (see conveyor --help)");
  } catch (const conveyor::ValidationError& e) {
    return fail(2, e.what());
  } catch (const conveyor::ConfigError& e) {
    return fail(2, e.what());
  } catch (const UsageError& e) {
    return fail(2, e.what());
  } catch (const conveyor::ApiError& e) {
    // The server's own words; its validation errors are the user's to fix.
    return fail(e.code() == conveyor::ApiCode::kInvalidArgument ? 2 : 1, e.what());
  } catch (const conveyor::ServerStartError& e) {
    return fail(1, e.what());
  } catch (const conveyor::PluginLoadError& e) {
    return fail(1, e.what());
  } catch (const conveyor::StorageError& e) {
    return fail(1, e.what());
  } catch (const NotFound& e) {
    return fail(1, e.what());
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
}
