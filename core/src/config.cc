// Config loading (config.hpp): strict TOML reading, then environment overrides.
// Every error names the file, the line and the dotted key, and says what is
// allowed, because a typo in a config file should cost seconds, not an outage.
#include <conveyor/config.hpp>
#include <conveyor/validation.hpp>

#include <openssl/sha.h>
#include <spdlog/spdlog.h>
#include <toml++/toml.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

extern char** environ;  // POSIX: the process environment

namespace conveyor {
namespace {

constexpr int64_t kU32Max = std::numeric_limits<uint32_t>::max();
constexpr int64_t kMinBodyBytes = 1024;
constexpr const char* kDefaultConfigPath = "config/conveyor.toml";

// ---- listen addresses -------------------------------------------------------

bool is_host_char(char c, bool bracketed) {
  const bool alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
  if (alnum || c == '.' || c == '-' || c == '_') return true;
  return bracketed && (c == ':' || c == '%');  // IPv6 and its zone id
}

// The host part without brackets, or nullopt when it is malformed.
std::optional<std::string> parse_host(std::string_view host) {
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) host = host.substr(1, host.size() - 2);
  if (host.empty()) return std::nullopt;
  for (char c : host) {
    if (!is_host_char(c, bracketed)) return std::nullopt;
  }
  return std::string(host);
}

std::optional<uint16_t> parse_port(std::string_view port) {
  if (port.empty() || port.size() > 5) return std::nullopt;
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size()) return std::nullopt;
  if (value < 1 || value > 65535) return std::nullopt;
  return static_cast<uint16_t>(value);
}

std::optional<ListenAddress> try_parse_listen(std::string_view listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  auto host = parse_host(listen.substr(0, colon));
  auto port = parse_port(listen.substr(colon + 1));
  if (!host || !port) return std::nullopt;
  return ListenAddress{std::move(*host), *port};
}

// "must be ..." for a bad listen value: shared by the file, env and API paths.
std::string listen_problem(std::string_view listen) {
  return "must be \"host:port\" with a port from 1 to 65535 (e.g. \"127.0.0.1:8080\"), got " +
         quote_for_message(listen);
}

// Why a token (admin_token, worker_token) cannot be used, or nullopt. The
// message says where the bad byte is, never what the token holds: it is a
// secret. HTTP drops the spaces around a header value and cannot carry a
// newline or another control character in one, so such a token could never
// be presented (everyone would be locked out), and a newline in a header is
// how requests get split.
std::optional<std::string> token_problem(std::string_view token) {
  for (size_t i = 0; i < token.size(); ++i) {
    const auto byte = static_cast<unsigned char>(token[i]);
    if (byte > ' ' && byte != 0x7f) continue;
    const std::string what = byte == ' '    ? "a space"
                             : byte == '\t' ? "a tab"
                             : byte == '\n' ? "a newline"
                             : byte == '\r' ? "a carriage return"
                                            : "a control character";
    return "must not contain whitespace or control characters, but has " + what + " at byte " +
           std::to_string(i) + " of " + std::to_string(token.size()) +
           " (HTTP cannot carry it in the Authorization header, so no client could send this "
           "token): use printable ASCII without spaces, e.g. the output of openssl rand -hex 32";
  }
  return std::nullopt;
}

// ---- value text -------------------------------------------------------------

// A TOML float as text that still reads as a float: 2.0 stays "2.0", not "2".
std::string float_text(double value) {
  std::string text = format_number(value);
  if (text.find_first_not_of("-0123456789") == std::string::npos) text += ".0";
  return text;
}

// What the user wrote, for "got ..." in messages.
std::string describe(const toml::node& node) {
  if (const auto* s = node.as_string()) return quote_for_message(s->get());
  if (const auto* i = node.as_integer()) return std::to_string(i->get());
  if (const auto* f = node.as_floating_point()) return float_text(f->get());
  if (const auto* b = node.as_boolean()) return b->get() ? "true" : "false";
  if (node.is_table()) return "a table";
  if (node.is_array()) return "an array";
  return "a date/time";
}

std::string integer_rule(int64_t min, int64_t max) {
  if (max == kU32Max) return "an integer >= " + std::to_string(min);
  return "an integer from " + std::to_string(min) + " to " + std::to_string(max);
}

