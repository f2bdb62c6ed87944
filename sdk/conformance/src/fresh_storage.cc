#include "fresh_storage.hpp"

#include <conveyor/conformance/suite.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <system_error>

namespace conveyor::conformance {
namespace fs = std::filesystem;

namespace {

bool uses(const OptionList& options, std::string_view token) {
  for (const auto& [key, value] : options)
    if (value.find(token) != std::string::npos) return true;
  return false;
}

fs::path make_temp_dir() {
  std::string pattern = (fs::temp_directory_path() / "conveyor-conformance-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error("cannot create a temporary directory from " + pattern + ": " +
                             std::strerror(errno) + " (set TMPDIR to a writable directory)");
  return fs::path(pattern);
}

// Replaces every placeholder in value; the longest token wins at each '@'.
std::string expand(const std::string& value, const fs::path& dir, const std::string& unique) {
  std::string out;
  for (size_t i = 0; i < value.size();) {
    const std::string_view rest = std::string_view(value).substr(i);
    if (rest.starts_with(kTmpDirPlaceholder)) {
      out += dir.string();
      i += kTmpDirPlaceholder.size();
    } else if (rest.starts_with(kTmpPlaceholder)) {
      out += (dir / "storage").string();
      i += kTmpPlaceholder.size();
    } else if (rest.starts_with(kUniquePlaceholder)) {
      out += unique;
      i += kUniquePlaceholder.size();
    } else {
      out += value[i++];
    }
  }
  return out;
}

}  // namespace

std::string unique_identifier() {
  static std::atomic<uint64_t> counter{0};
  static const uint32_t salt = std::random_device{}();
  char buf[64];
  std::snprintf(buf, sizeof buf, "u%ld_%lu_%08x", static_cast<long>(::getpid()),
                static_cast<unsigned long>(counter.fetch_add(1) + 1),
                static_cast<unsigned>(salt ^ std::random_device{}()));
  return buf;
}

FreshStorage::FreshStorage(const OptionList& templates) {
  if (uses(templates, kTmpPlaceholder)) dir_ = make_temp_dir();  // also covers @tmpdir
  const std::string unique = unique_identifier();
  for (const auto& [key, value] : templates)
    options_.emplace_back(key, expand(value, dir_, unique));
}

FreshStorage::~FreshStorage() {
  if (dir_.empty()) return;
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::string FreshStorage::describe() const {
  if (options_.empty()) return "no options";
  std::string out;
  for (const auto& [key, value] : options_) {
    if (!out.empty()) out += ", ";
    out += key + "=" + value;
  }
  return out;
}

}  // namespace conveyor::conformance
