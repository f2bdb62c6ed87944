// Order statistics over measured samples.
#pragma once

#include <cstdint>
#include <vector>

namespace conveyor::bench {

// The p-th percentile (0 < p <= 100) of ascending samples by the nearest-rank
// method: the smallest sample with at least p% of the samples at or below it.
// 0 for no samples.
double percentile(const std::vector<double>& sorted, double p);

// The median of unsorted values (mean of the middle two for an even count); 0 if empty.
double median(std::vector<double> values);

// The smallest and largest value (the spread beside a median); 0 if empty.
double min_of(const std::vector<double>& values);
double max_of(const std::vector<double>& values);

}  // namespace conveyor::bench
