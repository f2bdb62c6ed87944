// Progress lines on stderr while the bench runs ("[  12.3s] sqlite drain: ..."),
// so a long full run is never silent.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <string>

namespace conveyor::bench {

class Progress {
 public:
  Progress();
  template <typename... Args>
  void line(fmt::format_string<Args...> f, Args&&... args) {
    write(fmt::format(f, std::forward<Args>(args)...));
  }
  // A scope prefix such as "sqlite drain".
  void set_scope(std::string scope) { scope_ = std::move(scope); }

 private:
  void write(const std::string& text);
  std::chrono::steady_clock::time_point start_;
  std::string scope_;
};

}  // namespace conveyor::bench