bool is_bare_key(std::string_view key) {
  if (key.empty()) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

// The dotted key as TOML would spell it: queues."email:send".max_workers.
std::string key_path(std::string_view parent, std::string_view key) {
  const bool plain = is_bare_key(key) && key.size() <= 64;  // long keys are cut when quoted
  std::string part = plain ? std::string(key) : quote_for_message(key);
  if (parent.empty()) return part;
  return std::string(parent) + "." + part;
}

// toml::table is ordered by key; errors and storage options follow the file.
std::vector<std::pair<const toml::key*, const toml::node*>> in_file_order(const toml::table& t) {
  std::vector<std::pair<const toml::key*, const toml::node*>> entries;
  for (const auto& [key, node] : t) entries.emplace_back(&key, &node);
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    const auto& pa = a.first->source().begin;
    const auto& pb = b.first->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  return entries;
}

// Edit distance, for "did you mean" on unknown keys.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// ---- the reader -------------------------------------------------------------

// One key being read: its value, dotted path and where it was written.
struct Field {
  const toml::node& node;
  std::string path;
  uint32_t key_line;
};

struct KeyHandler {
  std::string_view name;
  std::function<void(const Field&)> read;
};

struct U32Key {
  std::string_view name;
  uint32_t EngineConfig::*member;
  int64_t min;
  int64_t max;
};

// The plain integer keys of [engine] and their allowed ranges.
constexpr U32Key kEngineU32Keys[] = {
    {"rate_limit_burst", &EngineConfig::rate_limit_burst, 0, kU32Max},
    {"max_workers", &EngineConfig::max_workers, 1, kU32Max},
    {"worker_threads", &EngineConfig::worker_threads, 1, kU32Max},
    {"claim_batch_max", &EngineConfig::claim_batch_max, 1, 10000},
    {"poll_interval_ms", &EngineConfig::poll_interval_ms, 1, kU32Max},
    {"notified_poll_interval_ms", &EngineConfig::notified_poll_interval_ms, 1, kU32Max},
    {"lease_ms", &EngineConfig::lease_ms, 100, kU32Max},
    {"rescue_interval_ms", &EngineConfig::rescue_interval_ms, 1, kU32Max},
    {"max_attempts", &EngineConfig::max_attempts, 1, kU32Max},
    {"retry_backoff_base_ms", &EngineConfig::retry_backoff_base_ms, 1, kU32Max},
    {"retry_backoff_max_ms", &EngineConfig::retry_backoff_max_ms, 1, kU32Max},
    {"max_backoff_s", &EngineConfig::max_backoff_s, 1, 30 * 86400},
    {"backoff_base_ms", &EngineConfig::backoff_base_ms, 1, kU32Max},
    {"shutdown_timeout_ms", &EngineConfig::shutdown_timeout_ms, 0, kU32Max},
    {"retention_s", &EngineConfig::retention_s, 0, kU32Max},
    {"unknown_kind_grace_s", &EngineConfig::unknown_kind_grace_s, 0, kU32Max},
};

class Reader {
 public:
  Reader(std::string_view source, const EnvLookup& env) : source_(source), env_(env) {}

  void read_root(const toml::table& root, Config& config) const;

 private:
  [[noreturn]] void fail_at(uint32_t line, const std::string& path,
                            const std::string& problem) const {
    throw ConfigError(source_ + ":" + std::to_string(line) + ": " + path + ": " + problem);
  }
  [[noreturn]] void fail(const Field& f, const std::string& problem) const {
    const uint32_t line = f.node.source().begin.line;
    fail_at(line != 0 ? line : f.key_line, f.path, problem);
  }
  [[noreturn]] void fail_type(const Field& f, const std::string& rule) const {
    fail(f, "must be " + rule + ", got " + describe(f.node));
  }

  void walk(const toml::table& table, const std::string& path,
            const std::vector<KeyHandler>& keys) const;
  [[noreturn]] void fail_unknown(const Field& f, const std::string& section,
                                 const std::vector<KeyHandler>& keys) const;

  bool read_bool(const Field& f) const;
  double read_number(const Field& f, bool allow_zero) const;
  double read_job_timeout(const Field& f) const;
  uint32_t read_u32(const Field& f, int64_t min, int64_t max = kU32Max) const;
  std::string read_string(const Field& f, bool allow_empty) const;
  const toml::table& read_table(const Field& f) const;

  void read_storage(const Field& f, StorageConfig& storage) const;
  void read_storage_options(const Field& f, StorageConfig& storage) const;
  void read_engine(const Field& f, EngineConfig& engine) const;
  void check_backoff(const toml::table& table, const std::string& path,
                     const EngineConfig& engine) const;
  void read_queues(const Field& f, std::map<std::string, QueueConfig>& queues) const;
  QueueConfig read_queue(const Field& f) const;
  RateLimit read_queue_rate_limit(const Field& f, std::string_view name) const;
  std::string read_key_from(const Field& f) const;
  Fairness read_fairness(const Field& f) const;
  LimitScope read_scope(const Field& f) const;
  HttpTargetConfig read_queue_http(const Field& f) const;
  void read_http(const Field& f, HttpConfig& http) const;
  // The TLS keys of [http] and [queues.NAME.http], to append to their keys.
  struct TlsFields {
    std::optional<std::pair<std::string, uint32_t>> cert, key;  // path and line, once read
  };
  void add_tls_keys(std::vector<KeyHandler>& keys, HttpTlsConfig& tls, TlsFields& read) const;
  void check_tls_pair(const TlsFields& read) const;
  std::string read_tls_path(const Field& f, bool directory) const;
  void read_server(const Field& f, ServerConfig& server) const;
  void read_worker_tokens(const Field& f, std::vector<WorkerTokenConfig>& tokens) const;
  WorkerTokenConfig read_worker_token(const Field& f, std::string name) const;
  std::vector<std::string> read_string_array(const Field& f, const std::string& example) const;
  void read_log(const Field& f, LogConfig& log) const;

  std::string source_;
  const EnvLookup& env_;  // token_env's variables
};

void Reader::walk(const toml::table& table, const std::string& path,
                  const std::vector<KeyHandler>& keys) const {
  for (const auto& [key, node] : in_file_order(table)) {
    const Field f{*node, key_path(path, key->str()), key->source().begin.line};
    const std::string_view name = key->str();  // clang 14 cannot capture a structured binding
    const auto handler =
        std::find_if(keys.begin(), keys.end(), [&](const KeyHandler& k) { return k.name == name; });
    if (handler == keys.end()) fail_unknown(f, path, keys);
    handler->read(f);
  }
}

void Reader::fail_unknown(const Field& f, const std::string& section,
                          const std::vector<KeyHandler>& keys) const {
  std::string known;
  std::string_view closest;
  size_t best = 3;  // suggest only near misses (a typo or two)
  const std::string typed = f.path.substr(section.empty() ? 0 : section.size() + 1);
  for (const auto& k : keys) {
    known += (known.empty() ? "" : ", ") + std::string(k.name);
    const size_t distance = edit_distance(typed, k.name);
    if (distance < best) {
      best = distance;
      closest = k.name;
    }
  }
  const std::string where = section.empty() ? "at the top level" : "in [" + section + "]";
  std::string problem = "unknown key (known keys " + where + ": " + known + ")";
  if (!closest.empty()) problem += "; did you mean " + std::string(closest) + "?";
  fail_at(f.key_line, f.path, problem);
}

bool Reader::read_bool(const Field& f) const {
  const auto* value = f.node.as_boolean();
  if (value == nullptr) fail_type(f, "true or false");
  return value->get();
}

double Reader::read_number(const Field& f, bool allow_zero) const {
  const std::string rule = allow_zero ? "a number >= 0" : "a number > 0";
  std::optional<double> value;  // integers are fine where a number is wanted
  if (const auto* d = f.node.as_floating_point()) value = d->get();
  if (const auto* i = f.node.as_integer()) value = static_cast<double>(i->get());
  if (!value) fail_type(f, rule);
  if (!std::isfinite(*value)) fail_type(f, "a finite " + rule.substr(2));
  if (*value < 0 || (*value == 0 && !allow_zero)) fail_type(f, rule);
  // TOML also takes 0x10, 0o20 and 0b10000 as integers; a rate is written in
  // decimal everywhere (CLI, environment, API), so here too.
  if (const auto* i = f.node.as_integer(); i != nullptr && i->flags() != toml::value_flags::none)
    fail(f, "must be written in decimal (e.g. 16 or 2.5), not in hexadecimal, octal or binary");
  // Only rates are read as numbers; they share validate_rate's range (0,
  // where allowed, means no limit).
  if (*value > kMaxRatePerSec)
    fail_type(f, "at most " + std::to_string(static_cast<int64_t>(kMaxRatePerSec)) +
                     " (jobs per second)");
  if (*value != 0 && *value < kMinRatePerSec)
    fail_type(f, "at least " + format_number(kMinRatePerSec) + " (jobs per second: one job every " +
                     format_number(1 / kMinRatePerSec) + " s; to stop a queue, pause it" +
                     (allow_zero ? ", or write 0 for no limit)" : ")"));
  return *value;
}

// job_timeout_s: 0 (no limit) or 0.001 to kMaxJobTimeoutS seconds, in decimal.
double Reader::read_job_timeout(const Field& f) const {
  const std::string rule = "a number of seconds, 0.001 to " + format_number(kMaxJobTimeoutS) +
                           " (7 days), or 0 for no timeout";
  std::optional<double> value;
  if (const auto* d = f.node.as_floating_point()) value = d->get();
  if (const auto* i = f.node.as_integer()) value = static_cast<double>(i->get());
  if (!value || !std::isfinite(*value) || *value < 0 || *value > kMaxJobTimeoutS ||
      (*value != 0 && *value < 0.001))
    fail_type(f, rule);
  if (const auto* i = f.node.as_integer(); i != nullptr && i->flags() != toml::value_flags::none)
    fail(f, "must be written in decimal (e.g. 30 or 2.5), not in hexadecimal, octal or binary");
  return *value;
}

uint32_t Reader::read_u32(const Field& f, int64_t min, int64_t max) const {
  const auto* value = f.node.as_integer();
  // Above the top the rule states it (an ">= 100" alone would mislead).
  if (value != nullptr && value->get() > max)
    fail_type(f, "an integer from " + std::to_string(min) + " to " + std::to_string(max));
  if (value == nullptr || value->get() < min) {
    fail_type(f, integer_rule(min, max));
  }
  return static_cast<uint32_t>(value->get());
}

std::string Reader::read_string(const Field& f, bool allow_empty) const {
  const auto* value = f.node.as_string();
  if (value == nullptr) fail_type(f, allow_empty ? "a string" : "a non-empty string");
  if (value->get().empty() && !allow_empty) fail_type(f, "a non-empty string");
  return value->get();
}

const toml::table& Reader::read_table(const Field& f) const {
  const auto* table = f.node.as_table();
  if (table == nullptr) fail_type(f, "a table ([" + f.path + "] or { ... })");
  return *table;
}

void Reader::read_root(const toml::table& root, Config& config) const {
  walk(root, "",
       {{"storage", [&](const Field& f) { read_storage(f, config.storage); }},
        {"engine", [&](const Field& f) { read_engine(f, config.engine); }},
        {"queues", [&](const Field& f) { read_queues(f, config.queues); }},
        {"server", [&](const Field& f) { read_server(f, config.server); }},
        {"log", [&](const Field& f) { read_log(f, config.log); }},
        {"http", [&](const Field& f) { read_http(f, config.http); }}});
}

void Reader::read_log(const Field& f, LogConfig& log) const {
  walk(read_table(f), f.path,
       {{"level",
         [&](const Field& k) {
           const std::string name = read_string(k, false);
           log.level = parse_log_level(name);
           if (!log.level)
             fail(k, std::string("must be one of ") + kLogLevelNames + ", got " +
                         quote_for_message(name));
         }},
        {"format", [&](const Field& k) {
           const std::string name = read_string(k, false);
           if (name == "text")
             log.format = LogFormat::kText;
           else if (name == "json")
             log.format = LogFormat::kJson;
           else
             fail(k, "must be \"text\" or \"json\", got " + quote_for_message(name));
         }}});
}

void Reader::read_storage(const Field& f, StorageConfig& storage) const {
  walk(read_table(f), f.path,
       {{"plugin", [&](const Field& k) { storage.plugin = read_string(k, false); }},
        {"plugin_dir", [&](const Field& k) { storage.plugin_dir = read_string(k, true); }},
        {"options", [&](const Field& k) { read_storage_options(k, storage); }}});
}

// Plugins take options as text; scalars are spelled the way TOML spells them.
void Reader::read_storage_options(const Field& f, StorageConfig& storage) const {
  storage.options.clear();
  storage.option_lines.clear();
  for (const auto& [key, node] : in_file_order(read_table(f))) {
    const Field option{*node, key_path(f.path, key->str()), key->source().begin.line};
    std::string text;
    if (const auto* s = node->as_string()) {
      text = s->get();
    } else if (node->is_integer() || node->is_floating_point() || node->is_boolean()) {
      text = describe(*node);
    } else {
      fail_type(option, "a string, integer, float or boolean (no nested tables or arrays)");
    }
    storage.option_lines[std::string(key->str())] = option.key_line;
    storage.options.emplace_back(key->str(), std::move(text));
  }
}

void Reader::read_engine(const Field& f, EngineConfig& engine) const {
  std::vector<KeyHandler> keys = {
      {"rate_limit_enabled", [&](const Field& k) { engine.rate_limit_enabled = read_bool(k); }},
      {"rate_limit_scope", [&](const Field& k) { engine.rate_limit_scope = read_scope(k); }},
      {"rate_limit_rate_per_sec",
       [&](const Field& k) { engine.rate_limit_rate_per_sec = read_number(k, true); }},
  };
  for (const U32Key& u : kEngineU32Keys) {
    keys.push_back({u.name, [&](const Field& k) { engine.*u.member = read_u32(k, u.min, u.max); }});
  }
  keys.push_back({"unknown_kind", [&](const Field& k) {
                    const std::string name = read_string(k, false);
                    if (name == "fail")
                      engine.unknown_kind = EngineConfig::UnknownKind::kFail;
                    else if (name == "retry")
                      engine.unknown_kind = EngineConfig::UnknownKind::kRetry;
                    else
                      fail(k, "must be \"fail\" or \"retry\", got " + quote_for_message(name));
                  }});
  keys.push_back(
      {"job_timeout_s", [&](const Field& k) { engine.job_timeout_s = read_job_timeout(k); }});
  const toml::table& table = read_table(f);
  walk(table, f.path, keys);
  check_backoff(table, f.path, engine);
}

// The first retry delay cannot exceed the cap; blame whichever key was written.
void Reader::check_backoff(const toml::table& table, const std::string& path,
                           const EngineConfig& engine) const {
  if (engine.retry_backoff_base_ms <= engine.retry_backoff_max_ms) return;
  const std::string base = std::to_string(engine.retry_backoff_base_ms);
  const std::string max = std::to_string(engine.retry_backoff_max_ms);
  if (const toml::node* node = table.get("retry_backoff_base_ms")) {
    fail_at(node->source().begin.line, path + ".retry_backoff_base_ms",
            "must be <= " + path + ".retry_backoff_max_ms (" + max + "), got " + base);
  }
  const toml::node* node = table.get("retry_backoff_max_ms");
  fail_at(node->source().begin.line, path + ".retry_backoff_max_ms",
          "must be >= " + path + ".retry_backoff_base_ms (" + base + "), got " + max);
}

void Reader::read_queues(const Field& f, std::map<std::string, QueueConfig>& queues) const {
  for (const auto& [key, node] : in_file_order(read_table(f))) {
    const Field queue{*node, key_path(f.path, key->str()), key->source().begin.line};
    try {
      validate_queue_name(key->str());
    } catch (const ValidationError& e) {
      fail_at(queue.key_line, queue.path, e.what());
    }
    queues[std::string(key->str())] = read_queue(queue);
  }
}

QueueConfig Reader::read_queue(const Field& f) const {
  QueueConfig queue;
  walk(
      read_table(f), f.path,
      {{"max_workers", [&](const Field& k) { queue.max_workers = read_u32(k, 1); }},
       {"rate_limit",
        [&](const Field& k) { queue.rate_limit = read_queue_rate_limit(k, "rate_limit"); }},
       {"http", [&](const Field& k) { queue.http = read_queue_http(k); }},
       {"key_from", [&](const Field& k) { queue.key_from = read_key_from(k); }},
       {"key_rate_limit",
        [&](const Field& k) { queue.key_rate_limit = read_queue_rate_limit(k, "key_rate_limit"); }},
       {"key_max_workers", [&](const Field& k) { queue.key_max_workers = read_u32(k, 1); }},
       {"fairness", [&](const Field& k) { queue.fairness = read_fairness(k); }},
       {"job_timeout_s", [&](const Field& k) { queue.job_timeout_s = read_job_timeout(k); }}});
  if (queue.fairness == Fairness::kFifo && (queue.key_rate_limit || queue.key_max_workers))
    fail(f,
         "fairness = \"fifo\" claims across keys in claim order, so it cannot hold "
         "key_rate_limit or key_max_workers: remove them, or write fairness = \"fair\"");
  return queue;
}

HttpTargetConfig Reader::read_queue_http(const Field& f) const {
  HttpTargetConfig http;
  bool has_url = false;
  TlsFields tls;
  std::vector<KeyHandler> keys = {
      {"url",
       [&](const Field& k) {
         http.url = read_string(k, false);
         if (auto problem = http_url_problem(http.url)) fail(k, *problem);
         has_url = true;
       }},
      {"method",
       [&](const Field& k) {
         http.method = read_string(k, false);
         if (auto problem = http_method_problem(http.method)) fail(k, *problem);
       }},
      {"timeout_ms", [&](const Field& k) { http.timeout_ms = read_u32(k, 1, kMaxHttpTimeoutMs); }},
      {"headers",
       [&](const Field& k) {
         for (const auto& [key, node] : in_file_order(read_table(k))) {
           const Field header{*node, key_path(k.path, key->str()), key->source().begin.line};
           const std::string value = read_string(header, true);
           if (auto problem = http_header_problem(key->str(), value)) fail(header, *problem);
           http.headers.emplace_back(key->str(), value);
         }
       }},
      {"secret_env",
       [&](const Field& k) {
         http.secret_env = read_string(k, false);
         const bool name_ok =
             std::all_of(
                 http.secret_env.begin(), http.secret_env.end(),
                 [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }) &&
             !std::isdigit(static_cast<unsigned char>(http.secret_env.front()));
         if (!name_ok)
           fail(k,
                "must be the name of an environment variable (letters, digits and _, not "
                "starting with a digit), got " +
                    quote_for_message(http.secret_env));
       }},
      {"follow_redirects", [&](const Field& k) { http.follow_redirects = read_bool(k); }},
      {"hold", [&](const Field& k) {
         const std::string text = read_string(k, false);
         if (text != "key" && text != "queue")
           fail(k,
                "must be \"key\" (a 429 holds the job's key; the queue's other keys go on) "
                "or \"queue\" (it holds the whole queue), got " +
                    quote_for_message(text));
         http.hold =
             text == "queue" ? HttpTargetConfig::Hold::kQueue : HttpTargetConfig::Hold::kKey;
       }}};
  add_tls_keys(keys, http.tls, tls);
  walk(read_table(f), f.path, keys);
  check_tls_pair(tls);
  if (!has_url)
    fail(f,
         "missing url (write url = \"https://api.example.com/hook\"; the job's payload is "
         "then the request body)");
  return http;
}

void Reader::read_http(const Field& f, HttpConfig& http) const {
  TlsFields tls;
  std::vector<KeyHandler> keys = {
      {"allow_private", [&](const Field& k) { http.allow_private = read_bool(k); }},
      {"allow_hosts",
       [&](const Field& k) {
         const auto* array = k.node.as_array();
         if (array == nullptr) fail_type(k, "an array of host names ([\"api.internal\"])");
         http.allow_hosts.clear();
         for (size_t i = 0; i < array->size(); ++i) {
           const Field host{*array->get(i), k.path + "[" + std::to_string(i) + "]", k.key_line};
           http.allow_hosts.push_back(read_string(host, false));
         }
       }},
      {"max_response_bytes", [&](const Field& k) { http.max_response_bytes = read_u32(k, 0); }},
      {"max_connections_per_host",
       [&](const Field& k) { http.max_connections_per_host = read_u32(k, 0); }}};
  add_tls_keys(keys, http.tls, tls);
  walk(read_table(f), f.path, keys);
  check_tls_pair(tls);
}

std::string Reader::read_tls_path(const Field& f, bool directory) const {
  const std::string path = read_string(f, false);
  const std::string what = directory ? "directory" : "file";
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status))
    fail(f, what + " " + quote_for_message(path) +
                " does not exist (give the path of an existing " + what +
                "; a relative path is taken from the directory conveyor starts in)");
  if (directory && !std::filesystem::is_directory(status))
    fail(f, quote_for_message(path) +
                " is not a directory (ca_dir takes a directory of CA certificates hashed by "
                "c_rehash or openssl rehash; a single PEM bundle goes in ca_file)");
  if (!directory && std::filesystem::is_directory(status))
    fail(f,
         quote_for_message(path) + " is a directory, not a file (give the PEM file itself" +
             (f.path.ends_with("ca_file") ? "; a hashed directory of CAs goes in ca_dir)" : ")"));
  if (::access(path.c_str(), directory ? (R_OK | X_OK) : R_OK) != 0)
    fail(f, what + " " + quote_for_message(path) + " is not readable: " + std::strerror(errno) +
                " (let the user conveyor runs as read it)");
  return path;
}

