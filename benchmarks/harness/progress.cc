#include "progress.hpp"

#include <cstdio>

namespace conveyor::bench {

Progress::Progress() : start_(std::chrono::steady_clock::now()) {}

void Progress::write(const std::string& text) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "[%7.1fs] %s%s%s\n", s, scope_.c_str(), scope_.empty() ? "" : ": ",
               text.c_str());
  std::fflush(stderr);
}

}  // namespace conveyor::bench
