#include "format_util.hpp"
#include "report.hpp"
#include "sample_stats.hpp"

#include <algorithm>
#include <vector>

namespace conveyor::bench {
namespace {

struct Row {
  std::string name;
  std::vector<std::string> cells;  // one per backend; "" = not measured
};

class Table {
 public:
  explicit Table(const BenchReport& r) : report_(r) {}
  // Adds a row unless no backend has a value for it.
  template <typename Fn>
  void row(const std::string& name, Fn&& cell) {
    Row row{name, {}};
    bool any = false;
    for (const BackendResult& b : report_.backends) {
      row.cells.push_back(cell(b));
      any = any || !row.cells.back().empty();
    }
    if (any) rows_.push_back(std::move(row));
  }
  std::string render() const {
    size_t name_w = 0;
    for (const Row& r : rows_) name_w = std::max(name_w, r.name.size());
    std::vector<size_t> col_w;
    for (const BackendResult& b : report_.backends) col_w.push_back(b.label.size());
    for (const Row& r : rows_)
      for (size_t i = 0; i < r.cells.size(); ++i) col_w[i] = std::max(col_w[i], r.cells[i].size());
    std::string out = fmt::format("{:<{}}", "", name_w);
    for (size_t i = 0; i < col_w.size(); ++i)
      out += fmt::format("  {:>{}}", report_.backends[i].label, col_w[i]);
    out += "\n";
    for (const Row& r : rows_) {
      out += fmt::format("{:<{}}", r.name, name_w);
      for (size_t i = 0; i < r.cells.size(); ++i)
        out += fmt::format("  {:>{}}", r.cells[i].empty() ? "-" : r.cells[i], col_w[i]);
      out += "\n";
    }
    return out;
  }

