// The table the generated source (embed_assets.cmake) fills: one entry per
// file under web/static, sorted by path.
#pragma once

#include <cstddef>

namespace conveyor::web::detail {

struct EmbeddedFile {
  const char* path;           // relative to web/static, e.g. "assets/app.css"
  const unsigned char* data;  // static storage; one NUL past the end
  size_t size;                // without that NUL
};

extern const EmbeddedFile kEmbeddedFiles[];
extern const size_t kEmbeddedFileCount;

}  // namespace conveyor::web::detail
