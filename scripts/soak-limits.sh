#!/usr/bin/env bash
# Soak with rate limits: 1,000,000 jobs through one engine process, three
# rate-limited queues (50/s, 500/s, 5,000/s) beside an unlimited one, on
# SQLite or PostgreSQL. Memory must stay flat, every limit must be kept to
# within 0.5%, and no job may be lost. Not part of CI (it takes minutes).
#
#   SOAK_PLUGIN=sqlite|postgres|postgres-queue scripts/soak-limits.sh [DSN]
#
# SOAK_PLUGIN defaults to sqlite (a database in a temporary directory). For
# the PostgreSQL plugins, without DSN (or $CONVEYOR_SOAK_PG_DSN) it starts a
# throwaway cluster (scripts/pg-cluster.sh, port $SOAK_PG_PORT, default 5468)
# and stops it at the end; it works in a fresh schema, dropped at the end.
# That cluster runs with fsync=off like the tests' unless PG_CLUSTER_SETTINGS=default
# (PostgreSQL's own settings, fsync on: the figures of record).
#
# The load average is printed at the start and the end: the dispatcher claims
# one batch at a time, so a saturated machine slows every claim, and a 5,000/s
# queue needs 50 claims a second beside the unlimited queue's.
#
# The engine process is tests/soak_worker (BUILD_DIR/bin/soak_worker): the
# engine with a "noop" job kind that appends "<id> <queue> <steady ns>" to a
# file when it starts, so rates are measured from job start times (after a
# first line "0 engine-start <ns>": no limit begins before it). (The
# serve binary has no such kind; scripts/soak.sh soaks `conveyor serve`.)
#
# Workload (environment, defaults): queues rate50 (50/s, burst 10),
# rate500 (500/s, burst 50) and rate5000 (5,000/s, burst 500), each with a
# backlog of rate * LIMIT_SECONDS (60) jobs, so each stays backlogged for
# about LIMIT_SECONDS; queue bulk (no limit) gets the rest of TOTAL_JOBS
# (1,000,000). Every queue has max_workers WORKERS (100: a claim may take
# a whole claim_batch_max of 100). All jobs are enqueued before the engine
# starts.
#
# Every SAMPLE_S (2) seconds it records the engine process's VmRSS and the
# number of jobs started in $OUT_DIR/soak-limits.csv (default soak-out/).
# Exit 1 when:
#   - RSS anywhere from 10% of the jobs started to the end exceeds RSS at 10%
#     by more than RSS_MARGIN_PCT (10) percent;
#   - a limited queue's achieved rate, (n - 1) / (t_n - t_1) over its job
#     starts from 1 s after its first start (past the initial burst) to its
#     last (the end of its backlog), is more than RATE_TOL_PCT (0.5) percent
#     off its limit; or its starts ever got ahead of burst + rate * t (t from
#     the engine's start);
#   - a job was lost (not started, or not completed) or started twice, or the
#     engine died, or the run took longer than MAX_S (1800) s.
# Exit 2 when it cannot run (no build, no cluster).
#
# BUILD_DIR (default build) must hold bin/conveyor, bin/soak_worker and the
# plugin; -DCMAKE_BUILD_TYPE=Release gives the figures of record.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

build=${BUILD_DIR:-build}
plugin=${SOAK_PLUGIN:-sqlite}
total=${TOTAL_JOBS:-1000000}
limit_s=${LIMIT_SECONDS:-60}
workers=${WORKERS:-100}
sample_s=${SAMPLE_S:-2}
margin_pct=${RSS_MARGIN_PCT:-10}
tol_pct=${RATE_TOL_PCT:-0.5}
max_s=${MAX_S:-1800}
out=${OUT_DIR:-soak-out}
# name rate burst
limits=("rate50 50 10" "rate500 500 50" "rate5000 5000 500")

