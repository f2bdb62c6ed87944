#include "report_protocol.hpp"

namespace conveyor::conformance {
namespace {

const char* result_word(Result r) {
  switch (r) {
    case Result::kPassed:
      return "passed";
    case Result::kFailed:
      return "failed";
    case Result::kSkipped:
      return "skipped";
    case Result::kCrashed:
      return "crashed";
    case Result::kTimedOut:
      return "timed-out";
  }
  return "failed";
}

std::optional<Result> parse_result(std::string_view w) {
  for (Result r :
       {Result::kPassed, Result::kFailed, Result::kSkipped, Result::kCrashed, Result::kTimedOut})
    if (w == result_word(r)) return r;
  return std::nullopt;
}

std::vector<std::string_view> split_tabs(std::string_view line, size_t max_fields) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < max_fields) {
    const size_t tab = line.find('\t');
    if (tab == std::string_view::npos) break;
    out.push_back(line.substr(0, tab));
    line.remove_prefix(tab + 1);
  }
  out.push_back(line);
  return out;
}

}  // namespace

std::string one_line(std::string_view text, size_t max_len) {
  // Lines keep their boundaries as " | " (GoogleTest puts each value of a
  // failed comparison on its own line); other blanks collapse to one space.
  std::string out;
  bool space = false, line_break = false;
  for (char c : text) {
    if (c == '\n' || c == '\r') {
      line_break = !out.empty();
      continue;
    }
    if (c == '\t' || c == ' ') {
      space = !out.empty();
      continue;
    }
    if (line_break)
      out += " | ";
    else if (space)
      out += ' ';
    space = line_break = false;
    out += c;
  }
  if (out.size() > max_len) out = out.substr(0, max_len - 3) + "...";
  return out;
}

std::string start_record(std::string_view test) { return "S\t" + one_line(test); }

std::string end_record(std::string_view test, Result result, std::string_view reason) {
  return "E\t" + one_line(test) + "\t" + result_word(result) + "\t" + one_line(reason);
}

std::string done_record() { return "D"; }

void ReportParser::feed(std::string_view line) {
  std::vector<std::string_view> f = split_tabs(line, 4);
  if (f[0] == "S" && f.size() == 2) {
    running_ = std::string(f[1]);
  } else if (f[0] == "E" && f.size() >= 3) {
    Outcome o;
    o.test = std::string(f[1]);
    o.result = parse_result(f[2]).value_or(Result::kFailed);
    if (f.size() == 4) o.reason = std::string(f[3]);
    outcomes_.push_back(std::move(o));
    running_.reset();
  } else if (f[0] == "D") {
    done_ = true;
  }
}

void ReportParser::end_running(Result result, std::string reason) {
  if (!running_) return;
  outcomes_.push_back(Outcome{*running_, result, std::move(reason)});
  running_.reset();
}

}  // namespace conveyor::conformance
