// Content types of the dashboard's files, by extension.
#include <conveyor/web_assets.hpp>

#include <array>
#include <utility>

namespace conveyor::web {

std::string_view content_type_for(std::string_view path) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 9> kTypes{{
      {".html", "text/html; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".json", "application/json"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".txt", "text/plain; charset=utf-8"},
      {".woff2", "font/woff2"},
  }};
  for (const auto& [extension, type] : kTypes) {
    if (path.ends_with(extension)) return type;
  }
  return "application/octet-stream";
}

}  // namespace conveyor::web