void Reader::add_tls_keys(std::vector<KeyHandler>& keys, HttpTlsConfig& tls,
                          TlsFields& read) const {
  keys.push_back({"ca_file", [&](const Field& k) { tls.ca_file = read_tls_path(k, false); }});
  keys.push_back({"ca_dir", [&](const Field& k) { tls.ca_dir = read_tls_path(k, true); }});
  keys.push_back({"client_cert", [&](const Field& k) {
                    tls.client_cert = read_tls_path(k, false);
                    read.cert = {k.path, k.key_line};
                  }});
  keys.push_back({"client_key", [&](const Field& k) {
                    tls.client_key = read_tls_path(k, false);
                    read.key = {k.path, k.key_line};
                  }});
}

void Reader::check_tls_pair(const TlsFields& read) const {
  if (read.cert && !read.key)
    fail_at(read.cert->second, read.cert->first,
            "is set without client_key in the same table (set both, the PEM client certificate "
            "and its private key, or neither)");
  if (read.key && !read.cert)
    fail_at(read.key->second, read.key->first,
            "is set without client_cert in the same table (set both, the PEM client certificate "
            "and its private key, or neither)");
}

LimitScope Reader::read_scope(const Field& f) const {
  const std::string text = read_string(f, false);
  if (text != "process" && text != "fleet")
    fail(f,
         "must be \"process\" (a bucket per process) or \"fleet\" (one bucket for every "
         "process on the storage), got " +
             quote_for_message(text));
  return text == "fleet" ? LimitScope::kFleet : LimitScope::kProcess;
}

