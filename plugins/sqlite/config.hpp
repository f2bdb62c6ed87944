// The plugin's [storage.options].
#ifndef CONVEYOR_PLUGINS_SQLITE_CONFIG_HPP
#define CONVEYOR_PLUGINS_SQLITE_CONFIG_HPP

#include <conveyor/storage_plugin.hpp>

#include <string>

namespace conveyor::sqlite {

struct Config {
  std::string path;
  // false: the database file must exist (read-only commands pass this).
  bool create = true;
  int busy_timeout_ms = 5000;
  std::string synchronous = "NORMAL";  // NORMAL, FULL or OFF (validated)
};

// Parses and validates [storage.options]; throws sdk::Error(CONVEYOR_E_INVALID).
Config parse_config(const sdk::Options& options);

// s with ASCII letters in upper case (option values and PRAGMA answers).
std::string ascii_upper(std::string s);

}  // namespace conveyor::sqlite

#endif  // CONVEYOR_PLUGINS_SQLITE_CONFIG_HPP
