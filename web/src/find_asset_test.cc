// The embedded dashboard: every file under web/static is in the binary,
// byte for byte, with its content type; every file a page or module refers
// to resolves; nothing is fetched from another host.
#include <conveyor/web_assets.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace conveyor::web {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// "assets/js" + "./api.js" -> "assets/js/api.js"; "../x" climbs one folder.
std::string resolve(std::string base_dir, std::string_view reference) {
  std::string ref(reference);
  if (ref.starts_with("/")) return ref.substr(1);
  while (true) {
    if (ref.starts_with("./")) {
      ref = ref.substr(2);
    } else if (ref.starts_with("../")) {
      ref = ref.substr(3);
      const size_t slash = base_dir.rfind('/');
      base_dir = slash == std::string::npos ? "" : base_dir.substr(0, slash);
    } else {
      break;
    }
  }
  return base_dir.empty() ? ref : base_dir + "/" + ref;
}

std::string dir_of(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? "" : std::string(path.substr(0, slash));
}

// Every text between `open` and the next `close` in body.
std::vector<std::string> between(std::string_view body, std::string_view open, char close) {
  std::vector<std::string> found;
  for (size_t at = body.find(open); at != std::string_view::npos; at = body.find(open, at)) {
    at += open.size();
    const size_t end = body.find(close, at);
    if (end == std::string_view::npos) break;
    found.emplace_back(body.substr(at, end - at));
  }
  return found;
}

// Local references: href/src attributes, CSS url(), JS import specifiers.
// (Hand-rolled rather than <regex>, which trips GCC 12's -Wmaybe-uninitialized.)
std::set<std::string> references_in(const Asset& asset) {
  std::set<std::string> found;
  // A view, not a moved-from std::string: GCC 12 at -O3 reports the moved
  // string's first byte as maybe uninitialized (a false positive).
  const auto add = [&](std::string_view ref) {
    if (!ref.empty() && (ref.front() == '"' || ref.front() == '\''))
      ref = ref.substr(1, ref.size() - 2);
    if (ref.empty() || ref.starts_with("#")) return;
    found.insert(resolve(dir_of(asset.path), ref));
  };
  for (const auto& [open, close] : {std::pair<std::string_view, char>{"href=\"", '"'},
                                    {"src=\"", '"'},
                                    {"url(", ')'},
                                    {"from '", '\''},
                                    {"import('", '\''}}) {
    for (const std::string& ref : between(asset.body, open, close)) add(ref);
  }
  return found;
}

TEST(FindAsset, ServesTheIndexForTheRootAndByName) {
  const auto root = find_asset("");
  const auto index = find_asset("index.html");
  ASSERT_TRUE(root.has_value());
  ASSERT_TRUE(index.has_value());
  EXPECT_EQ(root->body, index->body);
  EXPECT_EQ(index->content_type, "text/html; charset=utf-8");
  EXPECT_TRUE(index->body.starts_with("<!doctype html>")) << index->body.substr(0, 40);
}

TEST(FindAsset, AnswersNothingForUnknownOrUnnormalizedPaths) {
  for (std::string_view path : {"nope.js", "/index.html", "../index.html", "assets/../index.html",
                                "assets/", "assets", "index.html?x=1", "INDEX.HTML", "index.htm"}) {
    EXPECT_FALSE(find_asset(path).has_value()) << path;
  }
}

TEST(FindAsset, ContentTypesFollowTheExtension) {
  EXPECT_EQ(content_type_for("assets/app.css"), "text/css; charset=utf-8");
  EXPECT_EQ(content_type_for("assets/js/main.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(content_type_for("assets/favicon.svg"), "image/svg+xml");
  EXPECT_EQ(content_type_for("data.bin"), "application/octet-stream");
  const auto script = find_asset("assets/js/main.js");
  ASSERT_TRUE(script.has_value());
  EXPECT_EQ(script->content_type, "text/javascript; charset=utf-8");
}

TEST(FindAsset, EmbedsEveryStaticFileByteForByte) {
  const fs::path root = CONVEYOR_WEB_STATIC_DIR;
  std::set<std::string> on_disk;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;
    const std::string path = fs::relative(entry.path(), root).generic_string();
    if (path.starts_with(".") || path.find("/.") != std::string::npos || path.ends_with("~"))
      continue;
    on_disk.insert(path);
    const auto asset = find_asset(path);
    ASSERT_TRUE(asset.has_value()) << path << " is not embedded (rebuild conveyor_web)";
    // Not EXPECT_EQ: a stale copy would print both files whole.
    const std::string disk = read_file(entry.path());
    EXPECT_TRUE(asset->body == disk)
        << path << " differs from the embedded copy (" << disk.size() << " bytes on disk, "
        << asset->body.size() << " embedded): rebuild conveyor_web";
  }
  std::set<std::string> embedded;
  for (const Asset& asset : all_assets()) embedded.insert(std::string(asset.path));
  EXPECT_EQ(embedded, on_disk);
  EXPECT_TRUE(on_disk.contains("index.html"));
}

TEST(FindAsset, EveryReferencedFileIsEmbeddedWithTheRightType) {
  std::set<std::string> all_references;
  for (const Asset& asset : all_assets()) {
    for (const std::string& ref : references_in(asset)) {
      all_references.insert(ref);
      const auto target = find_asset(ref);
      ASSERT_TRUE(target.has_value())
          << asset.path << " refers to " << ref << ", which is not embedded";
      EXPECT_NE(target->content_type, "application/octet-stream") << ref;
    }
  }
  // The page's entry points are among them: the scan above saw real references.
  EXPECT_TRUE(all_references.contains("assets/js/main.js"));
  EXPECT_TRUE(all_references.contains("assets/app.css"));
  EXPECT_TRUE(all_references.contains("assets/js/api.js"));
}

TEST(FindAsset, NothingIsLoadedFromAnotherHost) {
  // The one absolute URL allowed is the SVG namespace, an identifier that is never fetched.
  // (A protocol-relative "//host/..." reference fails the test above: it is not embedded.)
  constexpr std::string_view kSvgNamespace = "http://www.w3.org/2000/svg";
  for (const Asset& asset : all_assets()) {
    for (std::string_view scheme : {"http://", "https://"}) {
      for (size_t at = asset.body.find(scheme); at != std::string_view::npos;
           at = asset.body.find(scheme, at + 1)) {
        EXPECT_TRUE(asset.body.substr(at).starts_with(kSvgNamespace))
            << asset.path << " names another host: " << asset.body.substr(at, 60);
      }
    }
  }
}

}  // namespace
}  // namespace conveyor::web