std::string Reader::read_key_from(const Field& f) const {
  std::string pointer = read_string(f, false);
  if (pointer.front() != '/')
    fail(f,
         "must be a JSON pointer into the payload, starting with '/' (e.g. \"/tenant\" or "
         "\"/customer/id\"), got " +
             quote_for_message(pointer));
  try {
    (void)nlohmann::json::json_pointer(pointer);
  } catch (const nlohmann::json::exception& e) {
    fail(f, "is not a valid JSON pointer (" + std::string(e.what()) +
                "): " + quote_for_message(pointer));
  }
  return pointer;
}

Fairness Reader::read_fairness(const Field& f) const {
  const std::string text = read_string(f, false);
  if (text != "fair" && text != "fifo")
    fail(f,
         "must be \"fair\" (ready keys take turns) or \"fifo\" (claim order across keys), "
         "got " +
             quote_for_message(text));
  return text == "fifo" ? Fairness::kFifo : Fairness::kFair;
}

RateLimit Reader::read_queue_rate_limit(const Field& f, std::string_view name) const {
  std::optional<double> rate;
  uint32_t burst = 0;
  LimitScope scope = LimitScope::kProcess;
  const toml::table& table = read_table(f);
  walk(table, f.path,
       {{"rate", [&](const Field& k) { rate = read_number(k, false); }},
        {"burst", [&](const Field& k) { burst = read_u32(k, 0); }},
        {"scope", [&](const Field& k) { scope = read_scope(k); }}});
  if (!rate) {
    fail(f, "missing rate (write " + std::string(name) +
                " = { rate = 10.0, burst = 0, scope = \"process\" }; burst 0 = ceil(rate))");
  }
  return make_rate_limit(*rate, burst, scope);
}

