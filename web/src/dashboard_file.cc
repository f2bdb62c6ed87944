// The admin server's static-file hook (admin_server.hpp): the dashboard's
// embedded files.
#include <conveyor/admin_server.hpp>
#include <conveyor/web_assets.hpp>

#include <string>

namespace conveyor {

std::optional<StaticFile> dashboard_file(std::string_view path) {
  const std::optional<web::Asset> asset = web::find_asset(path);
  if (!asset) return std::nullopt;
  return StaticFile{std::string(asset->content_type), asset->body};
}

}  // namespace conveyor
