// Number formatting shared by the table and the chart.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>

namespace conveyor::bench {

// 1234567.8 -> "1,234,568".
inline std::string grouped(double v) {
  const bool negative = v < 0;
  std::string digits = fmt::format("{:.0f}", std::fabs(v));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return negative ? "-" + out : out;
}

// Milliseconds with sensible precision: "0.42", "12.3", "1,204".
inline std::string ms(double v) {
  if (v < 10) return fmt::format("{:.2f}", v);
  if (v < 100) return fmt::format("{:.1f}", v);
  return grouped(v);
}

// Bytes in binary units: "960 B", "128 kB", "3.7 MB", "1.20 GB".
inline std::string bytes(double v) {
  if (v < 1024) return fmt::format("{:.0f} B", v);
  if (v < 1024 * 1024) return fmt::format("{:.0f} kB", v / 1024);
  if (v < 1024.0 * 1024 * 1024) return fmt::format("{:.1f} MB", v / (1024 * 1024));
  return fmt::format("{:.2f} GB", v / (1024.0 * 1024 * 1024));
}

}  // namespace conveyor::bench
