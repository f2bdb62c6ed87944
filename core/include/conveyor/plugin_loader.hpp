// Loads storage plugins (shared libraries speaking storage_plugin.h) with
// Boost.DLL, checks the version handshake, and keeps each library mapped for
// as long as anything from it is alive.
#pragma once

#include <conveyor/storage_plugin.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor {

// A plugin refused or not found. what() names the file and the reason.
class PluginLoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a loaded plugin says about itself (and what the host made of it).
struct PluginInfo {
  std::filesystem::path path;  // the resolved file
  std::string name;
  std::string version;
  uint32_t kind = 0;  // CONVEYOR_KIND_*
  uint64_t capabilities = 0;
  uint32_t abi_major = 0;
  uint32_t abi_minor = 0;
  uint32_t struct_size = 0;              // as the plugin reported it
  std::vector<std::string> optional_slots_missing;  // optional slots the host knows but cannot use
};

// "canonical" or "queue-storage" (or "unknown(N)").
std::string kind_name(uint32_t kind);
// "durable,multi-process,..." in bit order; "none" when empty.
std::string capability_names(uint64_t capabilities);

// A loaded, checked plugin. Immutable and safe to share between threads.
class Plugin {
 public:
  virtual ~Plugin() = default;
  // The host's copy of the table: slots beyond the plugin's struct_size (newer
  // than the plugin) are NULL here. Valid while this Plugin (or any
  // shared_ptr aliasing it) is alive.
  virtual const conveyor_storage_plugin& table() const = 0;
  virtual const PluginInfo& info() const = 0;
};

// The directory holding the plugins built or installed with conveyor:
// <directory of the running executable>/../lib/conveyor/plugins.
std::filesystem::path default_plugin_dir();

// plugin names a file when it contains '/' or ends in ".so"; otherwise it is a
// name looked up as <plugin_dir>/libconveyor-<name>.so (plugin_dir empty:
// default_plugin_dir()). Throws PluginLoadError when a name is not found,
// listing the plugins that are there.
std::filesystem::path resolve_plugin_path(std::string_view plugin, std::string_view plugin_dir);

// Loads and checks a plugin file. Throws PluginLoadError naming the file and
// the reason: not found, not a shared library, no entry symbol, entry returned
// NULL, ABI major mismatch (both versions named), table too small, a required
// slot NULL. Thread-safe.
std::shared_ptr<const Plugin> load_plugin(const std::filesystem::path& path);

}  // namespace conveyor
