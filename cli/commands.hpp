// The `conveyor` subcommands. Each returns the process exit code and throws
// for errors, which main() maps to exit codes and one-line messages.
#pragma once

#include <conveyor/config.hpp>
#include <conveyor/job_request.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace conveyor {
class AdminServer;
}  // namespace conveyor

namespace conveyor::cli {

struct GlobalOptions {
  std::optional<std::string> config_path;  // --config
  std::optional<std::string> server_url;   // --server: use the API, not storage
  bool json = false;                       // --json
};

// Bounds of one `conveyor enqueue --count`, which is one transaction.
inline constexpr int64_t kMaxEnqueueCount = 1'000'000;
inline constexpr uint64_t kMaxEnqueuePayloadBytes = 256ull << 20;

struct EnqueueArgs {
  JobRequest job;
  int64_t count = 1;
  bool payload_given = false;               // --payload (job.payload holds it)
  std::optional<std::string> payload_file;  // --payload-file PATH ("-": stdin)
};

// What `ratelimit set` and `rm` act on, as typed: the queue's override, or
// with --key K one key's own limit, or with --per-key the limit of every
// key of the queue (both given: exit 2).
struct KeyTargetArgs {
  std::optional<std::string> key;  // --key ("" is the empty key)
  bool per_key = false;            // --per-key
};

int serve(const GlobalOptions& g);

// `conveyor token new NAME --queues a,b [--methods ...] [--max-backpressure S]`:
// a random token, printed once, and its [server.worker_tokens.NAME] block.
struct TokenNewArgs {
  std::string name;
  std::vector<std::string> queues;   // each may be "a,b"
  std::vector<std::string> methods;  // each may be "a,b"; none: the default
  std::optional<int64_t> max_backpressure_s;
};
int token_new(const TokenNewArgs& a);
// `conveyor token hash`: the SHA-256 (hex) of the token on standard input.
int token_hash();
// SIGHUP: re-reads the config file; applies the worker tokens (to server,
// when there is one) and the log level, warns naming the other settings
// that changed, keeps running as it is when the file does not load.
void reload_config(const GlobalOptions& g, Config& running, AdminServer* server);
int enqueue(const GlobalOptions& g, const EnqueueArgs& a);
// scope: as typed ("process" or "fleet"); a bad one names --scope (exit 2).
int ratelimit_set(const GlobalOptions& g, const std::string& queue, double rate,
                  std::optional<int64_t> burst, const std::string& scope,
                  const KeyTargetArgs& target = {});
// `ratelimit disable` / `enable`: the live kill switch, stored.
int ratelimit_switch(const GlobalOptions& g, bool enabled);
int ratelimit_ls(const GlobalOptions& g);
int ratelimit_rm(const GlobalOptions& g, const std::string& queue,
                 const KeyTargetArgs& target = {});
int queues(const GlobalOptions& g);
int queues_pause(const GlobalOptions& g, const std::string& queue, bool paused);
// `conveyor keys QUEUE --limit N` (1..1000).
int keys(const GlobalOptions& g, const std::string& queue, int64_t limit);
// `conveyor keys weight QUEUE KEY W` (1..1000) or `... KEY --reset` (back to
// the default, 1; exit 1 when the key had no weight): exactly one of them.
int keys_weight(const GlobalOptions& g, const std::string& queue, const std::string& key,
                std::optional<int64_t> weight, bool reset);

// `conveyor jobs ...`. Ids and cursors arrive as the user typed them, so a
// malformed one gets an error naming the argument (exit 2).
struct JobsLsArgs {
  std::string queue;                // "": every queue
  std::vector<std::string> states;  // each may be "a,b"
  std::string kind;
  int64_t limit = 100;
  std::string after = "0";
};
int jobs_ls(const GlobalOptions& g, const JobsLsArgs& a);
int jobs_show(const GlobalOptions& g, const std::string& id);
struct JobsRetryArgs {
  std::vector<std::string> ids;
  std::string queue;  // bulk form, with state
  std::string state = "failed";
  std::string after = "0";
  int64_t batch = 1000;
};
int jobs_retry(const GlobalOptions& g, const JobsRetryArgs& a);
int jobs_cancel(const GlobalOptions& g, const std::vector<std::string>& ids);
int jobs_rm(const GlobalOptions& g, const std::vector<std::string>& ids);
// `jobs cancel --queue Q [--state S]` and `jobs rm --queue Q --state S`: a
// queue's jobs in bounded batches (--batch per call), resumable with
// --after. With ids instead, the by-id forms above.
struct JobsBulkArgs {
  std::vector<std::string> ids;
  std::string queue;
  std::vector<std::string> states;  // each may be "a,b"
  std::string after = "0";
  int64_t batch = 1000;
};
int jobs_cancel_bulk(const GlobalOptions& g, const JobsBulkArgs& a);
int jobs_rm_bulk(const GlobalOptions& g, const JobsBulkArgs& a);
// `queues rm QUEUE [--force]`.
int queues_rm(const GlobalOptions& g, const std::string& queue, bool force);
int plugin_info(const GlobalOptions& g, const std::string& plugin);

// A failure that is the user's to fix (exit code 2).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A requested thing that does not exist (exit code 1).
class NotFound : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace conveyor::cli