void Reader::read_server(const Field& f, ServerConfig& server) const {
  const auto read_listen = [&](const Field& k) {
    server.listen = read_string(k, true);
    if (!try_parse_listen(server.listen)) fail(k, listen_problem(server.listen));
  };
  walk(read_table(f), f.path,
       {{"listen", read_listen},
        {"admin_token",
         [&](const Field& k) {
           server.admin_token = read_string(k, false);
           if (auto problem = token_problem(server.admin_token)) fail(k, *problem);
         }},
        {"worker_token",
         [&](const Field& k) {
           server.worker_token = read_string(k, false);
           if (auto problem = token_problem(server.worker_token)) fail(k, *problem);
         }},
        {"worker_tokens", [&](const Field& k) { read_worker_tokens(k, server.worker_tokens); }},
        {"allow_unauthenticated",
         [&](const Field& k) {
           if (const auto* s = k.node.as_string(); s != nullptr && s->get() == "loopback") {
             server.allow_unauthenticated = true;
             server.unauthenticated_loopback_only = true;
             return;
           }
           if (k.node.as_boolean() == nullptr) fail_type(k, "true, false or \"loopback\"");
           server.allow_unauthenticated = read_bool(k);
           server.unauthenticated_loopback_only = false;
         }},
        {"read_only", [&](const Field& k) { server.read_only = read_bool(k); }},
        {"max_body_bytes",
         [&](const Field& k) { server.max_body_bytes = read_u32(k, kMinBodyBytes); }},
        // /metrics' cap on queues with series of their own (0: none).
        {"metrics_max_queues",
         [&](const Field& k) { server.metrics_max_queues = read_u32(k, 0); }}});
}

std::vector<std::string> Reader::read_string_array(const Field& f,
                                                   const std::string& example) const {
  const auto* array = f.node.as_array();
  if (array == nullptr) fail_type(f, "an array of strings (" + example + ")");
  std::vector<std::string> out;
  for (size_t i = 0; i < array->size(); ++i) {
    const Field item{*array->get(i), f.path + "[" + std::to_string(i) + "]", f.key_line};
    std::string value = read_string(item, false);
    if (std::find(out.begin(), out.end(), value) != out.end())
      fail(item, quote_for_message(value) + " is listed twice");
    out.push_back(std::move(value));
  }
  if (out.empty()) fail(f, "must not be empty (" + example + ")");
  return out;
}

void Reader::read_worker_tokens(const Field& f, std::vector<WorkerTokenConfig>& tokens) const {
  tokens.clear();
  for (const auto& [key, node] : in_file_order(read_table(f))) {
    const Field token{*node, key_path(f.path, key->str()), key->source().begin.line};
    const std::string_view name = key->str();
    const bool name_ok =
        !name.empty() && name.size() <= 64 && std::isalnum(static_cast<unsigned char>(name[0])) &&
        std::all_of(name.begin(), name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
        });
    if (!name_ok)
      fail_at(token.key_line, token.path,
              "a worker token's name must be 1 to 64 letters, digits, '_', '-' or '.', starting "
              "with a letter or digit (it names the token in refusals and logs), got " +
                  quote_for_message(name));
    tokens.push_back(read_worker_token(token, std::string(name)));
    // The same token twice would make the scope of a call depend on file order.
    for (size_t i = 0; i + 1 < tokens.size(); ++i)
      if (tokens[i].sha256 == tokens.back().sha256)
        fail_at(token.key_line, token.path,
                "is the same token as " + key_path(f.path, tokens[i].name) +
                    ": give every worker token a secret of its own (conveyor token new NAME)");
  }
}

