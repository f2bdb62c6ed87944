// A hand-written SVG: horizontal bar charts (drain throughput against the
// bare-SQL references; pickup latency on a log scale) and the rate-accuracy,
// idle and PostgreSQL figures as text. No scripts, no external fonts.
#include "format_util.hpp"
#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace conveyor::bench {
namespace {

constexpr int kWidth = 960;
constexpr int kLabelW = 300;  // left column
constexpr int kBarW = 500;    // longest bar
constexpr int kRowH = 22;

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

struct Bar {
  std::string label;
  double value;
  std::string text;
  std::string color;
};

class Svg {
 public:
  void title(const std::string& t, int size = 16) {
    y_ += size + 10;
    body_ += fmt::format(R"(<text x="16" y="{}" font-size="{}" font-weight="bold">{}</text>)", y_,
                         size, esc(t)) +
             "\n";
    y_ += 6;
  }
  void text(const std::string& t, int x = 16, const std::string& color = "#222") {
    y_ += 18;
    body_ += fmt::format(R"(<text x="{}" y="{}" fill="{}">{}</text>)", x, y_, color, esc(t)) + "\n";
  }
  // Linear bars scaled to the largest value.
  void bars(const std::vector<Bar>& bars) {
    double max = 0;
    for (const Bar& b : bars) max = std::max(max, b.value);
    for (const Bar& b : bars) {
      const double w = max > 0 ? b.value / max * kBarW : 0;
      row(b, w);
    }
    y_ += 6;
  }
  // Log-scale bars from lo to hi (values clamped), with decade gridlines.
  void log_bars(const std::vector<Bar>& bars, double lo, double hi, const std::string& unit) {
    const double span = std::log10(hi / lo);
    auto x_of = [&](double v) {
      return std::clamp(std::log10(std::max(v, lo) / lo) / span, 0.0, 1.0) * kBarW;
    };
    const int top = y_ + 4;
    const int height = static_cast<int>(bars.size()) * kRowH;
    for (double d = lo; d <= hi * 1.0001; d *= 10) {
      const double x = kLabelW + x_of(d);
      body_ +=
          fmt::format(
              R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="#ddd"/><text x="{:.1f}" y="{}" font-size="10" fill="#888" text-anchor="middle">{} {}</text>)",
              x, top, x, top + height, x, top + height + 12,
              d < 1 ? fmt::format("{:g}", d) : grouped(d), unit) +
          "\n";
    }
    for (const Bar& b : bars) row(b, x_of(b.value));
    y_ += 20;
  }
  // One polyline per series over a shared x range [0, x_max] and y range
  // [0, the largest y], axis labels at both ends, the legend below.
  struct Series {
    std::string label;
    std::string color;
    std::vector<std::pair<double, double>> points;
  };
  void line_chart(const std::vector<Series>& series, double x_max, const std::string& x_unit) {
    constexpr int kH = 200, kLeft = 90, kW = 760;
    double y_max = 1;
    for (const Series& s : series)
      for (const auto& [x, y] : s.points) y_max = std::max(y_max, y);
    const int top = y_ + 10;
    auto px = [&](double x) { return kLeft + (x_max > 0 ? x / x_max : 0) * kW; };
    auto py = [&](double y) { return top + kH - y / y_max * kH; };
    body_ += fmt::format(
        R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#bbb"/>)"
        R"(<text x="{}" y="{}" text-anchor="end" font-size="10" fill="#666">{}</text>)"
        R"(<text x="{}" y="{}" text-anchor="end" font-size="10" fill="#666">0</text>)"
        R"(<text x="{}" y="{}" font-size="10" fill="#666">0</text>)"
        R"(<text x="{}" y="{}" text-anchor="end" font-size="10" fill="#666">{} {}</text>)",
        kLeft, top, kW, kH, kLeft - 4, top + 10, grouped(y_max), kLeft - 4, top + kH, kLeft,
        top + kH + 12, kLeft + kW, top + kH + 12, grouped(x_max), x_unit);
    body_ += "\n";
    int legend_y = top + kH + 30;
    for (const Series& s : series) {
      std::string pts;
      for (const auto& [x, y] : s.points) pts += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
      body_ += fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>)"
                           R"(<rect x="{}" y="{}" width="14" height="3" fill="{}"/>)"
                           R"(<text x="{}" y="{}" font-size="11">{}</text>)",
                           pts, s.color, kLeft, legend_y - 4, s.color, kLeft + 20, legend_y,
                           esc(s.label)) +
               "\n";
      legend_y += 16;
    }
    y_ = legend_y - 10;
  }
  void gap(int h) { y_ += h; }
  std::string finish(const std::string& heading) const {
    return fmt::format(
               R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" viewBox="0 0 {0} {1}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">)",
               kWidth, y_ + 20) +
           "\n<title>" + esc(heading) + "</title>\n" +
           fmt::format(R"(<rect width="{}" height="{}" fill="#fff"/>)", kWidth, y_ + 20) + "\n" +
           body_ + "</svg>\n";
  }

 private:
  void row(const Bar& b, double w) {
    const int top = y_ + 4;
    body_ +=
        fmt::format(
            R"(<text x="{}" y="{}" text-anchor="end">{}</text><rect x="{}" y="{}" width="{:.1f}" height="{}" fill="{}"/><text x="{:.1f}" y="{}">{}</text>)",
            kLabelW - 8, top + 14, esc(b.label), kLabelW, top + 3, std::max(w, 1.0), kRowH - 6,
            b.color, kLabelW + std::max(w, 1.0) + 6, top + 14, esc(b.text)) +
        "\n";
    y_ += kRowH;
  }

  int y_ = 0;
  std::string body_;
};

