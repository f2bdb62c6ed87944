// The options of one test's storage: the placeholders of the user's options
// (suite.hpp) expanded once per test, so every handle a test opens reaches the
// same storage and no two tests share one.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace conveyor::conformance {

using OptionList = std::vector<std::pair<std::string, std::string>>;

class FreshStorage {
 public:
  // Throws std::runtime_error when the temporary directory cannot be made.
  explicit FreshStorage(const OptionList& templates);
  ~FreshStorage();  // removes the temporary directory, if one was made
  FreshStorage(const FreshStorage&) = delete;
  FreshStorage& operator=(const FreshStorage&) = delete;

  const OptionList& options() const { return options_; }
  // "key=value, key=value" for messages.
  std::string describe() const;

 private:
  std::filesystem::path dir_;  // empty unless @tmp or @tmpdir was used
  OptionList options_;
};

// A new identifier per call: a letter, then [a-z0-9_], unique across runs and
// processes with overwhelming probability (pid, counter and random bits).
std::string unique_identifier();

}  // namespace conveyor::conformance
