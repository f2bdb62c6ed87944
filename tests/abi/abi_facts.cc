// Collects the facts of abi_v1_0_facts.inc from whichever storage_plugin.h is
// on the include path. Built twice (tests/abi/CMakeLists.txt), each time with
// CONVEYOR_ABI_FACTS_NS (a namespace to keep the two builds' types apart, so
// the program never has two definitions of one type) and
// CONVEYOR_ABI_FACTS_FN (the function to define).
#include "abi_facts.hpp"

#include <cxxabi.h>
#include <stddef.h>
#include <stdint.h>

#include <cstdlib>
#include <memory>
#include <typeinfo>

// The C header declares only types and macros, so wrapping it in a namespace
// is harmless; <stddef.h> and <stdint.h>, already included above, are not
// included again inside it.
namespace CONVEYOR_ABI_FACTS_NS {
#include <conveyor/storage_plugin.h>
}

namespace conveyor::abi_test {
namespace {

#define CONVEYOR_ABI_STRINGIFY2(x) #x
#define CONVEYOR_ABI_STRINGIFY(x) CONVEYOR_ABI_STRINGIFY2(x)

// The demangled type with this build's namespace removed, e.g.
// "int (*)(conveyor_storage*, conveyor_error*)".
std::string type_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  std::string name = status == 0 && demangled ? demangled.get() : type.name();
  const std::string ns = CONVEYOR_ABI_STRINGIFY(CONVEYOR_ABI_FACTS_NS) "::";
  for (size_t at; (at = name.find(ns)) != std::string::npos;) name.erase(at, ns.size());
  return name;
}

}  // namespace

Facts CONVEYOR_ABI_FACTS_FN() {
  using namespace CONVEYOR_ABI_FACTS_NS;
  Facts facts;
#define ABI_FIELD(type, member)                                                               \
  facts[#type "." #member] = "offset " + std::to_string(offsetof(type, member)) + ", size " + \
                             std::to_string(sizeof(type::member)) + ", type " +               \
                             type_name(typeid(decltype(type::member)));
#define ABI_SIZE(type) facts["sizeof " #type] = std::to_string(sizeof(type));
#define ABI_TYPE(type) facts["type " #type] = type_name(typeid(type));
#define ABI_CONSTANT(name) facts[#name] = std::to_string(name);
#define ABI_STRING(name) facts[#name] = name;
#include "abi_v1_0_facts.inc"
#undef ABI_FIELD
#undef ABI_SIZE
#undef ABI_TYPE
#undef ABI_CONSTANT
#undef ABI_STRING
  return facts;
}

}  // namespace conveyor::abi_test
