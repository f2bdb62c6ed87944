#!/usr/bin/env bash
# Soak: a million jobs through PostgreSQL in one real `conveyor serve`
# process, a rate-limited queue beside an unlimited one, and its memory must
# stay flat. Not part of CI (it takes several minutes).
#
#   scripts/soak.sh [DSN]
#
# Without DSN (or $CONVEYOR_SOAK_PG_DSN) it starts a throwaway cluster
# (scripts/pg-cluster.sh, port $SOAK_PG_PORT, default 5469) and stops it at
# the end. It works in a fresh schema, dropped at the end.
#
# Workload (environment, defaults): BULK_JOBS=900000 "noop" jobs on queue
# "bulk" (no limit, max_workers $BULK_WORKERS=50) and LIMITED_JOBS=100000 on
# queue "email" limited to LIMIT_RATE=500/s (burst LIMIT_BURST=50,
# max_workers LIMITED_WORKERS=50, so a claim may take a whole burst), all
# enqueued before serve starts. The limited queue sets the length of the run
# (100,000 / 500 = 200 s); the bulk queue drains beside it at full speed.
#
# Every SAMPLE_S=2 seconds it records the serve process's VmRSS
# (/proc/PID/status) and both queues' completed counts in
# $OUT_DIR/soak.csv (default soak-out/). It prints RSS when 10% and when 100%
# of the jobs are done, and the limited queue's achieved rate (between the
# first and the last sample in which it was still draining; the window is
# long enough, 190 s by default, for the samples' timing error to vanish).
# Exit 1 when:
#   - RSS at 100% exceeds RSS at 10% by more than RSS_MARGIN_PCT (default 10)
#     percent plus 2 MiB (allocator rounding): about 4 bytes per job;
#   - the limited queue ran faster than its limit by more than 2%, or slower
#     than 90% of it;
#   - serve died, or not every job completed within MAX_S (default 1800) s.
#
# Exit 2 when it cannot run (no build, no cluster).
#
# BUILD_DIR (default build) must hold bin/conveyor and the plugin
# (SOAK_PLUGIN=postgres, or postgres-queue); build it with
# -DCMAKE_BUILD_TYPE=Release for meaningful figures.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

build=${BUILD_DIR:-build}
bulk_jobs=${BULK_JOBS:-900000}
limited_jobs=${LIMITED_JOBS:-100000}
limit_rate=${LIMIT_RATE:-500}
limit_burst=${LIMIT_BURST:-50}
bulk_workers=${BULK_WORKERS:-50}
limited_workers=${LIMITED_WORKERS:-50}
sample_s=${SAMPLE_S:-2}
margin_pct=${RSS_MARGIN_PCT:-10}
max_s=${MAX_S:-1800}
out=${OUT_DIR:-soak-out}
plugin=${SOAK_PLUGIN:-postgres}
total=$((bulk_jobs + limited_jobs))

