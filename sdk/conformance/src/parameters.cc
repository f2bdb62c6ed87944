#include <conveyor/conformance/suite.hpp>

#include <mutex>

namespace conveyor::conformance {
namespace {

std::mutex& parameters_mutex() {
  static std::mutex mu;
  return mu;
}
Parameters& stored_parameters() {
  static Parameters p;
  return p;
}
bool& stored_set() {
  static bool set = false;
  return set;
}

}  // namespace

void set_parameters(Parameters parameters) {
  std::lock_guard lock(parameters_mutex());
  stored_parameters() = std::move(parameters);
  stored_set() = true;
}

const Parameters& parameters() {
  std::lock_guard lock(parameters_mutex());
  return stored_parameters();
}

bool parameters_set() {
  std::lock_guard lock(parameters_mutex());
  return stored_set();
}

}  // namespace conveyor::conformance
