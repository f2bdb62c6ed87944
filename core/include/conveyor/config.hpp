// Conveyor's configuration: the TOML file (docs/reference.md) plus the environment.
#pragma once

#include <conveyor/rate_limit.hpp>
#include <conveyor/validation.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor {

struct StorageConfig {
  // A plugin name found in plugin_dir (libconveyor-NAME.so) or a path to a .so.
  std::string plugin = "sqlite";
  // Empty: the plugins installed with conveyor (<exe>/../lib/conveyor/plugins).
  std::string plugin_dir;
  // [storage.options], handed to the plugin as text, in file order.
  std::vector<std::pair<std::string, std::string>> options;
  // The line of each option in the config file, for errors about it.
  std::map<std::string, uint32_t, std::less<>> option_lines;
  bool operator==(const StorageConfig&) const = default;
};

struct EngineConfig {
  bool rate_limit_enabled = true;                      // the kill switch
  double rate_limit_rate_per_sec = 0;                  // global default; 0 = none
  uint32_t rate_limit_burst = 0;                       // 0 = ceil(rate)
  LimitScope rate_limit_scope = LimitScope::kProcess;  // the default limit's scope
  uint32_t max_workers = 10;         // per queue, unless [queues.NAME] says otherwise
  uint32_t worker_threads = 256;     // cap on handler threads, all queues together
  uint32_t claim_batch_max = 100;    // most jobs claimed in one storage call
  uint32_t poll_interval_ms = 1000;  // idle queue re-check and queue discovery
  // A drained queue's re-check when storage reports delayed jobs coming due
  // (CONVEYOR_CAP_NOTIFY_DUE) and its notifications work: a safety net only.
  uint32_t notified_poll_interval_ms = 60000;
  uint32_t lease_ms = 30000;                // lease length; running jobs heartbeat at 1/3
  uint32_t rescue_interval_ms = 5000;       // how often expired leases are rescued
  uint32_t max_attempts = 25;               // default for enqueued jobs
  uint32_t retry_backoff_base_ms = 1000;    // first retry delay, doubling
  uint32_t retry_backoff_max_ms = 3600000;  // cap on the retry delay
  // Backpressure (a handler's RetryAfter, a worker's backpressure fail): the
  // longest a queue is held, and the first hold when the downstream named no
  // delay (doubling while the holds follow each other).
  uint32_t max_backoff_s = 3600;
  uint32_t backoff_base_ms = 1000;
  uint32_t shutdown_timeout_ms = 10000;  // running jobs' grace on stop
  uint32_t retention_s = 86400;          // keep completed/failed/cancelled jobs
  // A claimed job whose kind has no handler here (only possible when the
  // plugin lacks ABI 1.1's claim_kinds, or a handler went away after the
  // claim): kFail fails it at once, naming the kinds served; kRetry counts
  // a failed attempt and retries it with backoff (logged).
  enum class UnknownKind { kFail, kRetry };
  UnknownKind unknown_kind = UnknownKind::kFail;
  // How long a ready job of a kind nobody here serves waits before queue
  // reports, /metrics and a warning name it (see docs/reference.md).
  uint32_t unknown_kind_grace_s = 60;
  // How long one attempt of a job may run before it fails as timed out, in
  // seconds (0.001 to kMaxJobTimeoutS), for every queue without its own
  // [queues.NAME] job_timeout_s; 0: no limit.
  double job_timeout_s = 0;

  // The global default limit, if rate_limit_rate_per_sec > 0.
  std::optional<RateLimit> default_limit() const;
  bool operator==(const EngineConfig&) const = default;
};

// TLS settings of "http" jobs, in [http] (every job) and [queues.NAME.http]
// (that queue's jobs; each key set there replaces [http]'s, client_cert and
// client_key together). Paths are checked when the config is read: a file
// must exist and be readable, ca_dir must be a readable directory.
struct HttpTlsConfig {
  std::string ca_file;      // PEM bundle of the CAs to trust; empty: the system's
  std::string ca_dir;       // a directory of CA certificates hashed by c_rehash
  std::string client_cert;  // PEM client certificate (mutual TLS); with client_key
  std::string client_key;   // PEM private key of client_cert; with client_cert
  bool operator==(const HttpTlsConfig&) const = default;
};

