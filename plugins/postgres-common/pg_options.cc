#include "pg_options.hpp"

#include <libpq-fe.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace conveyor::postgres {
namespace {

using sdk::Error;

constexpr uint32_t kMaxPoolSize = 100;
constexpr uint32_t kMaxConnectTimeoutS = 3600;
constexpr uint32_t kMaxStatementTimeoutMs = 86'400'000;  // a day
constexpr uint32_t kMaxIdleCloseS = 86'400;

}  // namespace

uint32_t parse_bounded(const sdk::Options& options, const char* key, uint32_t fallback,
                       uint32_t min, uint32_t max) {
  if (!options.has(key)) return fallback;
  const std::string v = options.get(key);
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || n < min || n > max)
    throw Error(CONVEYOR_E_INVALID, std::string("storage option '") + key +
                                        "' must be a whole number in [" + std::to_string(min) +
                                        ", " + std::to_string(max) + "], got '" + v + "'");
  return static_cast<uint32_t>(n);
}

namespace {

// A value in single quotes for a key=value connection string.
std::string conninfo_value(std::string_view v) {
  std::string out = "'";
  for (char c : v) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

// The dsn's explicit settings, key -> value (URI and key=value forms alike).
std::map<std::string, std::string> parse_dsn(const std::string& dsn) {
  char* errmsg = nullptr;
  std::unique_ptr<PQconninfoOption, void (*)(PQconninfoOption*)> parsed(
      PQconninfoParse(dsn.c_str(), &errmsg), PQconninfoFree);
  if (!parsed) {
    std::string why = errmsg != nullptr ? errmsg : "out of memory";
    if (errmsg != nullptr) PQfreemem(errmsg);
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    throw Error(CONVEYOR_E_INVALID,
                "storage option 'dsn' is not a PostgreSQL connection string (\"postgresql://"
                "user@host:port/dbname\" or \"host=... dbname=...\"): " +
                    why);
  }
  std::map<std::string, std::string> out;
  for (PQconninfoOption* o = parsed.get(); o->keyword != nullptr; ++o)
    if (o->val != nullptr) out.emplace(o->keyword, o->val);
  return out;
}

std::string describe_target(const std::map<std::string, std::string>& dsn) {
  auto get = [&](const char* k, const char* fallback) {
    auto it = dsn.find(k);
    return it == dsn.end() || it->second.empty() ? std::string(fallback) : it->second;
  };
  std::string host = get("host", get("hostaddr", "local socket").c_str());
  std::string user = get("user", "");
  return host + ":" + get("port", "5432") + "/" + get("dbname", user.empty() ? "?" : user.c_str()) +
         (user.empty() ? "" : " as " + user);
}

bool is_utf8_name(std::string v) {
  for (char& c : v)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return v == "UTF8" || v == "UTF-8" || v == "UNICODE";
}

}  // namespace

bool is_valid_schema_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > 63) return false;
  if (name.substr(0, 3) == "pg_") return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string quote_identifier(std::string_view name) {
  if (!is_valid_schema_name(name))
    throw Error(CONVEYOR_E_INTERNAL, "quote_identifier: unvalidated identifier");
  return "\"" + std::string(name) + "\"";
}

