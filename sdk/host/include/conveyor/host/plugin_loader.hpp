// conveyor/host/plugin_loader.hpp: finds a storage plugin (a shared library
// speaking storage_plugin.h), maps it with Boost.DLL, runs the version
// handshake, checks the slots (storage_slots.hpp) and keeps the library mapped
// for as long as anything from it is alive. Calling the table is
// plugin_binding.hpp's.
//
// Part of the host library (Conveyor::host), used by the engine, the CLI and
// the conformance suite. Errors name the file, the reason and what to do, in
// words a user of `conveyor` reads: they cite the config keys ([storage]
// plugin, plugin_dir) and CONVEYOR_PLUGIN_DIR.
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
  uint32_t struct_size = 0;                         // as the plugin reported it
  std::vector<std::string> optional_slots_missing;  // optional slots the host knows but cannot use
  // False for a kind this host does not know (a newer minor's): loaded anyway.
  bool kind_known = true;
  // Capability bits this host does not know (a newer minor's): ignored.
  uint64_t unknown_capabilities = 0;
  // CONVEYOR_CAP_NOTIFY advertised and wait_for_notification present: the
  // one condition for using notifications (other optional slots do not matter).
  bool has_notify = false;
};

// The names below are pure functions of their argument: they never fail
// (but for std::bad_alloc) and may be called from any thread.

// "canonical" or "queue-storage" (or "unknown(N)").
std::string kind_name(uint32_t kind);
// True for the CONVEYOR_KIND_* values this host's ABI defines.
bool kind_known(uint32_t kind);
// The bits of capabilities this host's ABI does not define (0 when none).
uint64_t unknown_capabilities(uint64_t capabilities);
// "durable,multi-process,..." in bit order, a bit this host does not know as
// "bitN"; "none" when empty.
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
// $CONVEYOR_PLUGIN_DIR when set and not empty, else <directory of the running
// executable>/../lib/conveyor/plugins (the same layout in the build tree and
// an install). The directory need not exist.
// Failure: PluginLoadError when the executable's path cannot be read.
// Thread-safe (reads the environment; do not setenv concurrently).
std::filesystem::path default_plugin_dir();

// plugin names a file when it contains '/' or ends in ".so": returned as
// given, whether or not it exists (load_plugin reports a missing file).
// Otherwise it is a name looked up as <plugin_dir>/libconveyor-<name>.so
// (plugin_dir empty: default_plugin_dir()); success returns that file.
// Failure: PluginLoadError when plugin is empty, is not a valid name (letters,
// digits, '_', '-'), or is not found (listing the plugins that are there, or
// saying that the directory does not exist).
// Thread-safe.
std::filesystem::path resolve_plugin_path(std::string_view plugin, std::string_view plugin_dir);

// Loads and checks a plugin file: maps it (RTLD_NOW | RTLD_LOCAL), calls
// its entry with this host's ABI version and copies the table it returns.
// Success: the plugin, holding the library mapped; loading one file twice
// maps it once (the dynamic loader counts) and gives two Plugins.
// Failure: PluginLoadError naming the file and the reason: not found, not a
// regular file, the running executable, not a shared library or not loadable
// (dlerror's text), no entry symbol, the entry threw or returned NULL, ABI
// major mismatch (both versions named), table too small, no name or version,
// a required slot NULL, notify advertised without wait_for_notification.
// An unknown kind or unknown capability bits (a newer minor's) are accepted:
// logged once per file and value per process (spdlog warn) and set in
// PluginInfo.
// Thread-safe: may be called concurrently, for the same file too. The
// plugin's static initialisers and entry run on the calling thread.
std::shared_ptr<const Plugin> load_plugin(const std::filesystem::path& path);

// Everything the loader learned about a plugin file, as far as it got, for
// `conveyor plugin info` to show an author why a load fails. Fields past the
// step that failed keep their defaults.
struct PluginDiagnosis {
  std::filesystem::path path;  // resolved (canonical) once the file is found
  bool file_found = false;
  bool library_loaded = false;  // dlopen succeeded
  bool entry_found = false;     // CONVEYOR_PLUGIN_ENTRY_SYMBOL exported
  bool table_returned = false;  // the entry returned a table: abi_* and struct_size are set
  bool table_read = false;      // major and size accepted: name to capabilities are set
  uint32_t abi_major = 0;
  uint32_t abi_minor = 0;
  uint32_t struct_size = 0;  // as the plugin reported it
  std::string name;
  std::string version;
  uint32_t kind = 0;
  uint64_t capabilities = 0;
  bool kind_known = true;                           // as in PluginInfo
  uint64_t unknown_capabilities = 0;                // as in PluginInfo
  bool has_notify = false;                          // as in PluginInfo
  std::vector<std::string> required_slots_missing;  // a load fails when not empty
  std::vector<std::string> optional_slots_missing;
  std::string error;  // what load_plugin throws; empty when the plugin loads
};

// Runs every step of load_plugin and reports instead of throwing; the library
// is unmapped again before it returns (unless something else holds it).
// Success and failure alike return the diagnosis: error is empty when the
// plugin would load, else load_plugin's message. Throws only std::bad_alloc.
// Thread-safe, like load_plugin.
PluginDiagnosis diagnose_plugin(const std::filesystem::path& path);

}  // namespace conveyor