std::string steady_label(const BackendResult& b, const SteadyResult& s) {
  return b.label + (s.held_transaction ? ", txn held open" : ", steady");
}

// Throughput and pickup latency bars, and n_dead_tup against jobs completed:
// the picture of bounded against growing dead tuples.
void render_steady(Svg& svg, const BenchReport& r) {
  static const char* kColors[] = {"#2b6cb0", "#e53e3e", "#38a169", "#d69e2e", "#805ad5", "#dd6b20"};
  std::vector<Bar> rates, latency;
  std::vector<Svg::Series> dead;
  double hi = 1;
  for (const BackendResult& b : r.backends)
    for (const SteadyResult& s : b.steady) {
      const std::string who = steady_label(b, s);
      rates.push_back({who, s.jobs_per_sec, grouped(s.jobs_per_sec) + " jobs/s", "#2b6cb0"});
      latency.push_back({who + " p50", s.pickup.p50_ms, ms(s.pickup.p50_ms) + " ms", "#38a169"});
      latency.push_back({who + " p99", s.pickup.p99_ms, ms(s.pickup.p99_ms) + " ms", "#e53e3e"});
      hi = std::max(hi, s.pickup.p99_ms);
      if (s.postgres) {
        Svg::Series series{
            fmt::format("{}: peak {}, final {}", who, grouped(double(s.postgres->dead_tuples_peak)),
                        grouped(double(s.postgres->dead_tuples_final))),
            kColors[dead.size() % 6],
            {}};
        for (const DeadTupleSample& d : s.postgres->samples)
          series.points.emplace_back(static_cast<double>(d.completed),
                                     static_cast<double>(d.dead_tuples));
        dead.push_back(std::move(series));
      }
    }
  if (rates.empty()) return;
  svg.title(fmt::format("Steady producer: {} noop jobs offered at {}/s (a batch every {} ms)",
                        grouped(double(r.steady_jobs)), grouped(r.steady_rate), r.steady_tick_ms));
  svg.bars(rates);
  svg.title("Steady producer: pickup latency, enqueue to handler start (log scale)", 14);
  svg.log_bars(latency, 0.01, std::pow(10.0, std::ceil(std::log10(hi))), "ms");
  if (!dead.empty()) {
    svg.title("Steady producer: n_dead_tup (sum over the backend's tables) by jobs completed", 14);
    svg.line_chart(dead, double(r.steady_jobs), "jobs completed");
    for (const BackendResult& b : r.backends)
      for (const SteadyResult& s : b.steady)
        if (s.postgres)
          svg.text(fmt::format("{}: relation size {} -> {}, {} (auto)vacuum(s)", steady_label(b, s),
                               bytes(double(s.postgres->relation_bytes_before)),
                               bytes(double(s.postgres->relation_bytes_after)),
                               s.postgres->vacuums));
  }
}

}  // namespace