// [queues.NAME.http]: where the queue's "http" jobs are delivered. With it,
// a job's payload is the request body; without it, the payload names the
// request (docs/reference.md, "The http job kind").
struct HttpTargetConfig {
  std::string url;                                           // http:// or https://
  std::string method = "POST";                               // an HTTP method token, upper case
  uint32_t timeout_ms = 30000;                               // the whole request, 1..3,600,000
  std::vector<std::pair<std::string, std::string>> headers;  // in file order
  // The environment variable holding the signing secret (read when the
  // server starts); empty: requests are not signed.
  std::string secret_env;
  bool follow_redirects = false;  // at most 5 hops, each checked by the guard
  // What a 429/503 (or a handler's RetryAfter) of a job with a key holds:
  // its key only, so the queue's other keys go on (kKey, the default), or
  // the whole queue (kQueue). A job with the empty key holds the queue.
  enum class Hold { kKey, kQueue };
  Hold hold = Hold::kKey;
  HttpTlsConfig tls;  // ca_file, ca_dir, client_cert, client_key
  bool operator==(const HttpTargetConfig&) const = default;
};

// How a queue chooses between its jobs' keys (docs/design/keys.md).
enum class Fairness {
  kFair,  // ready keys take turns (weighted round-robin); priority orders jobs within a key
  kFifo,  // claim order (priority, run_at, id) across keys: one key's backlog delays the rest
};
// "fair", "fifo".
const char* to_string(Fairness fairness) noexcept;

struct QueueConfig {
  std::optional<uint32_t> max_workers;
  std::optional<RateLimit> rate_limit;  // burst already resolved (0 -> ceil(rate))
  std::optional<HttpTargetConfig> http;
  // Job keys (issue 36). key_from: a JSON pointer ("/tenant") into each
  // enqueued job's payload; its string (or number) value is the job's key
  // when the job has none; a payload without it gets the empty key.
  std::string key_from{};
  // Every key of the queue gets its own bucket with these settings.
  std::optional<RateLimit> key_rate_limit{};
  // At most this many jobs of one key run at once (in this process).
  std::optional<uint32_t> key_max_workers{};
  Fairness fairness = Fairness::kFair;
  // Replaces [engine] job_timeout_s for this queue (0: no limit here).
  std::optional<double> job_timeout_s{};

  // Whether any per-key setting is made (a plugin without ABI 1.4 refuses it).
  bool uses_keys() const noexcept {
    return !key_from.empty() || key_rate_limit.has_value() || key_max_workers.has_value();
  }
  bool operator==(const QueueConfig&) const = default;
};

// [http]: what every "http" job may reach, and what it may read.
struct HttpConfig {
  // Targets on loopback, private, link-local, CGNAT, multicast and
  // unspecified addresses are refused unless this is set or the URL's host
  // is in allow_hosts (exact, case-insensitive).
  bool allow_private = false;
  std::vector<std::string> allow_hosts;
  uint32_t max_response_bytes = 65536;     // bytes of a response body read
  uint32_t max_connections_per_host = 64;  // 0: no limit
  HttpTlsConfig tls;                       // ca_file, ca_dir, client_cert, client_key
  bool operator==(const HttpConfig&) const = default;
};

// What a worker token may call (config names: claim, complete, fail,
// heartbeat, release, enqueue (Enqueue and EnqueueBatch), get_job).
enum class WorkerMethod : uint8_t {
  kClaim,
  kComplete,
  kFail,
  kHeartbeat,
  kRelease,
  kEnqueue,
  kGetJob
};
inline constexpr WorkerMethod kWorkerMethods[] = {
    WorkerMethod::kClaim,   WorkerMethod::kComplete, WorkerMethod::kFail,  WorkerMethod::kHeartbeat,
    WorkerMethod::kRelease, WorkerMethod::kEnqueue,  WorkerMethod::kGetJob};
