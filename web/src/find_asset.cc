// Looks up the embedded dashboard files (the table embed_assets.cmake writes).
#include <conveyor/web_assets.hpp>

#include "embedded_files.hpp"

namespace conveyor::web {
namespace {

Asset to_asset(const detail::EmbeddedFile& file) {
  const std::string_view path = file.path;
  return Asset{path, content_type_for(path),
               std::string_view(reinterpret_cast<const char*>(file.data), file.size)};
}

}  // namespace

std::optional<Asset> find_asset(std::string_view path) {
  if (path.empty()) path = "index.html";
  // A dozen files: a scan is as fast as anything fancier.
  for (size_t i = 0; i < detail::kEmbeddedFileCount; ++i) {
    if (path == detail::kEmbeddedFiles[i].path) return to_asset(detail::kEmbeddedFiles[i]);
  }
  return std::nullopt;
}

std::vector<Asset> all_assets() {
  std::vector<Asset> assets;
  assets.reserve(detail::kEmbeddedFileCount);
  for (size_t i = 0; i < detail::kEmbeddedFileCount; ++i) {
    assets.push_back(to_asset(detail::kEmbeddedFiles[i]));
  }
  return assets;
}

}  // namespace conveyor::web
