#include "table.hpp"

#include <algorithm>
#include <cctype>

namespace conveyor::cli {
namespace {
bool numeric(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isdigit(c) || c == '.' || c == '-';
  });
}
// Columns as a terminal shows them: one per character, so a UTF-8 key or
// error text does not push the next column out (continuation bytes take no
// column; wide characters are not measured).
size_t columns(const std::string& s) {
  return static_cast<size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}
}  // namespace

std::string Table::render() const {
  std::vector<size_t> width;
  for (const auto& row : rows_) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], columns(row[i]));
  }
  std::string out;
  for (size_t r = 0; r < rows_.size(); ++r) {
    const auto& row = rows_[r];
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      const std::string pad(width[i] - columns(row[i]), ' ');
      const bool last = i + 1 == row.size();
      const bool text =
          std::find(text_columns_.begin(), text_columns_.end(), i) != text_columns_.end();
      if (r > 0 && !text && numeric(row[i]))
        line += pad + row[i];
      else
        line += row[i] + (last ? "" : pad);
      if (!last) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace conveyor::cli