const char* to_string(WorkerMethod method) noexcept;
constexpr uint32_t method_bit(WorkerMethod m) noexcept { return 1u << static_cast<unsigned>(m); }
// The default of a named token: the methods a worker needs to run jobs.
inline constexpr uint32_t kWorkerRunMethods =
    method_bit(WorkerMethod::kClaim) | method_bit(WorkerMethod::kComplete) |
    method_bit(WorkerMethod::kFail) | method_bit(WorkerMethod::kHeartbeat) |
    method_bit(WorkerMethod::kRelease);
inline constexpr uint32_t kAllWorkerMethods =
    kWorkerRunMethods | method_bit(WorkerMethod::kEnqueue) | method_bit(WorkerMethod::kGetJob);

// [server.worker_tokens.NAME]: a remote worker's token with its own scope.
// Only the token's SHA-256 is kept (token_env's value is hashed when read).
struct WorkerTokenConfig {
  std::string name;                      // NAME: what refusals and logs say, never the token
  std::string sha256;                    // 64 lower-case hex digits
  std::string token_env;                 // the variable the token came from; "" with sha256
  bool every_queue = false;              // queues = ["*"]
  std::vector<std::string> queues;       // the queues it may touch (sorted) unless every_queue
  uint32_t methods = kWorkerRunMethods;  // method_bit()s
  // The longest hold a backpressure Fail may set; nullopt: [engine] max_backoff_s.
  std::optional<uint32_t> max_backpressure_s;
  bool operator==(const WorkerTokenConfig&) const = default;
};

// The lower-case hex SHA-256 of text (64 digits).
std::string sha256_hex(std::string_view text);

struct ServerConfig {
  std::string listen;       // "host:port"; empty: no admin server
  std::string admin_token;  // Bearer token for the admin API; empty: none
  // Bearer token of remote workers (env CONVEYOR_WORKER_TOKEN): it may call
  // only WorkerService and TaskService's Enqueue, EnqueueBatch and GetJob.
  // Empty: none (workers then need the admin token, or an open server).
  std::string worker_token;
  // Named, scoped worker tokens, by name; reloaded on SIGHUP.
  std::vector<WorkerTokenConfig> worker_tokens;
  // Serve the API without a token (only while admin_token is empty: a token
  // that is set is always required).
  bool allow_unauthenticated = false;
  // allow_unauthenticated = "loopback": as true, but only while listen is a
  // loopback address; the server refuses to start elsewhere without a token.
  bool unauthenticated_loopback_only = false;
  bool read_only = false;             // refuse calls that change state
  uint32_t max_body_bytes = 1048576;  // largest request body accepted (>= 1024)
  // /metrics: at most this many queues get series of their own; the rest are
  // summed into queue="_other" (docs/reference.md, Metrics). 0: every queue.
  uint32_t metrics_max_queues = 100;
  bool operator==(const ServerConfig&) const = default;
};

// [log]: how much the process logs and in which format (stderr).
enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError, kCritical, kOff };
enum class LogFormat { kText, kJson };
struct LogConfig {
  // Unset: the command's default (serve logs info, other commands warn).
  std::optional<LogLevel> level;
  // text: "TIME LEVEL message"; json: one object per line with time (UTC),
  // level, message and the line's fields (queue, job_id, kind, ...).
  LogFormat format = LogFormat::kText;
  bool operator==(const LogConfig&) const = default;
};
// The level names, as the config and CONVEYOR_LOG_LEVEL take them.
inline constexpr const char* kLogLevelNames = "trace, debug, info, warn, error, critical, off";
// A level by name, any case ("warning" too); nullopt for anything else.
std::optional<LogLevel> parse_log_level(std::string_view name);
const char* to_string(LogLevel level) noexcept;

