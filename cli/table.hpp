// A plain text table with aligned columns, for the CLI's human output.
#pragma once

#include <string>
#include <vector>

namespace conveyor::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Columns separated by two spaces; numbers are right-aligned.
  std::string render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace conveyor::cli