WorkerTokenConfig Reader::read_worker_token(const Field& f, std::string name) const {
  WorkerTokenConfig token;
  token.name = std::move(name);
  const std::string methods_known = [] {
    std::string known;
    for (WorkerMethod m : kWorkerMethods)
      known += (known.empty() ? "" : ", ") + std::string(to_string(m));
    return known;
  }();
  walk(read_table(f), f.path,
       {{"sha256",
         [&](const Field& k) {
           std::string hex = read_string(k, false);
           std::transform(hex.begin(), hex.end(), hex.begin(),
                          [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
           if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
             fail(k,
                  "must be the 64 hex digits of the token's SHA-256 (printf %s TOKEN | "
                  "conveyor token hash), got " +
                      std::to_string(hex.size()) + " characters" +
                      (hex.find_first_not_of("0123456789abcdef") != std::string::npos
                           ? " with a non-hex one"
                           : ""));
           token.sha256 = std::move(hex);
         }},
        {"token_env",
         [&](const Field& k) {
           token.token_env = read_string(k, false);
           const std::string& var = token.token_env;
           if (std::isdigit(static_cast<unsigned char>(var.front())) ||
               !std::all_of(var.begin(), var.end(), [](char c) {
                 return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
               }))
             fail(k,
                  "must be the name of an environment variable (letters, digits and _, not "
                  "starting with a digit), got " +
                      quote_for_message(var));
           const std::optional<std::string> value = env_(var.c_str());
           if (!value || value->empty())
             fail(k, "environment variable " + var +
                         " is not set (or empty): set it to the token, or write sha256 = "
                         "\"...\" instead (conveyor token hash)");
           if (auto problem = token_problem(*value))
             fail(k, "environment variable " + var + ": " + *problem);
           token.sha256 = sha256_hex(*value);
         }},
        {"queues",
         [&](const Field& k) {
           token.queues = read_string_array(k, "[\"email\", \"sms\"], or [\"*\"] for every queue");
           token.every_queue =
               std::find(token.queues.begin(), token.queues.end(), "*") != token.queues.end();
           if (token.every_queue && token.queues.size() > 1)
             fail(k,
                  "\"*\" (every queue) cannot be listed with queue names: write [\"*\"] "
                  "alone, or only names");
           if (token.every_queue) {
             token.queues.clear();
             return;
           }
           for (size_t i = 0; i < token.queues.size(); ++i) {
             try {
               validate_queue_name(token.queues[i]);
             } catch (const ValidationError& e) {
               fail_at(k.key_line, k.path + "[" + std::to_string(i) + "]", e.what());
             }
           }
           std::sort(token.queues.begin(), token.queues.end());
         }},
        {"methods",
         [&](const Field& k) {
           token.methods = 0;
           const std::vector<std::string> names =
               read_string_array(k, "[\"claim\", \"complete\", ...]; known: " + methods_known);
           for (size_t i = 0; i < names.size(); ++i) {
             const auto* m = std::find_if(std::begin(kWorkerMethods), std::end(kWorkerMethods),
                                          [&](WorkerMethod w) { return names[i] == to_string(w); });
             if (m == std::end(kWorkerMethods))
               fail_at(k.key_line, k.path + "[" + std::to_string(i) + "]",
                       "unknown method " + quote_for_message(names[i]) +
                           " (known: " + methods_known + ")");
             token.methods |= method_bit(*m);
           }
         }},
        {"max_backpressure_s",
         [&](const Field& k) { token.max_backpressure_s = read_u32(k, 0, 30 * 86400); }}});
  const bool hashed = f.node.as_table()->contains("sha256");
  if (hashed && !token.token_env.empty()) fail(f, "give sha256 or token_env, not both");
  if (token.sha256.empty())
    fail(f,
         "missing the token: write sha256 = \"<hex>\" (the token's SHA-256; conveyor token new " +
             token.name + " makes a token and prints it) or token_env = \"VAR\"");
  if (token.queues.empty() && !token.every_queue)
    fail(f,
         "missing queues: list the queues this token may work, e.g. queues = [\"email\"] "
         "(there is no default, so a new token reaches no queue by accident; [\"*\"] is "
         "every queue)");
  return token;
}

// ---- environment overrides --------------------------------------------------

[[noreturn]] void fail_env(const char* name, const std::string& problem) {
  throw ConfigError(std::string("environment variable ") + name + ": " + problem);
}

// The value of name, or nullopt when unset or set to "".
std::optional<std::string> env_value(const EnvLookup& env, const char* name) {
  std::optional<std::string> value = env(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

bool parse_env_bool(const char* name, const std::string& value) {
  std::string lower = value;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "true" || lower == "1" || lower == "yes") return true;
  if (lower == "false" || lower == "0" || lower == "no") return false;
  fail_env(name, "must be true, false, 1, 0, yes or no, got " + quote_for_message(value));
}

// 0 (no default limit) or a rate as every surface takes it (parse_rate).
double parse_env_rate(const char* name, const std::string& value) {
  const std::optional<double> rate = parse_plain_decimal(value);
  if (!rate)
    fail_env(name, "must be " + rate_text_rule() + ", or 0 for no default limit, got " +
                       quote_for_message(value));
  if (*rate == 0) return 0;
  try {
    validate_rate(*rate);
  } catch (const ValidationError& e) {
    fail_env(name, e.what() + std::string(" (or 0 for no default limit)"));
  }
  return *rate;
}

uint32_t parse_env_u32(const char* name, const std::string& value) {
  uint32_t number = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, number);
  if (ec != std::errc() || ptr != end) {
    fail_env(name, "must be a whole number from 0 to 4294967295, got " + quote_for_message(value));
  }
  return number;
}

using EnvApply = void (*)(Config& config, const char* name, const std::string& value);

// Every CONVEYOR_* variable conveyor reads: the one list, for apply_env and
// for the check of unknown names (check_env_names). apply is null for those
// read elsewhere (resolve_config_path, the plugin loader, the CLI).
struct EnvVar {
  const char* name;
  EnvApply apply;
};

constexpr EnvVar kEnvVars[] = {
    {"CONVEYOR_CONFIG", nullptr},      // resolve_config_path
    {"CONVEYOR_PLUGIN_DIR", nullptr},  // the plugin loader
    {"CONVEYOR_RATE_LIMIT_ENABLED",
     [](Config& c, const char* n, const std::string& v) {
       c.engine.rate_limit_enabled = parse_env_bool(n, v);
     }},
    {"CONVEYOR_RATE_LIMIT_RATE_PER_SEC",
     [](Config& c, const char* n, const std::string& v) {
       c.engine.rate_limit_rate_per_sec = parse_env_rate(n, v);
     }},
    {"CONVEYOR_RATE_LIMIT_BURST",
     [](Config& c, const char* n, const std::string& v) {
       c.engine.rate_limit_burst = parse_env_u32(n, v);
     }},
    {"CONVEYOR_RATE_LIMIT_SCOPE",
     [](Config& c, const char* n, const std::string& v) {
       // Strict, as [engine] rate_limit_scope: lower case, nothing around it.
       try {
         c.engine.rate_limit_scope = parse_limit_scope(v);
       } catch (const ValidationError&) {
         fail_env(n,
                  "must be process (a bucket per process) or fleet (one bucket for every "
                  "process on the storage), got " +
                      quote_for_message(v));
       }
     }},
    {"CONVEYOR_STORAGE_PLUGIN",
     [](Config& c, const char*, const std::string& v) { c.storage.plugin = v; }},
    {"CONVEYOR_SERVER_LISTEN",
     [](Config& c, const char* n, const std::string& v) {
       if (!try_parse_listen(v)) fail_env(n, listen_problem(v));
       c.server.listen = v;
     }},
    {"CONVEYOR_LOG_LEVEL",
     [](Config& c, const char* n, const std::string& v) {
       c.log.level = parse_log_level(v);
       if (!c.log.level)
         fail_env(n, std::string("must be one of ") + kLogLevelNames + " (any case), got " +
                         quote_for_message(v));
     }},
    {"CONVEYOR_ADMIN_TOKEN",
     [](Config& c, const char* n, const std::string& v) {
       if (auto problem = token_problem(v)) fail_env(n, *problem);
       c.server.admin_token = v;
     }},
    {"CONVEYOR_WORKER_TOKEN",
     [](Config& c, const char* n, const std::string& v) {
       if (auto problem = token_problem(v)) fail_env(n, *problem);
       c.server.worker_token = v;
     }},
};

void apply_env(Config& config, const EnvLookup& env) {
  for (const EnvVar& var : kEnvVars) {
    if (var.apply == nullptr) continue;
    if (auto v = env_value(env, var.name)) var.apply(config, var.name, *v);
  }
}

// The two tokens must differ: the worker token may call only the worker
// APIs, so one that is also the admin token would give every remote worker
// the whole API. Which setting each came from, never the tokens themselves.
void check_tokens(const Config& config, const EnvLookup& env) {
  const ServerConfig& s = config.server;
  // A named token equal to the admin token (or the legacy worker token)
  // would make its scope depend on which rule is checked first.
  const std::string admin = s.admin_token.empty() ? "" : sha256_hex(s.admin_token);
  const std::string worker = s.worker_token.empty() ? "" : sha256_hex(s.worker_token);
  for (const WorkerTokenConfig& t : s.worker_tokens) {
    const std::string where = config.source + ": " + key_path("server.worker_tokens", t.name);
    if (t.sha256 == admin)
      throw ConfigError(where +
                        ": the token is the admin token, so this worker could call the whole "
                        "API: give it a token of its own (conveyor token new " +
                        t.name + ")");
    if (t.sha256 == worker)
      throw ConfigError(where +
                        ": the token is [server] worker_token (or CONVEYOR_WORKER_TOKEN), which "
                        "may call every worker method on every queue: give it a token of its "
                        "own (conveyor token new " +
                        t.name + ")");
  }
  if (s.admin_token.empty() || s.admin_token != s.worker_token) return;
  const auto origin = [&](const char* var, const char* key) {
    return env_value(env, var) ? std::string("environment variable ") + var
                               : config.source + ": server." + key;
  };
  throw ConfigError(origin("CONVEYOR_WORKER_TOKEN", "worker_token") +
                    ": the worker token is the same as the admin token (" +
                    origin("CONVEYOR_ADMIN_TOKEN", "admin_token") +
                    "), so every remote worker could call the whole API: give the workers a "
                    "token of their own (e.g. openssl rand -hex 32)");
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// CONVEYOR_* names that are not conveyor's settings, set around it by its
// own scripts, tests, benchmarks and builds: never refused, never warned about.
constexpr std::string_view kToolPrefixes[] = {"CONVEYOR_TEST_", "CONVEYOR_BENCH_", "CONVEYOR_SOAK_",
                                              "CONVEYOR_BUILD_"};
constexpr std::string_view kToolNames[] = {
    "CONVEYOR_BIN",      "CONVEYOR_BINARY", "CONVEYOR_PROTO_DIR",           "CONVEYOR_REQUIRE_PG",
    "CONVEYOR_CHROMIUM", "CONVEYOR_CCACHE", "CONVEYOR_DASHBOARD_ARTIFACTS", "CONVEYOR_SANITIZE",
    "CONVEYOR_WERROR",   "CONVEYOR_FUZZ",   "CONVEYOR_THREAD_SAFETY",       "CONVEYOR_SKIP_PARTS"};

// The prefixes of the config file's sections (and of the rate-limit
// variables): a name under one is meant as a setting, so an unknown one is a
// setting that would be silently dropped.
constexpr std::string_view kSettingPrefixes[] = {
    "CONVEYOR_RATE_LIMIT_", "CONVEYOR_STORAGE_", "CONVEYOR_ENGINE_",
    "CONVEYOR_QUEUES_",     "CONVEYOR_SERVER_",  "CONVEYOR_LOG_",
    "CONVEYOR_HTTP_",       "CONVEYOR_ADMIN_",   "CONVEYOR_WORKER_"};

// The most edits between a typed name and a known one that is refused as a
// typo (a transposition, CONVEYOR_RAET_..., is two).
constexpr size_t kTypoEdits = 2;
// toml++ descriptions may quote the offending text, newlines included; errors
// are printed as one line.
std::string one_line(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

// ---- files ------------------------------------------------------------------

[[noreturn]] void fail_read(const std::filesystem::path& path, const std::string& reason) {
  throw ConfigError("cannot read config file " + path.string() + ": " + reason +
                    " (pass --config FILE or set CONVEYOR_CONFIG)");
}

std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail_read(path, "it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_read(path, std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail_read(path, std::strerror(errno));
  return std::move(text).str();
}

}  // namespace

std::optional<LogLevel> parse_log_level(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static constexpr std::pair<std::string_view, LogLevel> kNames[] = {
      {"trace", LogLevel::kTrace},       {"debug", LogLevel::kDebug},  {"info", LogLevel::kInfo},
      {"warn", LogLevel::kWarn},         {"warning", LogLevel::kWarn}, {"error", LogLevel::kError},
      {"critical", LogLevel::kCritical}, {"off", LogLevel::kOff}};
  for (const auto& [n, level] : kNames)
    if (lower == n) return level;
  return std::nullopt;
}

const char* to_string(Fairness fairness) noexcept {
  return fairness == Fairness::kFifo ? "fifo" : "fair";
}

const char* to_string(WorkerMethod method) noexcept {
  switch (method) {
    case WorkerMethod::kClaim:
      return "claim";
    case WorkerMethod::kComplete:
      return "complete";
    case WorkerMethod::kFail:
      return "fail";
    case WorkerMethod::kHeartbeat:
      return "heartbeat";
    case WorkerMethod::kRelease:
      return "release";
    case WorkerMethod::kEnqueue:
      return "enqueue";
    case WorkerMethod::kGetJob:
      return "get_job";
  }
  return "?";
}

std::string sha256_hex(std::string_view text) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * SHA256_DIGEST_LENGTH);
  for (unsigned char byte : digest) {
    hex += kHex[byte >> 4];
    hex += kHex[byte & 15];
  }
  return hex;
}

const char* to_string(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::kTrace:
      return "trace";
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
    case LogLevel::kCritical:
      return "critical";
    case LogLevel::kOff:
      return "off";
  }
  return "info";
}

