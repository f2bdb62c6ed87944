// The three renderings of a BenchReport: a terminal table (one column per
// backend) with the targets checked below it, JSON for tools, and an SVG
// chart to paste into an issue or a review.
#pragma once

#include "results.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace conveyor::bench {

std::string render_table(const BenchReport& report);
// One line per target of docs/performance/README.md this run measured: value, target, PASS/MISS.
std::string render_targets(const BenchReport& report);
nlohmann::json to_json(const BenchReport& report);
std::string render_svg(const BenchReport& report);

}  // namespace conveyor::bench
