// conveyor_microbench: Google Benchmark's usual command line and output, then
// a summary of the comparisons the benchmarks exist for: the limiter's cost
// on the poll path, and the cost of a call through the C ABI.
//
//   build/bin/conveyor_microbench --benchmark_repetitions=5
//
// With repetitions the summary compares medians, with the run-to-run noise;
// --benchmark_enable_random_interleaving=true spreads a shared machine's
// load changes evenly over the benchmarks compared.
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace {

// A benchmark's time per iteration in nanoseconds: wall and CPU, and the CPU
// time's run-to-run coefficient of variation (when repeated).
struct Timing {
  double real_ns = -1;
  double cpu_ns = -1;
  double cpu_cv_pct = -1;
};

// Passes everything to the console reporter and keeps, per benchmark, the
// median aggregate (with repetitions) or the median of the plain runs.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred) {
        failed_ = true;
        continue;
      }
      const double unit = benchmark::GetTimeUnitMultiplier(r.time_unit);
      const double real = r.GetAdjustedRealTime() / unit * 1e9;
      const double cpu = r.GetAdjustedCPUTime() / unit * 1e9;
      const std::string name = r.run_name.function_name;
      if (r.run_type == Run::RT_Aggregate) {
        if (r.aggregate_name == "median") {
          aggregated_[name].real_ns = real;
          aggregated_[name].cpu_ns = cpu;
        } else if (r.aggregate_name == "cv") {
          // The cv aggregate is a ratio, kept where a time would be.
          aggregated_[name].cpu_cv_pct = r.cpu_accumulated_time * 100;
        }
      } else {
        samples_[name].push_back({real, cpu, -1});
      }
    }
  }
  Timing timing(const std::string& name) const {
    if (auto it = aggregated_.find(name); it != aggregated_.end() && it->second.cpu_ns >= 0)
      return it->second;
    auto it = samples_.find(name);
    if (it == samples_.end() || it->second.empty()) return {};
    std::vector<Timing> v = it->second;
    std::sort(v.begin(), v.end(),
              [](const Timing& a, const Timing& b) { return a.cpu_ns < b.cpu_ns; });
    return v[v.size() / 2];
  }
  bool failed() const { return failed_; }

 private:
  std::map<std::string, Timing> aggregated_;
  std::map<std::string, std::vector<Timing>> samples_;
  bool failed_ = false;
};

std::string human_ns(double ns) {
  if (ns >= 1e6) return fmt::format("{:.2f} ms", ns / 1e6);
  if (ns >= 1e3) return fmt::format("{:.2f} us", ns / 1e3);
  return fmt::format("{:.1f} ns", ns);
}

// CPU time is compared (steadier than wall time on a shared machine); the
// noise shown is the larger of the two benchmarks' run-to-run CPU cv.
void compare(const CollectingReporter& rep, const std::string& what, const std::string& base,
             const std::string& other, const char* base_label, const char* other_label) {
  const Timing a = rep.timing(base), b = rep.timing(other);
  if (a.cpu_ns <= 0 || b.cpu_ns <= 0) return;  // filtered out
  const double noise = std::max(a.cpu_cv_pct, b.cpu_cv_pct);
  std::printf("  %-28s %s %s, %s %s CPU: %+.1f ns (%+.2f%%)%s\n", what.c_str(), base_label,
              human_ns(a.cpu_ns).c_str(), other_label, human_ns(b.cpu_ns).c_str(),
              b.cpu_ns - a.cpu_ns, (b.cpu_ns - a.cpu_ns) / a.cpu_ns * 100,
              noise >= 0 ? fmt::format("; run-to-run noise {:.1f}%", noise).c_str() : "");
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  std::printf("\nLimiter cost on the dispatcher's poll path (never-binding limit vs no limit):\n");
  for (const char* b : {"BM_DispatcherPoll_EmptyQueue", "BM_DispatcherPoll_Claim100"})
    compare(reporter, std::string(b).substr(3), std::string(b) + "/unlimited",
            std::string(b) + "/limited_never_binds", "unlimited", "limited");
  std::printf(
      "  (Claim100: a limited queue with tokens to spare claims up to 9 batches per pass, so its\n"
      "  time per poll covers more jobs: compare the items_per_second columns above)\n");
  if (const Timing t = reporter.timing("BM_TokenBucket_TakeAndRefund"); t.cpu_ns > 0)
    std::printf("  %-28s %s CPU per poll (the limiter's own work)\n", "TokenBucket take+refund",
                human_ns(t.cpu_ns).c_str());
  std::printf("C ABI versus a direct call (change_marker):\n");
  for (const char* backend : {"Trivial", "Sqlite"}) {
    const std::string p = std::string("BM_ChangeMarker_") + backend;
    compare(reporter, std::string(backend) + ": table call", p + "_Direct", p + "_CTable", "direct",
            "C table");
    compare(reporter, std::string(backend) + ": core Storage call", p + "_Direct", p + "_Storage",
            "direct", "Storage");
  }
  benchmark::Shutdown();
  return reporter.failed() ? 1 : 0;
}