ListenAddress parse_listen_address(std::string_view listen) {
  auto address = try_parse_listen(listen);
  if (!address) throw ValidationError("listen", "listen " + listen_problem(listen));
  return std::move(*address);
}

std::optional<RateLimit> EngineConfig::default_limit() const {
  if (rate_limit_rate_per_sec == 0) return std::nullopt;
  return make_rate_limit(rate_limit_rate_per_sec, rate_limit_burst, rate_limit_scope);
}

uint32_t Config::max_workers_for(std::string_view queue) const {
  const auto it = queues.find(std::string(queue));
  if (it != queues.end() && it->second.max_workers) return *it->second.max_workers;
  return engine.max_workers;
}

int64_t Config::job_timeout_ms_for(std::string_view queue) const {
  const auto it = queues.find(std::string(queue));
  const double seconds = it != queues.end() && it->second.job_timeout_s ? *it->second.job_timeout_s
                                                                        : engine.job_timeout_s;
  return static_cast<int64_t>(std::llround(seconds * 1000));
}

std::optional<ConfigError> storage_option_error(const Config& config, std::string_view message) {
  for (const auto& [key, line] : config.storage.option_lines) {
    if (message.find("storage option '" + key + "'") == std::string_view::npos) continue;
    return ConfigError(config.source + ":" + std::to_string(line) + ": " +
                       key_path("storage.options", key) + ": " + std::string(message));
  }
  return std::nullopt;
}

