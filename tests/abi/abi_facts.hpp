// The ABI 1.0 facts (abi_v1_0_facts.inc) as one header describes them.
// abi_facts.cc is compiled twice: once against the frozen copy of the 1.0
// header (tests/abi/v1_0) and once against the current header (sdk/include);
// abi_test.cc compares the two.
#pragma once

#include <map>
#include <string>

namespace conveyor::abi_test {

// Fact name ("conveyor_job.id", "sizeof conveyor_lease", "CONVEYOR_OK") to its
// value ("offset 8, size 8, type long", "16", "0").
using Facts = std::map<std::string, std::string>;

Facts facts_of_v1_0_header();
Facts facts_of_current_header();

}  // namespace conveyor::abi_test
