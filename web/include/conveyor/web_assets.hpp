// The dashboard's files (web/static), built into the binary: the admin server
// serves them, so the dashboard works with no internet access.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace conveyor::web {

// Views into static storage: valid for the life of the program.
struct Asset {
  std::string_view path;          // "index.html", "assets/js/main.js"
  std::string_view content_type;  // "text/html; charset=utf-8", ...
  std::string_view body;
};

// A file by its path relative to the site root, without the leading slash
// ("index.html" for GET /, "assets/app.css" for GET /assets/app.css). An empty
// path means "index.html". nullopt for anything else (including "..", "//",
// a trailing "/" or a query string: the server strips those before asking).
// Thread-safe: it only reads constant data.
std::optional<Asset> find_asset(std::string_view path);

// Every embedded file, sorted by path.
std::vector<Asset> all_assets();

// The Content-Type for a file name, by its extension; unknown extensions are
// application/octet-stream.
std::string_view content_type_for(std::string_view path);

}  // namespace conveyor::web