std::vector<std::string> process_env_names() {
  std::vector<std::string> names;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    if (starts_with(name, "CONVEYOR_")) names.emplace_back(name);
  }
  return names;
}

std::vector<std::string> check_env_names(const std::vector<std::string>& names) {
  std::vector<std::string> warnings;
  std::string known;
  for (const EnvVar& var : kEnvVars) known += (known.empty() ? "" : ", ") + std::string(var.name);
  for (const std::string& name : names) {
    if (!starts_with(name, "CONVEYOR_")) continue;
    if (std::any_of(std::begin(kEnvVars), std::end(kEnvVars),
                    [&](const EnvVar& v) { return name == v.name; }))
      continue;
    if (std::any_of(std::begin(kToolPrefixes), std::end(kToolPrefixes),
                    [&](std::string_view p) { return starts_with(name, p); }) ||
        std::any_of(std::begin(kToolNames), std::end(kToolNames),
                    [&](std::string_view n) { return name == n; }))
      continue;
    const char* closest = nullptr;
    size_t best = kTypoEdits + 1;
    for (const EnvVar& var : kEnvVars) {
      const size_t distance = edit_distance(name, var.name);
      if (distance < best) {
        best = distance;
        closest = var.name;
      }
    }
    const std::string shown = quote_for_message(name);
    if (closest != nullptr)
      throw ConfigError("environment variable " + shown +
                        " is not one conveyor reads; did you mean " + closest +
                        "? (rename it, or unset it; known: " + known + ")");
    if (std::any_of(std::begin(kSettingPrefixes), std::end(kSettingPrefixes),
                    [&](std::string_view p) { return starts_with(name, p); }))
      throw ConfigError("environment variable " + shown +
                        " is not one conveyor reads, so the setting it looks like would be "
                        "ignored: set it in the config file, or unset it (known: " +
                        known + ")");
    warnings.push_back("environment variable " + shown +
                       " starts with CONVEYOR_ but is not one conveyor reads; it is ignored "
                       "(known: " +
                       known + ")");
  }
  return warnings;
}

EnvLookup process_env() {
  return [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

Config parse_config(std::string_view toml_text, std::string_view source_name) {
  Config config = parse_config(toml_text, source_name, process_env(), process_env_names());
  for (const std::string& warning : check_env_names(process_env_names())) spdlog::warn(warning);
  return config;
}

Config parse_config(std::string_view toml_text, std::string_view source_name, const EnvLookup& env,
                    const std::vector<std::string>& env_names) {
  const std::string source(source_name);
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    throw ConfigError(source + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) +
                      ": invalid TOML: " + one_line(e.description()));
  }
  Config config;
  config.source = source;
  Reader(source, env).read_root(root, config);
  (void)check_env_names(env_names);  // warnings: the caller's (see the overload above)
  apply_env(config, env);
  check_tokens(config, env);
  return config;
}

Config load_config_file(const std::filesystem::path& path) {
  return parse_config(read_file(path), path.string());
}

Config load_config_file(const std::filesystem::path& path, const EnvLookup& env,
                        const std::vector<std::string>& env_names) {
  return parse_config(read_file(path), path.string(), env, env_names);
}

std::filesystem::path resolve_config_path(const std::optional<std::string>& explicit_path,
                                          const EnvLookup& env) {
  if (explicit_path && !explicit_path->empty()) return *explicit_path;
  if (auto from_env = env_value(env, "CONVEYOR_CONFIG")) return *from_env;
  return kDefaultConfigPath;
}

}  // namespace conveyor