[[ $build == /* ]] || build="$root/$build"
conveyor="$build/bin/conveyor"
worker_bin="$build/bin/soak_worker"
plugin_dir="$build/lib/conveyor/plugins"
if [[ ! -x $conveyor || ! -x $worker_bin || ! -f $plugin_dir/libconveyor-$plugin.so ]]; then
  echo "soak-limits: build conveyor, soak_worker and the $plugin plugin in $build first, e.g." >&2
  echo "  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release &&" \
    "ninja -C $build conveyor soak_worker conveyor_plugin_${plugin//-/_}" >&2
  exit 2
fi

limited_total=0
for l in "${limits[@]}"; do
  read -r _ rate _ <<<"$l"
  limited_total=$((limited_total + rate * limit_s))
done
bulk_jobs=$((total - limited_total))
if ((bulk_jobs < 0)); then
  echo "soak-limits: TOTAL_JOBS=$total is less than the limited queues' $limited_total" >&2
  exit 2
fi

mkdir -p "$out"
work=$(mktemp -d /tmp/conveyor-soak-limits.XXXXXX)
chmod 755 "$work"  # the postgres user reaches its cluster inside
schema="soak_limits_$(date +%s)"
dsn=""
# shellcheck source=scripts/soak-common.sh
source "$root/scripts/soak-common.sh"
trap soak_cleanup EXIT

config="$work/conveyor.toml"
if [[ $plugin == sqlite ]]; then
  cat >"$config" <<EOF
[storage]
plugin = "sqlite"
plugin_dir = "$plugin_dir"
[storage.options]
path = "$work/soak.db"
EOF
  echo "soak-limits: SQLite at $work/soak.db, build $build"
else
  dsn=${1:-${CONVEYOR_SOAK_PG_DSN:-}}
  soak_start_cluster soak-limits "${SOAK_PG_PORT:-5468}"
  cat >"$config" <<EOF
[storage]
plugin = "$plugin"
plugin_dir = "$plugin_dir"
[storage.options]
dsn = "$dsn"
schema = "$schema"
EOF
  echo "soak-limits: PostgreSQL at $dsn, schema $schema, plugin $plugin, build $build"
fi
cat >>"$config" <<EOF
[queues.bulk]
max_workers = $workers
EOF
for l in "${limits[@]}"; do
  read -r name rate burst <<<"$l"
  printf '[queues.%s]\nrate_limit = { rate = %s, burst = %s }\nmax_workers = %s\n' \
    "$name" "$rate" "$burst" "$workers" >>"$config"
done
cv() { "$conveyor" --config "$config" "$@"; }

declare -A enqueued
enqueue() {  # queue count
  enqueued[$1]=$2
  soak_enqueue "$1" "$2"
}
t0=$(date +%s.%N)
for l in "${limits[@]}"; do
  read -r name rate _ <<<"$l"
  enqueue "$name" $((rate * limit_s))
done
enqueue bulk "$bulk_jobs"
t1=$(date +%s.%N)
echo "soak-limits: enqueued $total jobs (rate50 ${enqueued[rate50]}, rate500 ${enqueued[rate500]}," \
  "rate5000 ${enqueued[rate5000]}, bulk $bulk_jobs) in" \
  "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s"

echo "soak-limits: load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
starts="$work/starts.txt"
: >"$starts"
CONVEYOR_LOG_LEVEL=${CONVEYOR_LOG_LEVEL:-warn} "$worker_bin" "$config" "$starts" 2>"$out/soak-limits-worker.log" &
soak_pid=$!
start=$(date +%s.%N)

csv="$out/soak-limits.csv"
echo "elapsed_s,rss_kb,started" >"$csv"
rss10="" t_rss10="" rss_max=0 t_rss_max="" rss_end=""
while :; do
  sleep "$sample_s"
  if ! kill -0 "$soak_pid" 2>/dev/null; then
    echo "soak-limits: FAIL: the engine process died; its log:" >&2
    tail -20 "$out/soak-limits-worker.log" >&2
    exit 1
  fi
  rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$soak_pid/status")
  started=$(($(wc -l <"$starts") - 1))
  elapsed=$(awk -v s="$start" -v n="$(date +%s.%N)" 'BEGIN{printf "%.2f", n - s}')
  echo "$elapsed,$rss,$started" >>"$csv"
  if [[ -z $rss10 ]] && ((started * 10 >= total)); then rss10=$rss t_rss10=$elapsed; fi
  if [[ -n $rss10 ]] && ((rss > rss_max)); then rss_max=$rss t_rss_max=$elapsed; fi
  rss_end=$rss
  printf '\rsoak-limits: %7ss  %7d/%d started  rss %d kB ' "$elapsed" "$started" "$total" "$rss"
  ((started >= total)) && break
  if awk -v e="$elapsed" -v m="$max_s" 'BEGIN{exit !(e > m)}'; then
    echo
    echo "soak-limits: FAIL: only $started of $total jobs started in $max_s s" >&2
    exit 1
  fi
done
echo
end_elapsed=$elapsed
echo "soak-limits: load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

# Every outcome recorded: each queue's completed count is what was enqueued.
completed_of() { awk -v q="$1" '$1 == q { print $5 }' <<<"$2"; }
all_completed() {
  local table q
  table=$(cv queues) || return 1
  for q in "${!enqueued[@]}"; do
    [[ $(completed_of "$q" "$table") == "${enqueued[$q]}" ]] || return 1
  done
}
for _ in $(seq 60); do all_completed && break; sleep 1; done
table=$(cv queues)

kill -TERM "$soak_pid"
worker_rc=0
wait "$soak_pid" || worker_rc=$?
soak_pid=""

fail=0
echo "soak-limits: $total jobs started in $end_elapsed s on $plugin; engine exited with $worker_rc"
echo "$table" | sed 's/^/  /'
((worker_rc == 0)) || { echo "soak-limits: FAIL: the engine exited with $worker_rc" >&2; fail=1; }

# Lost or twice: every enqueued job started once and completed.
lines=$(($(wc -l <"$starts") - 1))
unique=$(awk '$1 != 0 { print $1 }' "$starts" | sort -u | wc -l)
echo "soak-limits: $lines starts, $unique distinct jobs; $((total - unique)) never started," \
  "$((lines - unique)) started twice"
if ((unique != total || lines != total)); then
  echo "soak-limits: FAIL: jobs lost or run twice" >&2
  fail=1
fi
for q in "${!enqueued[@]}"; do
  c=$(completed_of "$q" "$table")
  if [[ $c != "${enqueued[$q]}" ]]; then
    echo "soak-limits: FAIL: queue $q completed ${c:-0} of ${enqueued[$q]}" >&2
    fail=1
  fi
done

# Memory.
growth=$(awk -v a="$rss10" -v b="$rss_max" 'BEGIN{printf "%+.1f", (b - a) * 100 / a}')
allowed_kb=$(awk -v r="$rss10" -v m="$margin_pct" 'BEGIN{printf "%d", r * (1 + m / 100)}')
echo "soak-limits: RSS at 10% (${t_rss10} s): $rss10 kB; highest after that: $rss_max kB" \
  "(${t_rss_max} s, $growth%); at the end ($end_elapsed s): $rss_end kB; allowed up to $allowed_kb kB"
if ((rss_max > allowed_kb)); then
  echo "soak-limits: FAIL: RSS grew more than $margin_pct% after 10% of the jobs" >&2
  fail=1
fi

# Rates, from the start times of each limited queue's jobs.
engine_start=$(awk '$1 == 0 && $2 == "engine-start" { print $3; exit }' "$starts")
# Jobs started per queue in each second since the engine started.
per_s="$out/soak-limits-per-second.csv"
awk -v e0="$engine_start" '$1 != 0 {
    s = int(($3 - e0) / 1e9); n[s, $2]++; if (s > last) last = s
  }
  END {
    print "second,rate50,rate500,rate5000,bulk"
    for (s = 0; s <= last; s++)
      printf "%d,%d,%d,%d,%d\n", s, n[s, "rate50"], n[s, "rate500"], n[s, "rate5000"], n[s, "bulk"]
  }' "$starts" >"$per_s"
for l in "${limits[@]}"; do
  read -r name rate burst <<<"$l"
  awk -v q="$name" '$2 == q { print $3 }' "$starts" | sort -n >"$work/$name.ns"
  # shellcheck disable=SC2016
  result=$(awk -v rate="$rate" -v burst="$burst" -v tol="$tol_pct" -v e0="$engine_start" '
    NR == 1 { t0 = $1 }
    {
      t = ($1 - t0) / 1e9
      # The k-th start at s after the engine started: at most burst + rate * s
      # tokens were taken by then (a job starts after its token was taken).
      excess = NR - (burst + rate * ($1 - e0) / 1e9)
      if (excess > worst) { worst = excess }
      if (first == "" && t >= 1) { first = t; first_n = NR }
      last = t; n = NR
    }
    END {
      if (first == "" || last <= first) { print "n/a n/a n/a n/a n/a"; exit 1 }
      achieved = (n - first_n) / (last - first)
      err = (achieved - rate) / rate * 100
      printf "%.3f %+.3f %.1f %.1f %.2f\n", achieved, err, first, last, worst
      exit !(err <= tol && err >= -tol && worst <= 1e-9)
    }' "$work/$name.ns") && ok=1 || ok=0
  read -r achieved err from to worst <<<"$result"
  echo "soak-limits: $name: $achieved jobs/s (limit $rate/s, burst $burst; $err%) from $from s to" \
    "$to s after its first start; worst excess over burst + rate*t: ${worst} jobs"
  if ((!ok)); then
    echo "soak-limits: FAIL: $name missed its limit by more than $tol_pct% (or got ahead of it)" >&2
    fail=1
  fi
done
echo "soak-limits: samples in $csv, starts per second in $per_s; engine log in" \
  "$out/soak-limits-worker.log"
((fail == 0)) && echo "soak-limits: PASS"
exit "$fail"
