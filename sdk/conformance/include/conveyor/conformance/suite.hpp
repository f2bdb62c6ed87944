// The storage-plugin conformance suite as a library. The GoogleTest cases live
// in conveyor_conformance_suite (link it whole-archive, e.g. through
// conveyor_conformance_suite_whole); the program that runs them calls
// set_parameters() before RUN_ALL_TESTS(). conveyor-conformance is such a
// program; a test binary of our own can be another.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor::conformance {

// Placeholders in option values, expanded afresh for every test so that no
// two tests share storage (every handle of one test reaches the same one):
//   @tmpdir  a new, empty temporary directory, removed after the test
//   @tmp     a file path inside that directory (the file does not exist yet)
//   @unique  an identifier unique to the test: [a-z0-9_], starts with a letter
inline constexpr std::string_view kTmpDirPlaceholder = "@tmpdir";
inline constexpr std::string_view kTmpPlaceholder = "@tmp";
inline constexpr std::string_view kUniquePlaceholder = "@unique";

struct Parameters {
  std::filesystem::path plugin;  // the plugin's shared library
  // The options handed to open, as on the command line (placeholders kept).
  std::vector<std::pair<std::string, std::string>> options;
};

// Sets what every test loads and opens. Call before RUN_ALL_TESTS().
void set_parameters(Parameters parameters);
// The parameters set last; a test fails with a clear message when none were.
const Parameters& parameters();
bool parameters_set();

}  // namespace conveyor::conformance