 private:
  const BenchReport& report_;
  std::vector<Row> rows_;
};

const LatencyResult* latency(const BackendResult& b, const std::string& producer) {
  for (const LatencyResult& l : b.latency)
    if (l.producer == producer) return &l;
  return nullptr;
}

const RateResult* rate(const BackendResult& b, double limit) {
  for (const RateResult& r : b.rate)
    if (r.rate == limit) return &r;
  return nullptr;
}

std::string pass(bool ok) { return ok ? "PASS" : "MISS"; }

std::string steady_name(const std::string& variant) {
  return variant == "steady-held-txn" ? "steady, txn held open" : "steady";
}

}  // namespace

std::string render_table(const BenchReport& report) {
  Table t(report);
  t.row("plugin", [](const BackendResult& b) {
    return b.plugin_version.empty() ? b.plugin_name : b.plugin_name + " " + b.plugin_version;
  });
  t.row("kind", [](const BackendResult& b) { return b.plugin_kind; });
  t.row("database server settings", [](const BackendResult& b) { return b.server_settings; });
  t.row("enqueue, 1 job per call (jobs/s)", [](const BackendResult& b) {
    return b.enqueue ? grouped(b.enqueue->single_jobs_per_sec) : "";
  });
  t.row(fmt::format("enqueue, batches of {} (jobs/s)", report.enqueue_batch),
        [](const BackendResult& b) {
          return b.drain ? grouped(b.drain->median_enqueue_jobs_per_sec) : "";
        });
  t.row(
      fmt::format("drain {} noop, {} workers, batch {} (jobs/s)",
                  grouped(double(report.drain_jobs)), report.workers, report.claim_batch),
      [](const BackendResult& b) { return b.drain ? grouped(b.drain->median_jobs_per_sec) : ""; });
  t.row("  drain spread, min - max (jobs/s)", [](const BackendResult& b) {
    if (!b.drain || b.drain->runs.size() < 2) return std::string();
    return grouped(min_of(b.drain->rates())) + " - " + grouped(max_of(b.drain->rates()));
  });
  t.row("  drain, database server CPU per job (us)", [](const BackendResult& b) {
    const auto cpu = b.drain ? b.drain->median_server_cpu_us_per_job() : std::nullopt;
    return cpu ? fmt::format("{:.1f}", *cpu) : std::string();
  });
  t.row("  drain CPU, cores busy (+ database server)", [](const BackendResult& b) {
    if (!b.drain || b.drain->runs.empty()) return std::string();
    const DrainRun& r = b.drain->runs.back();
    return r.server_cpu_cores ? fmt::format("{:.2f} + {:.2f}", r.cpu_cores, *r.server_cpu_cores)
                              : fmt::format("{:.2f}", r.cpu_cores);
  });
  t.row("bare SQL claim only, 1 client (jobs/s)", [](const BackendResult& b) {
    const ReferenceResult* r = b.reference("sqlite-claim");
    return r ? grouped(r->median_jobs_per_sec) : "";
  });
  t.row("bare SQL claim + complete (jobs/s)", [](const BackendResult& b) {
    const ReferenceResult* r = b.reference("sqlite-claim-complete");
    if (!r) r = b.reference("postgres-claim-complete");
    return r ? fmt::format("{} ({} client{})", grouped(r->median_jobs_per_sec), r->clients,
                           r->clients == 1 ? "" : "s")
             : "";
  });
  t.row("  bare SQL spread, min - max (jobs/s)", [](const BackendResult& b) {
    const ReferenceResult* r = b.reference("sqlite-claim-complete");
    if (!r) r = b.reference("postgres-claim-complete");
    if (!r || r->runs_jobs_per_sec.size() < 2) return std::string();
    return grouped(min_of(r->runs_jobs_per_sec)) + " - " + grouped(max_of(r->runs_jobs_per_sec));
  });
  t.row("bare SQL claim + complete, append-only layout (jobs/s)", [](const BackendResult& b) {
    const ReferenceResult* r = b.reference("sqlite-append-only");
    const ReferenceResult* canonical = b.reference("sqlite-claim-complete");
    if (!r) return std::string();
    return canonical && canonical->median_jobs_per_sec > 0
               ? fmt::format("{} ({:.0f}% of canonical)", grouped(r->median_jobs_per_sec),
                             r->median_jobs_per_sec / canonical->median_jobs_per_sec * 100)
               : grouped(r->median_jobs_per_sec);
  });
  t.row("  bare SQL, database server CPU per job (us)", [](const BackendResult& b) {
    const ReferenceResult* r = b.reference("postgres-claim-complete");
    if (!r || r->runs_server_cpu_us_per_job.empty()) return std::string();
    return fmt::format("{:.1f}", median(r->runs_server_cpu_us_per_job));
  });
  t.row("engine drain / bare claim + complete", [](const BackendResult& b) {
    const double x = b.engine_to_reference();
    return x > 0 ? fmt::format("{:.0f}%", x * 100) : "";
  });
  t.row("engine drain / bare claim only", [](const BackendResult& b) {
    const ReferenceResult* r = b.reference("sqlite-claim");
    if (!r || !b.drain || r->median_jobs_per_sec <= 0) return std::string();
    return fmt::format("{:.0f}%", b.drain->median_jobs_per_sec / r->median_jobs_per_sec * 100);
  });
  for (const char* producer : {"in-process", "separate"}) {
    t.row(fmt::format("pickup p50/p95/p99 ms, {} producer @{}/s", producer,
                      grouped(report.latency_rate)),
          [&](const BackendResult& b) {
            const LatencyResult* l = latency(b, producer);
            return l ? fmt::format("{} / {} / {}", ms(l->p50_ms), ms(l->p95_ms), ms(l->p99_ms))
                     : "";
          });
  }
  const SlowClaimResult* slow = nullptr;
  for (const BackendResult& b : report.backends)
    if (b.slow_claim) slow = &*b.slow_claim;
  for (const bool beside : {false, true}) {
    if (!slow) break;
    t.row(fmt::format(
              "pickup p50/p99 ms, {} queues @{}/s, {}", slow->fast_queues,
              grouped(slow->offered_per_sec),
              beside ? fmt::format("beside a {:.0f} ms claim", slow->claim_delay_ms) : "alone"),
          [beside](const BackendResult& b) {
            if (!b.slow_claim) return std::string();
            const PickupSummary& p = beside ? b.slow_claim->beside_slow : b.slow_claim->alone;
            return fmt::format("{} / {}", ms(p.p50_ms), ms(p.p99_ms));
          });
  }
  for (double limit : {50.0, 5000.0}) {
    t.row(fmt::format("rate {}/s: achieved/s (error)", grouped(limit)),
          [&](const BackendResult& b) {
            const RateResult* r = rate(b, limit);
            return r ? fmt::format("{:.2f} ({:+.2f}%)", r->achieved_per_sec, r->error_pct) : "";
          });
    t.row(fmt::format("rate {}/s: worst excess over burst+rate*t", grouped(limit)),
          [&](const BackendResult& b) {
            const RateResult* r = rate(b, limit);
            return r ? fmt::format("{:.2f} {}", r->worst_excess,
                                   r->worst_excess > 0 ? "FAIL" : "ok")
                     : "";
          });
  }
  t.row(fmt::format("{} idle queues: CPU, % of one core", grouped(report.idle_queues)),
        [](const BackendResult& b) {
          if (!b.idle) return std::string();
          return b.idle->server_cpu_pct_of_core
                     ? fmt::format("{:.2f}% + server {:.2f}%", b.idle->cpu_pct_of_core,
                                   *b.idle->server_cpu_pct_of_core)
                     : fmt::format("{:.2f}%", b.idle->cpu_pct_of_core);
        });
  t.row(fmt::format("{} idle queues: threads (handler threads/cap)", grouped(report.idle_queues)),
        [](const BackendResult& b) {
          return b.idle ? fmt::format("{} ({}/{})", b.idle->threads, b.idle->worker_threads,
                                      b.idle->worker_thread_cap)
                        : "";
        });
  for (size_t shape = 0; shape < 2; ++shape) {
    const BackendResult* with = nullptr;
    for (const BackendResult& b : report.backends)
      if (b.many_queues.size() > shape) with = &b;
    if (!with) continue;
    const ManyQueuesResult& m = with->many_queues[shape];
    t.row(fmt::format("{} busy queues x {} jobs (jobs/s, / single queue)", grouped(m.queues),
                      grouped(double(m.jobs_per_queue))),
          [shape](const BackendResult& b) {
            if (b.many_queues.size() <= shape) return std::string();
            const double v = b.many_queues[shape].median_jobs_per_sec;
            if (!b.drain || b.drain->median_jobs_per_sec <= 0) return grouped(v);
            return fmt::format("{} ({:.0f}%)", grouped(v), v / b.drain->median_jobs_per_sec * 100);
          });
  }
  t.row("PostgreSQL: WAL bytes per job", [](const BackendResult& b) {
    return b.drain && b.drain->postgres ? grouped(b.drain->postgres->wal_bytes_per_job) : "";
  });
  t.row("PostgreSQL: dead tuples made per job", [](const BackendResult& b) {
    return b.drain && b.drain->postgres
               ? fmt::format("{:.2f}", b.drain->postgres->dead_tuples_per_job)
               : "";
  });
  t.row("PostgreSQL: dead tuples peak / after drain", [](const BackendResult& b) {
    return b.drain && b.drain->postgres
               ? fmt::format("{} / {}", grouped(double(b.drain->postgres->dead_tuples_peak)),
                             grouped(double(b.drain->postgres->dead_tuples_after)))
               : "";
  });
  for (const char* variant : {"steady", "steady-held-txn"}) {
    const std::string name = steady_name(variant);
    auto cell = [variant](auto&& format) {
      return [variant, format](const BackendResult& b) {
        const SteadyResult* s = b.steady_run(variant);
        return s ? format(*s) : std::string();
      };
    };
    t.row(fmt::format("{}: {} noop @{}/s (jobs/s)", name, grouped(double(report.steady_jobs)),
                      grouped(report.steady_rate)),
          cell([](const SteadyResult& s) { return grouped(s.jobs_per_sec); }));
    t.row("  pickup p50 / p99 ms", cell([](const SteadyResult& s) {
            return fmt::format("{} / {}", ms(s.pickup.p50_ms), ms(s.pickup.p99_ms));
          }));
    t.row("  n_dead_tup peak / final", cell([](const SteadyResult& s) {
            return s.postgres
                       ? fmt::format("{} / {}", grouped(double(s.postgres->dead_tuples_peak)),
                                     grouped(double(s.postgres->dead_tuples_final)))
                       : std::string();
          }));
    t.row("  relation size before -> after", cell([](const SteadyResult& s) {
            return s.postgres
                       ? fmt::format("{} -> {}", bytes(double(s.postgres->relation_bytes_before)),
                                     bytes(double(s.postgres->relation_bytes_after)))
                       : std::string();
          }));
    t.row("  (auto)vacuums during the run", cell([](const SteadyResult& s) {
            return s.postgres ? std::to_string(s.postgres->vacuums) : std::string();
          }));
  }
  // Job keys: labelled with the sizes the first backend that ran them used.
  const BackendResult* with_noisy = nullptr;
  for (const BackendResult& b : report.backends)
    if (b.keys_noisy && !with_noisy) with_noisy = &b;
  if (with_noisy) {
    const KeysNoisyResult& n = *with_noisy->keys_noisy;
    for (const bool fifo : {false, true})
      t.row(fmt::format("keys, noisy: {} small keys' pickup p50/p99/max ms, {}",
                        grouped(n.small_keys), fifo ? "fifo" : "fair"),
            [fifo](const BackendResult& b) {
              if (!b.keys_noisy) return std::string();
              const PickupSummary& p = fifo ? b.keys_noisy->fifo : b.keys_noisy->fair;
              return fmt::format("{} / {} / {}", ms(p.p50_ms), ms(p.p99_ms), ms(p.max_ms));
            });
    t.row(fmt::format("keys, noisy: key A alone, {} workers x {:.0f} ms (jobs/s)", n.workers,
                      n.handler_ms),
          [](const BackendResult& b) {
            return b.keys_noisy ? grouped(b.keys_noisy->big_alone_jobs_per_sec) : "";
          });
  }
  for (const bool queue_limited : {false, true}) {
    const KeysAccuracyRun* shape = nullptr;
    auto run_of = [queue_limited](const BackendResult& b) -> const KeysAccuracyRun* {
      for (const KeysAccuracyRun& k : b.keys_accuracy)
        if ((k.queue_rate > 0) == queue_limited) return &k;
      return nullptr;
    };
    for (const BackendResult& b : report.backends)
      if (!shape) shape = run_of(b);
    if (!shape) continue;
    const std::string name =
        queue_limited ? fmt::format("keys, {} keys @{}/s + queue {}/s", grouped(shape->keys),
                                    shape->key_rate, grouped(shape->queue_rate))
                      : fmt::format("keys, {} keys @{}/s burst {}", grouped(shape->keys),
                                    shape->key_rate, shape->key_burst);
    t.row(name + (queue_limited ? ": queue jobs/s (excess)" : ": jobs/s in window"),
          [&](const BackendResult& b) {
            const KeysAccuracyRun* k = run_of(b);
            if (!k) return std::string();
            return queue_limited
                       ? fmt::format("{:.1f} ({:.2f} {})", k->jobs_per_sec, k->queue_worst_excess,
                                     k->queue_worst_excess > 0 ? "FAIL" : "ok")
                       : fmt::format("{:.1f}", k->jobs_per_sec);
          });
    t.row("  worst key excess, from its first start / engine start", [&](const BackendResult& b) {
      const KeysAccuracyRun* k = run_of(b);
      if (!k) return std::string();
      return fmt::format("{:.3f} / {:.2f} {}", k->worst_key_excess, k->worst_key_excess_from_start,
                         k->worst_key_excess_from_start > 0 ? "FAIL" : "ok");
    });
    t.row("  jobs per key in window, min/median/max", [&](const BackendResult& b) {
      const KeysAccuracyRun* k = run_of(b);
      if (!k) return std::string();
      return fmt::format("{:.0f} / {:.0f} / {:.0f} ({:.1f} s)", k->key_count_min,
                         k->key_count_median, k->key_count_max, k->window_to_s - k->window_from_s);
    });
  }
  const BackendResult* with_many = nullptr;
  for (const BackendResult& b : report.backends)
    if (b.keys_many && !with_many) with_many = &b;
  if (with_many) {
    t.row(fmt::format("keys, {} noop: {} keys x {} / no key (jobs/s)",
                      grouped(double(with_many->keys_many->jobs)),
                      grouped(with_many->keys_many->keys), with_many->keys_many->jobs_per_key),
          [](const BackendResult& b) {
            if (!b.keys_many) return std::string();
            const KeysManyResult& m = *b.keys_many;
            return fmt::format("{} / {} ({:.0f}%)", grouped(m.keyed_jobs_per_sec),
                               grouped(m.unkeyed_jobs_per_sec), m.ratio() * 100);
          });
    t.row("  the same jobs, no key, fifo (jobs/s)", [](const BackendResult& b) {
      return b.keys_many ? grouped(b.keys_many->unkeyed_fifo_jobs_per_sec) : std::string();
    });
  }
  const BackendResult* with_idle = nullptr;
  for (const BackendResult& b : report.backends)
    if (b.keys_idle && !with_idle) with_idle = &b;
  if (with_idle) {
    const std::string name =
        fmt::format("keys, {} keys x 1 job", grouped(double(with_idle->keys_idle->keys)));
    for (const bool keyed : {true, false}) {
      auto run = [keyed](const BackendResult& b) -> const KeysIdleRun* {
        if (!b.keys_idle) return nullptr;
        return keyed ? &b.keys_idle->keyed : &b.keys_idle->unkeyed;
      };
      t.row(keyed ? name + ": drain s; RSS before/drained/purged" : "  the same jobs with no key",
            [run](const BackendResult& b) {
              const KeysIdleRun* k = run(b);
              if (!k) return std::string();
              constexpr double kMiB = 1024.0 * 1024.0;
              return fmt::format("{:.1f} s; {:.1f} / {:.1f} / {:.1f} MiB", k->drain_seconds,
                                 double(k->rss_before) / kMiB, double(k->rss_drained) / kMiB,
                                 double(k->rss_purged) / kMiB);
            });
    }
    t.row("  storage before/drained/purged (keyed)", [](const BackendResult& b) {
      if (!b.keys_idle || b.keys_idle->storage_measure.empty()) return std::string();
      const KeysIdleRun& k = b.keys_idle->keyed;
      std::string out =
          fmt::format("{} / {} / {}", bytes(double(k.storage_before)),
                      bytes(double(k.storage_drained)), bytes(double(k.storage_purged)));
      if (k.sqlite_used_before)
        out += fmt::format("; in use {} / {} / {}", bytes(double(*k.sqlite_used_before)),
                           bytes(double(*k.sqlite_used_drained)),
                           bytes(double(*k.sqlite_used_purged)));
      return out;
    });
  }
  t.row("errors", [](const BackendResult& b) {
    return b.errors.empty() ? std::string() : std::to_string(b.errors.size());
  });
  std::string out = t.render();
  for (const BackendResult& b : report.backends)
    for (const std::string& e : b.errors) out += fmt::format("error: {}: {}\n", b.label, e);
  return out;
}

std::string render_targets(const BenchReport& report) {
  std::string out;
  auto line = [&](const std::string& what, const std::string& value, bool ok) {
    out += fmt::format("  {:<62} {:>22}  {}\n", what, value, pass(ok));
  };
  const BackendResult* canonical_pg = nullptr;
  for (const BackendResult& b : report.backends) {
    const bool pg = b.plugin_name.find("postgres") != std::string::npos;
    // A PostgreSQL figure counts towards a target only on the default
    // durability; an fsync=off run is shown, labelled, never passed.
    const bool fsync_off = b.server_settings.find("fsync=off") != std::string::npos;
    const std::string label = fsync_off ? b.label + " (fsync=off)" : b.label;
    if (b.plugin_name == "sqlite" && b.engine_to_reference() > 0)
      line(fmt::format("{}: SQLite drain >= 1.2x bare claim + complete", b.label),
           fmt::format("{:.2f}x", b.engine_to_reference()), b.engine_to_reference() >= 1.2);
    if (pg && b.plugin_kind == "canonical" && b.engine_to_reference() > 0) {
      canonical_pg = &b;
      line(fmt::format("{}: PostgreSQL canonical drain >= 90% of bare SQL", label),
           fmt::format("{:.0f}%", b.engine_to_reference() * 100),
           !fsync_off && b.engine_to_reference() >= 0.9);
    }
    if (pg)
      for (const LatencyResult& l : b.latency)
        line(fmt::format("{}: pickup p50 <= 2 ms, p99 <= 10 ms ({} producer)", b.label, l.producer),
             fmt::format("{} / {} ms", ms(l.p50_ms), ms(l.p99_ms)),
             l.p50_ms <= 2 && l.p99_ms <= 10);
    for (const RateResult& r : b.rate) {
      line(
          fmt::format("{}: {}/s burst {}: achieved within 0.5%", b.label, grouped(r.rate), r.burst),
          fmt::format("{:+.3f}%", r.error_pct),
          std::abs(r.error_pct) <= 0.5 && r.started > r.burst);
      line(fmt::format("{}: {}/s burst {}: never above burst + rate*t", b.label, grouped(r.rate),
                       r.burst),
           fmt::format("excess {:.2f}", r.worst_excess), r.worst_excess <= 0);
    }
    for (const ManyQueuesResult& m : b.many_queues)
      if (b.drain && b.drain->median_jobs_per_sec > 0) {
        const double x = m.median_jobs_per_sec / b.drain->median_jobs_per_sec;
        line(fmt::format("{}: {} busy queues >= 90% of the single-queue drain", label,
                         grouped(m.queues)),
             fmt::format("{:.0f}%", x * 100), x >= 0.9);
      }
    if (b.slow_claim) {
      // The other queues' dispatch must not wait for one queue's slow claim.
      const SlowClaimResult& s = *b.slow_claim;
      line(fmt::format("{}: pickup p99 beside a {:.0f} ms claim <= alone + 10 ms", b.label,
                       s.claim_delay_ms),
           fmt::format("{} vs {} ms", ms(s.beside_slow.p99_ms), ms(s.alone.p99_ms)),
           s.beside_slow.p99_ms <= s.alone.p99_ms + 10);
    }
    if (b.keys_many && b.keys_many->unkeyed_jobs_per_sec > 0)
      line(fmt::format("{}: {} keys drain >= 90% of the same jobs with no key", label,
                       grouped(b.keys_many->keys)),
           fmt::format("{:.0f}%", b.keys_many->ratio() * 100), b.keys_many->ratio() >= 0.9);
    for (const KeysAccuracyRun& k : b.keys_accuracy)
      line(fmt::format("{}: {} keys @{}/s{}: no key above burst + rate*t", b.label, grouped(k.keys),
                       k.key_rate,
                       k.queue_rate > 0 ? fmt::format(" + queue {}/s", grouped(k.queue_rate)) : ""),
           fmt::format("excess {:.2f}",
                       std::max(k.worst_key_excess_from_start, k.queue_worst_excess)),
           k.worst_key_excess_from_start <= 0 && k.queue_worst_excess <= 0);
    if (b.idle) {
      line(fmt::format("{}: {} idle queues < 2% of one core", b.label, grouped(b.idle->queues)),
           fmt::format("{:.2f}%", b.idle->cpu_pct_of_core), b.idle->cpu_pct_of_core < 2);
      if (b.idle->server_cpu_pct_of_core) {
        const double total = b.idle->cpu_pct_of_core + *b.idle->server_cpu_pct_of_core;
        line(fmt::format("{}: ... counting the database server too", b.label),
             fmt::format("{:.2f}%", total), total < 2);
      }
    }
  }
  if (canonical_pg)
    for (const BackendResult& b : report.backends)
      if (b.plugin_kind == "queue-storage" && b.drain && canonical_pg->drain)
        line(fmt::format("{}: queue-storage drain >= canonical ({})", b.label, canonical_pg->label),
             fmt::format("{:.0f}%", b.drain->median_jobs_per_sec /
                                        canonical_pg->drain->median_jobs_per_sec * 100),
             b.drain->median_jobs_per_sec >= canonical_pg->drain->median_jobs_per_sec);
  // Queue-storage against the canonical PostgreSQL backend without the
  // reference workload (above, the drain line needs it): drain and steady.
  const BackendResult* canonical_steady = nullptr;
  for (const BackendResult& b : report.backends)
    if (b.plugin_kind == "canonical" && b.plugin_name.find("postgres") != std::string::npos &&
        (!b.steady.empty() || b.drain) && !canonical_steady)
      canonical_steady = &b;
  for (const BackendResult& b : report.backends) {
    if (b.plugin_kind != "queue-storage") continue;
    if (!canonical_pg && canonical_steady && canonical_steady->drain && b.drain)
      line(fmt::format("{}: queue-storage drain >= canonical ({})", b.label,
                       canonical_steady->label),
           fmt::format("{:.0f}%", b.drain->median_jobs_per_sec /
                                      canonical_steady->drain->median_jobs_per_sec * 100),
           b.drain->median_jobs_per_sec >= canonical_steady->drain->median_jobs_per_sec);
    for (const SteadyResult& s : b.steady) {
      if (s.postgres)
        line(
            fmt::format("{}: {}: n_dead_tup <= 1,000 at any time", b.label, steady_name(s.variant)),
            fmt::format("peak {}", grouped(double(s.postgres->dead_tuples_peak))),
            s.postgres->dead_tuples_peak <= 1000);
      const SteadyResult* c = canonical_steady ? canonical_steady->steady_run(s.variant) : nullptr;
      // Both backends are offered the same load: a backend that keeps up
      // completes at the offered rate, and the last jobs' pickup latency
      // alone moves the figure by a fraction of a percent, hence 1%.
      if (c && c->jobs_per_sec > 0)
        line(fmt::format("{}: {}: jobs/s >= canonical ({}), within 1%", b.label,
                         steady_name(s.variant), canonical_steady->label),
             fmt::format("{:.1f}%", s.jobs_per_sec / c->jobs_per_sec * 100),
             s.jobs_per_sec >= 0.99 * c->jobs_per_sec);
    }
  }
  if (out.empty()) return "";
  return "Performance targets measured in this run:\n" + out +
         "  (the limiter's cost on an unlimited queue is measured by conveyor_microbench)\n";
}

}  // namespace conveyor::bench