conveyor="$build/bin/conveyor"
plugin_dir="$root/$build/lib/conveyor/plugins"
[[ $build == /* ]] && plugin_dir="$build/lib/conveyor/plugins"
if [[ ! -x $conveyor || ! -f $plugin_dir/libconveyor-$plugin.so ]]; then
  echo "soak: build conveyor and the $plugin plugin in $build first, e.g." >&2
  echo "  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C $build conveyor conveyor_plugin_$plugin" >&2
  exit 2
fi

mkdir -p "$out"
work=$(mktemp -d /tmp/conveyor-soak.XXXXXX)
chmod 755 "$work"  # the postgres user reaches its cluster inside
schema="soak_$(date +%s)"
dsn=${1:-${CONVEYOR_SOAK_PG_DSN:-}}
# shellcheck source=scripts/soak-common.sh
source "$root/scripts/soak-common.sh"
trap soak_cleanup EXIT
soak_start_cluster soak "${SOAK_PG_PORT:-5469}"
echo "soak: PostgreSQL at $dsn, schema $schema, plugin $plugin, build $build"

config="$work/conveyor.toml"
cat >"$config" <<EOF
[storage]
plugin = "$plugin"
plugin_dir = "$plugin_dir"
[storage.options]
dsn = "$dsn"
schema = "$schema"
[queues.bulk]
max_workers = $bulk_workers
[queues.email]
rate_limit = { rate = $limit_rate, burst = $limit_burst }
max_workers = $limited_workers
EOF
cv() { "$conveyor" --config "$config" "$@"; }

t0=$(date +%s.%N)
soak_enqueue email "$limited_jobs"
soak_enqueue bulk "$bulk_jobs"
t1=$(date +%s.%N)
echo "soak: enqueued $total jobs in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s"

CONVEYOR_LOG_LEVEL=${CONVEYOR_LOG_LEVEL:-warn} "$conveyor" --config "$config" serve 2>"$out/serve.log" &
soak_pid=$!
start=$(date +%s.%N)

# completed count of queue from `conveyor queues` (columns: QUEUE PAUSED PENDING
# SCHEDULED RUNNING COMPLETED ...).
completed_of() { awk -v q="$1" '$1 == q { print $6 }' <<<"$2"; }
csv="$out/soak.csv"
echo "elapsed_s,rss_kb,completed_total,completed_bulk,completed_email" >"$csv"
rss10="" rss100="" t_rss10=""
first_email_t="" first_email_n="" last_email_t="" last_email_n=""
while :; do
  sleep "$sample_s"
  if ! kill -0 "$soak_pid" 2>/dev/null; then
    echo "soak: FAIL: conveyor serve died; its log:" >&2
    tail -20 "$out/serve.log" >&2
    exit 1
  fi
  rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$soak_pid/status")
  # The counts are read somewhere during the CLI's run: time them at its middle.
  before=$(date +%s.%N)
  table=$(cv queues)
  after=$(date +%s.%N)
  elapsed=$(awk -v s="$start" -v a="$before" -v b="$after" 'BEGIN{printf "%.2f", (a + b) / 2 - s}')
  bulk=$(completed_of bulk "$table")
  email=$(completed_of email "$table")
  done_n=$((${bulk:-0} + ${email:-0}))
  echo "$elapsed,$rss,$done_n,${bulk:-0},${email:-0}" >>"$csv"
  if [[ -z $rss10 ]] && ((done_n * 10 >= total)); then rss10=$rss t_rss10=$elapsed; fi
  # The limited queue's steady state: the first sample with a few seconds of
  # draining behind it (past the initial burst) to the last one still short.
  if ((${email:-0} > 0 && ${email:-0} < limited_jobs)); then
    if [[ -z $first_email_t ]] && awk -v e="$elapsed" 'BEGIN{exit !(e >= 5)}'; then
      first_email_t=$elapsed first_email_n=$email
    fi
    last_email_t=$elapsed last_email_n=$email
  fi
  printf '\rsoak: %6ss  %7d/%d done  bulk %7d  email %6d  rss %d kB ' \
    "$elapsed" "$done_n" "$total" "${bulk:-0}" "${email:-0}" "$rss"
  if ((done_n >= total)); then
    rss100=$rss
    break
  fi
  if awk -v e="$elapsed" -v m="$max_s" 'BEGIN{exit !(e > m)}'; then
    echo
    echo "soak: FAIL: only $done_n of $total jobs completed in $max_s s" >&2
    exit 1
  fi
done
echo
end_elapsed=$elapsed

kill -TERM "$soak_pid"
serve_rc=0
wait "$soak_pid" || serve_rc=$?
soak_pid=""

fail=0
rate=$(awk -v t1="$first_email_t" -v n1="$first_email_n" -v t2="$last_email_t" -v n2="$last_email_n" \
  'BEGIN{ if (t2 > t1) printf "%.1f", (n2 - n1) / (t2 - t1); else print "n/a" }')
allowed_kb=$(awk -v r="$rss10" -v m="$margin_pct" 'BEGIN{printf "%d", r * (1 + m / 100) + 2048}')
growth=$(awk -v a="$rss10" -v b="$rss100" 'BEGIN{printf "%+.1f", (b - a) * 100 / a}')
echo "soak: $total jobs ($bulk_jobs bulk unlimited, $limited_jobs email at $limit_rate/s) in $end_elapsed s"
echo "soak: serve RSS at 10% (${t_rss10} s): $rss10 kB; at 100% ($end_elapsed s): $rss100 kB ($growth%); allowed up to $allowed_kb kB"
echo "soak: email achieved $rate jobs/s (limit $limit_rate/s) between ${first_email_t} s and ${last_email_t} s"
echo "soak: samples in $csv; serve log in $out/serve.log; serve exited with $serve_rc"
if ((rss100 > allowed_kb)); then
  echo "soak: FAIL: RSS grew from $rss10 kB to $rss100 kB (more than $margin_pct% + 2 MiB)" >&2
  fail=1
fi
if [[ $rate == n/a ]] || awk -v r="$rate" -v l="$limit_rate" 'BEGIN{exit !(r > l * 1.02 || r < l * 0.9)}'; then
  echo "soak: FAIL: the limited queue ran at $rate/s, not within [90%, 102%] of $limit_rate/s" >&2
  fail=1
fi
((serve_rc == 0)) || { echo "soak: FAIL: serve exited with $serve_rc" >&2; fail=1; }
((fail == 0)) && echo "soak: PASS"
exit "$fail"
