// The storage-plugin loader: resolves a plugin name to a file, maps it with
// Boost.DLL, runs the version handshake of storage_plugin.h and keeps a
// host-side copy of the function table. Every refusal is a PluginLoadError
// that names the file, the reason and what to do about it.
#include <conveyor/host/plugin_loader.hpp>

#include <conveyor/host/storage_slots.hpp>

#include <spdlog/spdlog.h>
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>

namespace conveyor {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kPluginPrefix = "libconveyor-";
constexpr std::string_view kPluginSuffix = ".so";

// Reads a slot of the host's table copy as an untyped value: only its
// NULL-ness matters here. memcpy avoids type-punning through the struct.
bool slot_is_null(const conveyor_storage_plugin& table, const host::SlotInfo& slot) {
  void (*fn)() = nullptr;
  static_assert(sizeof fn == sizeof table.open, "function pointers differ in size");
  std::memcpy(&fn, reinterpret_cast<const unsigned char*>(&table) + slot.offset, sizeof fn);
  return fn == nullptr;
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

[[noreturn]] void refuse(const fs::path& path, const std::string& reason) {
  throw PluginLoadError("cannot load storage plugin " + path.string() + ": " + reason);
}

// True when the file starts with the ELF magic. Used only to word the error
// when dlopen fails: "not a shared library" versus "cannot be loaded" (e.g. a
// missing dependency or an unresolved symbol in a real library).
bool looks_like_elf(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  if (!in.read(magic, sizeof magic)) return false;
  return magic[0] == 0x7f && magic[1] == 'E' && magic[2] == 'L' && magic[3] == 'F';
}

// Boost's message is "boost::dll::shared_library::load() failed (dlerror
// system message: TEXT): <errno text>"; TEXT is what a user can act on.
std::string dlerror_text(const std::exception& e) {
  std::string what = e.what();
  constexpr std::string_view marker = "(dlerror system message: ";
  auto begin = what.find(marker);
  auto end = what.rfind("): ");
  if (begin == std::string::npos || end == std::string::npos || end < begin) return what;
  begin += marker.size();
  return what.substr(begin, end - begin);
}

bool is_simple_name(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

// Plugin names found in dir (files libconveyor-NAME.so), sorted.
std::vector<std::string> available_plugins(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string file = it->path().filename().string();
    if (file.size() <= kPluginPrefix.size() + kPluginSuffix.size()) continue;
    if (file.compare(0, kPluginPrefix.size(), kPluginPrefix) != 0) continue;
    if (file.compare(file.size() - kPluginSuffix.size(), kPluginSuffix.size(), kPluginSuffix) != 0)
      continue;
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) continue;  // follows symlinks
    names.push_back(file.substr(kPluginPrefix.size(),
                                file.size() - kPluginPrefix.size() - kPluginSuffix.size()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

class LoadedPlugin final : public Plugin {
 public:
  LoadedPlugin(std::shared_ptr<boost::dll::shared_library> library,
               const conveyor_storage_plugin& table, PluginInfo info)
      : library_(std::move(library)), table_(table), info_(std::move(info)) {}

  const conveyor_storage_plugin& table() const override { return table_; }
  const PluginInfo& info() const override { return info_; }

 private:
  // Keeps the library mapped: table_'s function pointers point into it, so
  // it must outlive every user of this Plugin (they hold it by shared_ptr).
  std::shared_ptr<boost::dll::shared_library> library_;
  conveyor_storage_plugin table_;  // the host's copy, sized as the host knows it
  PluginInfo info_;
};

}  // namespace

std::string kind_name(uint32_t kind) {
  switch (kind) {
    case CONVEYOR_KIND_CANONICAL:
      return "canonical";
    case CONVEYOR_KIND_QUEUE_STORAGE:
      return "queue-storage";
    default:
      return "unknown(" + std::to_string(kind) + ")";
  }
}

bool kind_known(uint32_t kind) {
  return kind == CONVEYOR_KIND_CANONICAL || kind == CONVEYOR_KIND_QUEUE_STORAGE;
}

uint64_t unknown_capabilities(uint64_t capabilities) {
  return capabilities & ~(CONVEYOR_CAP_DURABLE | CONVEYOR_CAP_MULTI_PROCESS |
                          CONVEYOR_CAP_MULTI_HOST | CONVEYOR_CAP_NOTIFY | CONVEYOR_CAP_NOTIFY_DUE);
}

std::string capability_names(uint64_t capabilities) {
  static constexpr std::pair<uint64_t, const char*> kNames[] = {
      {CONVEYOR_CAP_DURABLE, "durable"},       {CONVEYOR_CAP_MULTI_PROCESS, "multi-process"},
      {CONVEYOR_CAP_MULTI_HOST, "multi-host"}, {CONVEYOR_CAP_NOTIFY, "notify"},
      {CONVEYOR_CAP_NOTIFY_DUE, "notify-due"},
  };
  static_assert(std::size(kNames) == 5, "unknown_capabilities() lists the same bits");
  std::vector<std::string> names;
  for (int bit = 0; bit < 64; ++bit) {
    const uint64_t mask = uint64_t{1} << bit;
    if ((capabilities & mask) == 0) continue;
    const char* name = nullptr;
    for (const auto& [cap, cap_name] : kNames)
      if (cap == mask) name = cap_name;
    // A bit from a newer minor this host does not know: shown, not dropped.
    names.push_back(name != nullptr ? std::string(name) : "bit" + std::to_string(bit));
  }
  return names.empty() ? "none" : join(names, ",");
}

// CONVEYOR_PLUGIN_DIR, when set and non-empty, replaces the default: it lets a
// relocated install, a package or a test point at its plugins without editing
// the config file. An explicit [storage] plugin_dir still wins (it is passed
// to resolve_plugin_path and this function is not consulted).
std::filesystem::path default_plugin_dir() {
  if (const char* env = std::getenv("CONVEYOR_PLUGIN_DIR"); env != nullptr && *env != '\0')
    return fs::path(env).lexically_normal();
  std::error_code ec;
  fs::path exe = boost::dll::program_location(ec);  // /proc/self/exe
  if (ec || exe.empty())
    throw PluginLoadError(
        "cannot find the default storage plugin directory: the running executable's path is "
        "unknown (" +
        ec.message() + "); set [storage] plugin_dir or CONVEYOR_PLUGIN_DIR");
  // Same relative layout in the build tree and in an install (CMakeLists.txt).
  return (exe.parent_path() / ".." / "lib" / "conveyor" / "plugins").lexically_normal();
}

std::filesystem::path resolve_plugin_path(std::string_view plugin, std::string_view plugin_dir) {
  if (plugin.empty())
    throw PluginLoadError(
        "no storage plugin configured; set [storage] plugin to a plugin name (e.g. sqlite) or "
        "to a path to a .so");
  const bool is_path = plugin.find('/') != std::string_view::npos ||
                       (plugin.size() >= kPluginSuffix.size() &&
                        plugin.substr(plugin.size() - kPluginSuffix.size()) == kPluginSuffix);
  // A path is used as given, relative to the working directory; load_plugin
  // reports a missing file.
  if (is_path) return fs::path(plugin);

  if (!is_simple_name(plugin))
    throw PluginLoadError("storage plugin name '" + std::string(plugin) +
                          "' is not valid (letters, digits, '_' and '-' only); set [storage] "
                          "plugin to a plugin name (e.g. sqlite) or to a path to a .so");

  const fs::path dir = plugin_dir.empty() ? default_plugin_dir() : fs::path(plugin_dir);
  fs::path candidate =
      dir / (std::string(kPluginPrefix) + std::string(plugin) + std::string(kPluginSuffix));
  std::error_code ec;
  if (fs::exists(candidate, ec)) return candidate;

  std::string where;
  if (!fs::is_directory(dir, ec)) {
    where =
        "the directory does not exist; set [storage] plugin_dir or CONVEYOR_PLUGIN_DIR to "
        "the plugin directory, or [storage] plugin to a path to a .so";
  } else {
    const std::vector<std::string> names = available_plugins(dir);
    where = names.empty() ? "no plugins there; set [storage] plugin_dir or CONVEYOR_PLUGIN_DIR "
                            "to the plugin directory, or [storage] plugin to a path to a .so"
                          : "available: " + join(names, ", ") +
                                "; set [storage] plugin to one of these or to a path to a .so";
  }
  throw PluginLoadError("storage plugin '" + std::string(plugin) + "' not found in " +
                        dir.string() + " (" + where + ")");
}

namespace {

// One warning per plugin file and value per process: an Engine, the CLI and
// conveyor-bench may load the same plugin several times.
void warn_about_newer_values(const PluginInfo& info) {
  if (info.kind_known && info.unknown_capabilities == 0) return;
  static std::mutex mu;
  static std::set<std::tuple<std::string, uint32_t, uint64_t>> warned;
  {
    std::lock_guard lock(mu);
    if (!warned.emplace(info.path.string(), info.kind, info.unknown_capabilities).second) return;
  }
  const std::string host_abi =
      std::to_string(CONVEYOR_ABI_MAJOR) + "." + std::to_string(CONVEYOR_ABI_MINOR);
  if (!info.kind_known)
    spdlog::warn(
        "storage plugin '{}' ({}) declares kind {}, which this conveyor (ABI {}) does not know; "
        "loading it anyway (a newer ABI minor may define it): the host treats every kind alike",
        info.name, info.path.string(), info.kind, host_abi);
  if (info.unknown_capabilities != 0)
    spdlog::warn(
        "storage plugin '{}' ({}) advertises capability bits {:#x} ({}), which this conveyor "
        "(ABI {}) does not know; loading it anyway and ignoring them",
        info.name, info.path.string(), info.unknown_capabilities,
        capability_names(info.unknown_capabilities), host_abi);
}

// load_plugin's steps, recording in d what each one found before it refuses.
std::shared_ptr<const Plugin> load_recording(const fs::path& requested, PluginDiagnosis& d) {
  d.path = requested;
  // Resolve symlinks and relative parts first: the file we check is the file
  // we load, and info().path names it unambiguously.
  std::error_code ec;
  const fs::path path = fs::canonical(requested, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory)
      refuse(requested,
             "file not found; set [storage] plugin to a plugin name found in [storage] "
             "plugin_dir or to the path of an existing .so");
    refuse(requested, "cannot access the file (" + ec.message() + ")");
  }
  d.path = path;
  d.file_found = true;
  if (!fs::is_regular_file(path, ec))
    refuse(path, "not a regular file; set [storage] plugin to the path of a .so");

  // The executable itself is not a plugin; Boost.DLL would quietly hand out
  // the program's own symbols for it.
  std::error_code exe_ec;
  const fs::path exe = boost::dll::program_location(exe_ec);
  if (!exe_ec && fs::equivalent(path, exe, exe_ec))
    refuse(path, "this is the running executable, not a storage plugin");

  // rtld_now: an unresolved symbol fails here, not in the middle of a job.
  // rtld_local: plugins' symbols cannot clash with each other or the host.
  // No append_decorations: the path is already resolved.
  auto library = std::make_shared<boost::dll::shared_library>();
  try {
    library->load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    if (!looks_like_elf(path))
      refuse(path, "not a shared library (" + dlerror_text(e) +
                       "); set [storage] plugin to a storage plugin .so built for this platform");
    refuse(path, "the shared library cannot be loaded (" + dlerror_text(e) +
                     "); check that it was built for this platform and that its dependencies "
                     "are installed");
  } catch (...) {
    // A static initializer in the plugin threw something that is not a
    // std::exception; the library is not usable either way.
    refuse(path, "the library's initialisation threw an exception while loading");
  }

  d.library_loaded = true;
  if (!library->has(CONVEYOR_PLUGIN_ENTRY_SYMBOL))
    refuse(path, "the library does not export " CONVEYOR_PLUGIN_ENTRY_SYMBOL
                 "; build it with CONVEYOR_EXPORT_STORAGE_PLUGIN or export the function from "
                 "storage_plugin.h (with CONVEYOR_PLUGIN_EXPORT, extern \"C\")");
  d.entry_found = true;
  // get<Signature> yields a reference to the function itself (get of a
  // pointer type would read the code as if it were a pointer variable).
  using EntrySignature = std::remove_pointer_t<conveyor_plugin_entry_fn>;
  conveyor_plugin_entry_fn entry = &library->get<EntrySignature>(CONVEYOR_PLUGIN_ENTRY_SYMBOL);

  const conveyor_storage_plugin* plugin_table = nullptr;
  try {
    // The entry is C and must not throw, but a non-conforming C++ plugin
    // might: refuse it rather than let the exception escape into the host.
    plugin_table = entry(CONVEYOR_ABI_MAJOR, CONVEYOR_ABI_MINOR);
  } catch (const std::exception& e) {
    refuse(path, std::string(CONVEYOR_PLUGIN_ENTRY_SYMBOL) + " threw an exception (" + e.what() +
                     "); a plugin must not let exceptions cross the C ABI");
  } catch (...) {
    refuse(path, std::string(CONVEYOR_PLUGIN_ENTRY_SYMBOL) +
                     " threw an exception; a plugin must not let exceptions cross the C ABI");
  }

  const std::string host_abi =
      std::to_string(CONVEYOR_ABI_MAJOR) + "." + std::to_string(CONVEYOR_ABI_MINOR);
  if (plugin_table == nullptr)
    refuse(path, std::string(CONVEYOR_PLUGIN_ENTRY_SYMBOL) +
                     " returned NULL: the plugin does not support ABI major " +
                     std::to_string(CONVEYOR_ABI_MAJOR) + " (this conveyor speaks " + host_abi +
                     "); use a plugin built for this conveyor version");

  // The header fields (struct_size, abi_major, abi_minor) sit at the same
  // offsets in every version, so they can be read before the size check.
  const uint32_t struct_size = plugin_table->struct_size;
  const uint32_t abi_major = plugin_table->abi_major;
  const uint32_t abi_minor = plugin_table->abi_minor;
  d.table_returned = true;
  d.struct_size = struct_size;
  d.abi_major = abi_major;
  d.abi_minor = abi_minor;
  if (abi_major != CONVEYOR_ABI_MAJOR)
    refuse(path, "plugin speaks ABI " + std::to_string(abi_major) + "." +
                     std::to_string(abi_minor) + ", this conveyor speaks " + host_abi +
                     "; use a plugin built for ABI major " + std::to_string(CONVEYOR_ABI_MAJOR));
  if (struct_size < CONVEYOR_PLUGIN_V1_0_SIZE)
    refuse(path, "function table is " + std::to_string(struct_size) + " bytes, at least " +
                     std::to_string(CONVEYOR_PLUGIN_V1_0_SIZE) +
                     " required (ABI 1.0); rebuild the plugin against storage_plugin.h");

  // The host's copy: zeroed, then the prefix both sides know. Slots the
  // plugin is too old for stay NULL; slots from a newer minor are not copied.
  const std::size_t copied = std::min<std::size_t>(struct_size, sizeof(conveyor_storage_plugin));
  conveyor_storage_plugin table;
  std::memset(&table, 0, sizeof table);
  std::memcpy(&table, plugin_table, copied);
  // The copy's struct_size says how much of the copy came from the plugin, so
  // code that trusts table().struct_size never reads past the host's struct;
  // info().struct_size keeps what the plugin reported.
  table.struct_size = static_cast<uint32_t>(copied);

  // Everything the table says, recorded before any of it is judged.
  d.table_read = true;
  if (table.name != nullptr) d.name = table.name;
  if (table.version != nullptr) d.version = table.version;
  d.kind = table.kind;
  d.capabilities = table.capabilities;
  // A kind or capability bit from a newer minor is loaded, not refused
  // (storage_plugin.h rule 7): the host uses only what it knows.
  d.kind_known = kind_known(table.kind);
  d.unknown_capabilities = unknown_capabilities(table.capabilities);
  d.has_notify =
      (table.capabilities & CONVEYOR_CAP_NOTIFY) != 0 && table.wait_for_notification != nullptr;
  // Every slot the host knows is in the copy (zeroed past the plugin's
  // table), so each is judged; the required ones are the 1.0 slots but
  // wait_for_notification (storage_slots.hpp).
  for (const host::SlotInfo& slot : host::kStorageSlots)
    if (slot_is_null(table, slot))
      (slot.required ? d.required_slots_missing : d.optional_slots_missing).emplace_back(slot.name);

  if (table.name == nullptr || table.name[0] == '\0')
    refuse(path, "the function table has no name; set name in the plugin's table");
  if (table.version == nullptr || table.version[0] == '\0')
    refuse(path, "the function table has no version; set version in the plugin's table");
  const std::vector<std::string>& missing = d.required_slots_missing;
  if (!missing.empty())
    refuse(path, std::string(missing.size() == 1 ? "required slot " : "required slots ") +
                     join(missing, ", ") + (missing.size() == 1 ? " is" : " are") +
                     " NULL; every ABI 1.0 slot but wait_for_notification must be implemented "
                     "(return CONVEYOR_E_UNSUPPORTED from what the plugin cannot do)");
  if ((table.capabilities & CONVEYOR_CAP_NOTIFY) != 0 && table.wait_for_notification == nullptr)
    refuse(path,
           "the plugin advertises the notify capability but wait_for_notification is NULL; "
           "implement it or drop CONVEYOR_CAP_NOTIFY");

  PluginInfo info;
  info.path = path;
  info.name = table.name;
  info.version = table.version;
  info.kind = table.kind;
  info.capabilities = table.capabilities;
  info.abi_major = abi_major;
  info.abi_minor = abi_minor;
  info.struct_size = struct_size;
  info.optional_slots_missing = d.optional_slots_missing;
  info.kind_known = d.kind_known;
  info.unknown_capabilities = d.unknown_capabilities;
  info.has_notify = d.has_notify;
  warn_about_newer_values(info);

  return std::make_shared<const LoadedPlugin>(std::move(library), table, std::move(info));
}

}  // namespace

std::shared_ptr<const Plugin> load_plugin(const std::filesystem::path& path) {
  PluginDiagnosis ignored;
  return load_recording(path, ignored);
}

PluginDiagnosis diagnose_plugin(const std::filesystem::path& path) {
  PluginDiagnosis d;
  try {
    load_recording(path, d);  // the library is unloaded again when this returns
  } catch (const PluginLoadError& e) {
    d.error = e.what();
  }
  return d;
}

}  // namespace conveyor