// "host:port" split up. host may be a name, an IPv4 address or "[IPv6]"
// (brackets kept off here); port is 1-65535.
struct ListenAddress {
  std::string host;
  uint16_t port = 0;
};

// Parses "host:port". Throws ValidationError("listen", ...) saying the form.
ListenAddress parse_listen_address(std::string_view listen);

struct Config {
  std::string source = "<defaults>";  // the file it came from, or "<defaults>"
  StorageConfig storage;
  EngineConfig engine;
  std::map<std::string, QueueConfig> queues;
  ServerConfig server;
  LogConfig log;
  HttpConfig http;

  // max_workers of queue: [queues.NAME] or the engine default.
  uint32_t max_workers_for(std::string_view queue) const;
  // The attempt timeout of queue's jobs enqueued without their own, in
  // milliseconds: [queues.NAME] job_timeout_s or the engine default; 0: none.
  int64_t job_timeout_ms_for(std::string_view queue) const;
};

// The longest job_timeout_s (7 days, as a job's own timeout_ms).
inline constexpr double kMaxJobTimeoutS = 7 * 86400;

// A config problem: what() reads "FILE:LINE: KEY: what is wrong (what to do)",
// or names the environment variable.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A plugin's refusal of its options as a config error: when message (the
// plugin's words) names "storage option 'KEY'" for a KEY of the file's
// [storage.options], "FILE:LINE: storage.options.KEY: message"; else nullopt.
std::optional<ConfigError> storage_option_error(const Config& config, std::string_view message);

// Reads an environment variable; returns nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
EnvLookup process_env();

// The names of the process environment's variables that start with CONVEYOR_.
std::vector<std::string> process_env_names();

// Checks the names of CONVEYOR_* variables against the ones conveyor reads
// (docs/reference.md, "Environment variables"). An unknown name is a setting
// silently dropped, so it throws ConfigError naming it when it is at most two
// edits from a known name ("did you mean ...?") or starts like a setting
// (CONVEYOR_RATE_LIMIT_, CONVEYOR_SERVER_, CONVEYOR_ENGINE_, ... one prefix
// per config section). Names of conveyor's own scripts, tests and builds
// (CONVEYOR_TEST_*, CONVEYOR_BENCH_*, CONVEYOR_BIN, ...) pass. Returns a
// warning for every other unknown name.
std::vector<std::string> check_env_names(const std::vector<std::string>& names);

// Parses TOML text; source_name is used in messages. Applies the environment
// (CONVEYOR_RATE_LIMIT_ENABLED, _RATE_PER_SEC, _BURST, _SCOPE,
// CONVEYOR_STORAGE_PLUGIN, CONVEYOR_SERVER_LISTEN, CONVEYOR_ADMIN_TOKEN,
// CONVEYOR_WORKER_TOKEN, CONVEYOR_LOG_LEVEL); a variable set to "" counts as
// unset. Refuses an admin_token equal to the worker_token. Throws ConfigError.
// Without env, the process environment: its CONVEYOR_* names are checked
// (check_env_names; the warnings are logged). With env, env_names are checked
// (none by default: a lookup cannot list its names).
Config parse_config(std::string_view toml_text, std::string_view source_name);
Config parse_config(std::string_view toml_text, std::string_view source_name, const EnvLookup& env,
                    const std::vector<std::string>& env_names = {});

// Reads and parses a file, as parse_config. Throws ConfigError (also when it
// cannot be read).
Config load_config_file(const std::filesystem::path& path);
Config load_config_file(const std::filesystem::path& path, const EnvLookup& env,
                        const std::vector<std::string>& env_names = {});

// The config file to use: explicit (from --config) if given, else
// $CONVEYOR_CONFIG, else config/conveyor.toml.
std::filesystem::path resolve_config_path(const std::optional<std::string>& explicit_path,
                                          const EnvLookup& env = process_env());

}  // namespace conveyor