PgOptions parse_options(const sdk::Options& options, std::span<const std::string_view> extra_keys) {
  std::vector<std::string_view> known = {"dsn",          "schema",
                                         "pool_size",    "connect_timeout_s",
                                         "lease_commit", "statement_timeout_ms",
                                         "idle_close_s"};
  known.insert(known.end(), extra_keys.begin(), extra_keys.end());
  for (const auto& [key, value] : options.entries()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string list;
    for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    throw Error(CONVEYOR_E_INVALID, "unknown storage option '" + key + "' (known: " + list + ")");
  }
  PgOptions out;
  if (!options.has("dsn") || options.get("dsn").empty())
    throw Error(CONVEYOR_E_INVALID,
                "storage option 'dsn' is required (e.g. dsn = "
                "\"postgresql://user@127.0.0.1:5432/dbname\")");
  const std::string dsn = options.get("dsn");
  if (dsn.find('\0') != std::string::npos)
    throw Error(CONVEYOR_E_INVALID, "storage option 'dsn' contains a NUL byte");

  if (options.has("schema")) {
    out.schema = options.get("schema");
    if (!is_valid_schema_name(out.schema))
      throw Error(CONVEYOR_E_INVALID,
                  "storage option 'schema' must be 1-63 characters of a-z, 0-9 and _, not "
                  "starting with a digit or \"pg_\"; got '" +
                      out.schema.substr(0, 80) + "'");
  }
  out.pool_size = parse_bounded(options, "pool_size", out.pool_size, 1, kMaxPoolSize);
  out.connect_timeout_s =
      parse_bounded(options, "connect_timeout_s", out.connect_timeout_s, 1, kMaxConnectTimeoutS);
  if (options.has("lease_commit")) {
    const std::string v = options.get("lease_commit");
    if (v != "async" && v != "sync")
      throw Error(CONVEYOR_E_INVALID,
                  "storage option 'lease_commit' must be \"async\" (claims, completions and "
                  "failures do not wait for their WAL flush; the default) or \"sync\"; got '" +
                      v.substr(0, 80) + "'");
    out.async_lease_commits = v == "async";
  }

  if (options.has("statement_timeout_ms")) {
    const std::string v = options.get("statement_timeout_ms");
    try {
      out.statement_timeout_ms =
          parse_bounded(options, "statement_timeout_ms", 0, 0, kMaxStatementTimeoutMs);
    } catch (const Error&) {
      throw Error(CONVEYOR_E_INVALID,
                  "storage option 'statement_timeout_ms' must be a whole number of milliseconds "
                  "in [0, " +
                      std::to_string(kMaxStatementTimeoutMs) +
                      "] (the longest one statement of the plugin may run; 0: no limit), got '" +
                      v.substr(0, 80) + "'");
    }
  }
  if (options.has("idle_close_s")) {
    const std::string v = options.get("idle_close_s");
    try {
      out.idle_close_s = parse_bounded(options, "idle_close_s", 0, 0, kMaxIdleCloseS);
    } catch (const Error&) {
      throw Error(CONVEYOR_E_INVALID,
                  "storage option 'idle_close_s' must be a whole number of seconds in [0, " +
                      std::to_string(kMaxIdleCloseS) +
                      "] (how long a pooled connection may stay idle before it is closed; 0: "
                      "kept open), got '" +
                      v.substr(0, 80) + "'");
    }
  }

  std::map<std::string, std::string> settings = parse_dsn(dsn);
  if (auto it = settings.find("client_encoding"); it != settings.end() && !is_utf8_name(it->second))
    throw Error(CONVEYOR_E_INVALID,
                "storage option 'dsn' sets client_encoding '" + it->second +
                    "'; Conveyor's PostgreSQL plugins need UTF8 (remove the setting)");
  // Defaults the plugin needs unless the dsn says otherwise: a bounded
  // connect (a dead host fails fast with its reason), text as UTF-8, a name
  // in pg_stat_activity, and TCP keepalives so an idle LISTEN connection
  // notices a dead peer within about a minute.
  settings.emplace("connect_timeout", std::to_string(out.connect_timeout_s));
  settings.emplace("client_encoding", "UTF8");
  settings.emplace("fallback_application_name", "conveyor");
  settings.emplace("keepalives", "1");
  settings.emplace("keepalives_idle", "30");
  settings.emplace("keepalives_interval", "10");
  settings.emplace("keepalives_count", "3");
  out.target = describe_target(settings);
  for (const auto& [k, v] : settings) {
    if (!out.conninfo.empty()) out.conninfo += ' ';
    out.conninfo += k + "=" + conninfo_value(v);
  }
  return out;
}

}  // namespace conveyor::postgres
