#include "config.hpp"

#include <charconv>
#include <climits>
#include <system_error>

namespace conveyor::sqlite {

using sdk::Error;

std::string ascii_upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}

Config parse_config(const sdk::Options& options) {
  options.require_known({"path", "busy_timeout_ms", "synchronous", "create"});
  Config cfg;
  if (!options.has("path") || options.get("path").empty())
    throw Error(CONVEYOR_E_INVALID, "storage option 'path' is required (the SQLite database file)");
  cfg.path = options.get("path");
  if (cfg.path == ":memory:" || cfg.path.rfind("file:", 0) == 0)
    throw Error(CONVEYOR_E_INVALID,
                "storage option 'path' must name a database file (several processes share "
                "it), not an in-memory database or a 'file:' URI: '" +
                    cfg.path + "'");
  if (cfg.path.find('\0') != std::string::npos)
    throw Error(CONVEYOR_E_INVALID, "storage option 'path' contains a NUL byte");
  if (options.has("busy_timeout_ms")) {
    std::string v = options.get("busy_timeout_ms");
    long long ms = -1;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
    if (ec != std::errc() || end != v.data() + v.size() || ms < 0 || ms > INT_MAX)
      throw Error(CONVEYOR_E_INVALID,
                  "storage option 'busy_timeout_ms' must be an integer in "
                  "[0, 2147483647], got '" +
                      v + "'");
    cfg.busy_timeout_ms = static_cast<int>(ms);
  }
  if (options.has("synchronous")) {
    std::string v = ascii_upper(options.get("synchronous"));
    if (v != "NORMAL" && v != "FULL" && v != "OFF")
      throw Error(CONVEYOR_E_INVALID,
                  "storage option 'synchronous' must be NORMAL, FULL or OFF, got '" +
                      options.get("synchronous") + "'");
    cfg.synchronous = v;
  }
  if (options.has("create")) {
    const std::string v = options.get("create");
    if (v != "true" && v != "false")
      throw Error(CONVEYOR_E_INVALID,
                  "storage option 'create' must be true or false, got '" + v + "'");
    cfg.create = v == "true";
  }
  return cfg;
}

}  // namespace conveyor::sqlite