std::string render_svg(const BenchReport& r) {
  Svg svg;
  const std::string heading = fmt::format("conveyor-bench ({} mode), {}", r.mode, r.started_at);
  svg.title(heading, 18);
  svg.text(fmt::format("{}, {} cores, {}", r.machine.cpu, r.machine.cores, r.machine.kernel), 16,
           "#555");

  std::vector<Bar> drain;
  for (const BackendResult& b : r.backends) {
    if (b.drain)
      drain.push_back(
          {b.label + ": engine drain", b.drain->median_jobs_per_sec,
           grouped(b.drain->median_jobs_per_sec) +
               (b.engine_to_reference() > 0 ? fmt::format(" ({:.0f}% of bare claim+complete)",
                                                          b.engine_to_reference() * 100)
                                            : ""),
           "#2b6cb0"});
    for (const ManyQueuesResult& m : b.many_queues)
      drain.push_back(
          {fmt::format("{}: {} busy queues", b.label, grouped(m.queues)), m.median_jobs_per_sec,
           grouped(m.median_jobs_per_sec) +
               (b.drain && b.drain->median_jobs_per_sec > 0
                    ? fmt::format(" ({:.0f}% of one queue's drain)",
                                  m.median_jobs_per_sec / b.drain->median_jobs_per_sec * 100)
                    : ""),
           "#6b9bd1"});
    for (const ReferenceResult& ref : b.references) {
      const bool completes = ref.name.find("complete") != std::string::npos;
      const bool append_only = ref.name.find("append-only") != std::string::npos;
      drain.push_back({fmt::format("{}: bare SQL {}", b.label,
                                   append_only ? "append-only layout"
                                   : completes ? fmt::format("claim+complete, {} cl.", ref.clients)
                                               : "claim only"),
                       ref.median_jobs_per_sec, grouped(ref.median_jobs_per_sec),
                       completes || append_only ? "#8a9bb0" : "#c3ccd8"});
    }
  }
  if (!drain.empty()) {
    svg.title(
        fmt::format("Drain throughput, jobs/s ({} noop jobs, {} workers, claim batch {}; "
                    "median of {})",
                    grouped(double(r.drain_jobs)), r.workers, r.claim_batch, r.repeat));
    svg.bars(drain);
  }

  std::vector<Bar> latency;
  double hi = 1;
  for (const BackendResult& b : r.backends)
    for (const LatencyResult& l : b.latency) {
      const std::string who = b.label + ", " + l.producer;
      latency.push_back({who + " p50", l.p50_ms, ms(l.p50_ms) + " ms", "#38a169"});
      latency.push_back({who + " p95", l.p95_ms, ms(l.p95_ms) + " ms", "#d69e2e"});
      latency.push_back({who + " p99", l.p99_ms, ms(l.p99_ms) + " ms", "#e53e3e"});
      hi = std::max(hi, l.p99_ms);
    }
  for (const BackendResult& b : r.backends) {
    if (!b.slow_claim) continue;
    const SlowClaimResult& s = *b.slow_claim;
    for (const bool beside : {false, true}) {
      const PickupSummary& p = beside ? s.beside_slow : s.alone;
      const std::string who =
          fmt::format("{}, {} queues {}", b.label, s.fast_queues,
                      beside ? fmt::format("beside a {:.0f} ms claim", s.claim_delay_ms) : "alone");
      latency.push_back({who + " p50", p.p50_ms, ms(p.p50_ms) + " ms", "#38a169"});
      latency.push_back({who + " p99", p.p99_ms, ms(p.p99_ms) + " ms", "#e53e3e"});
      hi = std::max(hi, p.p99_ms);
    }
  }
  if (!latency.empty()) {
    svg.title(fmt::format("Pickup latency, enqueue to handler start (offered {}/s; log scale)",
                          grouped(r.latency_rate)));
    svg.log_bars(latency, 0.01, std::pow(10.0, std::ceil(std::log10(hi))), "ms");
  }

  bool any_rate = false;
  for (const BackendResult& b : r.backends) any_rate = any_rate || !b.rate.empty();
  if (any_rate) {
    svg.title(
        fmt::format("Rate accuracy over {:.0f} s, deep backlog (bound: burst + rate * t "
                    "from engine start)",
                    r.rate_seconds));
    for (const BackendResult& b : r.backends)
      for (const RateResult& x : b.rate)
        svg.text(fmt::format("{}: {}/s burst {}: {} started, steady rate {:.3f}/s ({:+.3f}%), "
                             "worst excess {:.2f} {}",
                             b.label, grouped(x.rate), x.burst, grouped(double(x.started)),
                             x.achieved_per_sec, x.error_pct, x.worst_excess,
                             x.worst_excess > 0 ? "- EXCEEDED" : "- within bound"),
                 16, x.worst_excess > 0 ? "#c53030" : "#276749");
  }

  render_steady(svg, r);

  bool any_other = false;
  for (const BackendResult& b : r.backends)
    any_other = any_other || b.idle || (b.drain && b.drain->postgres) || !b.errors.empty();
  if (any_other) {
    svg.title("Idle cost and storage cost");
    for (const BackendResult& b : r.backends) {
      if (b.idle)
        svg.text(fmt::format(
            "{}: {} idle queues: {:.2f}% of one core{}; {} threads ({} handler "
            "threads, cap {})",
            b.label, grouped(b.idle->queues), b.idle->cpu_pct_of_core,
            b.idle->server_cpu_pct_of_core
                ? fmt::format(" (+ {:.2f}% database server)", *b.idle->server_cpu_pct_of_core)
                : "",
            b.idle->threads, b.idle->worker_threads, b.idle->worker_thread_cap));
      if (b.drain && b.drain->postgres)
        svg.text(
            fmt::format("{}: {} WAL bytes/job, {:.2f} dead tuples made/job, peak {} dead "
                        "tuples",
                        b.label, grouped(b.drain->postgres->wal_bytes_per_job),
                        b.drain->postgres->dead_tuples_per_job,
                        grouped(double(b.drain->postgres->dead_tuples_peak))));
      for (const std::string& e : b.errors)
        svg.text(fmt::format("{}: error: {}", b.label, e.substr(0, 130)), 16, "#c53030");
    }
  }
  return svg.finish(heading);
}

}  // namespace conveyor::bench
