// A plain text table with aligned columns, for the CLI's human output.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace conveyor::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // The column holds text even when a cell looks like a number (a job key
  // "42"): left-aligned like the rest of it.
  void text_column(size_t column) { text_columns_.push_back(column); }
  // Columns separated by two spaces; numbers are right-aligned.
  std::string render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
  std::vector<size_t> text_columns_;
};

}  // namespace conveyor::cli
