#!/usr/bin/env bash
# Benchmarks of the postgres plugin, run against a PostgreSQL you name:
#   plugins/postgres/bench/drain.sh DSN [BUILD_DIR] [RUNS]
#
# For each run (median reported), in a fresh schema each time:
#   reference   the bare SQL loop of docs/performance/README.md, with pgbench: 4 clients, each
#               claiming 100 jobs (CTE, FOR UPDATE SKIP LOCKED) and completing
#               them, two transactions per batch, over 100,000 noop jobs
#   drain-1     100,000 noop jobs enqueued, then 1 `conveyor serve`
#   drain-3     the same with 3 `conveyor serve` processes
#               ([engine] max_workers = 100); jobs/s = jobs / (last
#               completion - first claim), from the jobs table itself
#   pickup      40 noop jobs, one at a time into an idle queue served by 1
#               process, 50-450 ms apart: claimed_at - created_at, p50/p99
#   override    `ratelimit set` while 3 processes drain: per process, the
#               last start closer than 150 ms to the previous one after the
#               set (rate 5, burst 1 forbids those) bounds when it applied it
set -euo pipefail
dsn=${1:?usage: drain.sh DSN [BUILD_DIR] [RUNS]}
build=${2:-$(cd "$(dirname "$0")/../../.." && pwd)/build}
runs=${3:-3}
jobs=100000
export PGOPTIONS="-c client_min_messages=warning"  # quiet DROP SCHEMA ... CASCADE
bin=$build/bin/conveyor
plugins=$build/lib/conveyor/plugins
psql_bin=$(command -v psql || echo /usr/lib/postgresql/15/bin/psql)
pgbench_bin=$(command -v pgbench || echo /usr/lib/postgresql/15/bin/pgbench)
work=$(mktemp -d /tmp/conveyor-pg-bench.XXXXXX)
# Serve processes are started from subshells: their pids go to a file so that
# stopping, and cleaning up after an interruption, finds them all.
cleanup() {
  [[ -f $work/pids ]] && while read -r p; do kill "$p" 2>/dev/null || true; done <"$work/pids"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

q() { "$psql_bin" -X -A -t -q -v ON_ERROR_STOP=1 -d "$dsn" -c "$1"; }
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

config() {  # schema max_workers -> path of a config file
  local f=$work/$1.toml
  cat >"$f" <<TOML
[storage]
plugin = "postgres"
plugin_dir = "$plugins"
[storage.options]
dsn = "$dsn"
schema = "$1"
[engine]
max_workers = $2
poll_interval_ms = 1000
TOML
  echo "$f"
}

start_serves() {  # config n
  for ((i = 0; i < $2; i++)); do
    CONVEYOR_LOG_LEVEL=warn "$bin" --config "$1" serve 2>>"$work/serve.log" &
    echo $! >>"$work/pids"
  done
}

stop_serves() {
  local p
  while read -r p; do kill -TERM "$p" 2>/dev/null || true; done <"$work/pids"
  while read -r p; do wait "$p" 2>/dev/null || true; done <"$work/pids"
  : >"$work/pids"
}

wait_drained() {  # schema queue: until no job of queue is pending or running (300 s at most)
  local deadline=$((SECONDS + 300))
  until [[ $(q "SELECT count(*) FROM (SELECT 1 FROM \"$1\".jobs WHERE state IN (1, 3) AND queue = '$2' LIMIT 1) x") == 0 ]]; do
    ((SECONDS < deadline)) || { echo "drain.sh: queue $2 did not drain within 300 s" >&2; exit 1; }
    sleep 0.1
  done
}

reference() {  # -> jobs/s
  local s=ref_$RANDOM$RANDOM
  CONVEYOR_LOG_LEVEL=warn "$bin" --config "$(config "$s" 100)" enqueue bench noop --count $jobs >/dev/null
  q "VACUUM ANALYZE \"$s\".jobs" >/dev/null
  # Each batch's lease token is unique; it is also its lease_expires, so the
  # completion finds the batch through the index of running jobs.
  cat >"$work/ref.sql" <<SQL
\set tok random(1, 9000000000000000000)
WITH picked AS (SELECT id FROM "$s".jobs WHERE queue = 'bench' AND state = 1 AND run_at <= 9000000000000000000 ORDER BY priority, run_at, id LIMIT 100 FOR UPDATE SKIP LOCKED) UPDATE "$s".jobs AS j SET state = 3, attempt = j.attempt + 1, lease_token = :tok, lease_expires = :tok FROM picked WHERE j.id = picked.id;
UPDATE "$s".jobs SET state = 4, finalized_at = 1, lease_token = 0, lease_expires = 0 WHERE state = 3 AND lease_expires = :tok AND lease_token = :tok;
SQL
  local t0 t1 done
  t0=$(now)
  "$pgbench_bin" -n -M prepared -c 4 -j 2 -t $((jobs / 400)) -f "$work/ref.sql" "$dsn" >"$work/pgbench.log" 2>&1
  t1=$(now)
  done=$(q "SELECT count(*) FROM \"$s\".jobs WHERE state = 4")
  q "DROP SCHEMA \"$s\" CASCADE" >/dev/null
  echo "$done $t0 $t1" | awk '{printf "%.0f\n", $1 / ($3 - $2)}'
}

drain() {  # processes -> jobs/s
  local s=drain_$RANDOM$RANDOM cfg
  cfg=$(config "$s" 100)
  CONVEYOR_LOG_LEVEL=warn "$bin" --config "$cfg" enqueue bench noop --count $jobs >/dev/null
  q "VACUUM ANALYZE \"$s\".jobs" >/dev/null
  start_serves "$cfg" "$1"
  wait_drained "$s" bench
  stop_serves
  local r
  r=$(q "SELECT round($jobs / ((max(finalized_at) - min(claimed_at)) / 1e6)) FROM \"$s\".jobs WHERE state = 4 HAVING count(*) = $jobs")
  q "DROP SCHEMA \"$s\" CASCADE" >/dev/null
  [[ -n $r ]] || { echo "drain: not every job completed" >&2; exit 1; }
  echo "$r"
}

pickup() {  # -> "p50_ms p99_ms"
  local s=pickup_$RANDOM$RANDOM cfg
  cfg=$(config "$s" 10)
  CONVEYOR_LOG_LEVEL=warn "$bin" --config "$cfg" enqueue warmup noop >/dev/null
  start_serves "$cfg" 1
  until [[ $(q "SELECT count(*) FROM \"$s\".jobs WHERE state = 4") == 1 ]]; do sleep 0.05; done
  for ((i = 0; i < 40; i++)); do
    sleep "$(printf '0.%03d' $((RANDOM % 400 + 50)))"
    CONVEYOR_LOG_LEVEL=warn "$bin" --config "$cfg" enqueue idle noop >/dev/null
    wait_drained "$s" idle
  done
  stop_serves
  q "SELECT round((percentile_cont(0.5) WITHIN GROUP (ORDER BY claimed_at - created_at) / 1000.0)::numeric, 2) || ' ' ||
            round((percentile_cont(0.99) WITHIN GROUP (ORDER BY claimed_at - created_at) / 1000.0)::numeric, 2)
     FROM \"$s\".jobs WHERE queue = 'idle'"
  q "DROP SCHEMA \"$s\" CASCADE" >/dev/null
}

override() {  # -> ms until the slowest of 3 processes applied the override
  local s=override_$RANDOM$RANDOM cfg
  cfg=$(config "$s" 20)
  CONVEYOR_LOG_LEVEL=warn "$bin" --config "$cfg" enqueue email sleep --payload '{"ms": 20}' --count 8000 >/dev/null
  start_serves "$cfg" 3
  until [[ $(q "SELECT count(*) >= 300 FROM \"$s\".jobs WHERE state = 4") == t ]]; do sleep 0.05; done
  CONVEYOR_LOG_LEVEL=warn "$bin" --config "$cfg" ratelimit set email --rate 5 --burst 1 >/dev/null
  sleep 2
  stop_serves
  q "WITH t0 AS (SELECT updated_at FROM \"$s\".rate_limits WHERE queue = 'email'),
          c AS (SELECT claimed_by, claimed_at,
                       claimed_at - lag(claimed_at) OVER (PARTITION BY claimed_by ORDER BY claimed_at) AS gap
                FROM \"$s\".jobs WHERE claimed_at > 0)
     SELECT round(coalesce(max(c.claimed_at - t0.updated_at), 0) / 1000.0, 1)
     FROM c, t0 WHERE c.claimed_at > t0.updated_at AND c.gap < 150000"
  q "DROP SCHEMA \"$s\" CASCADE" >/dev/null
}

echo "conveyor postgres benchmarks: $jobs noop jobs, $runs runs, median; $(nproc) cores"
ref=(); d1=(); d3=()
for ((r = 1; r <= runs; r++)); do
  ref+=("$(reference)"); d1+=("$(drain 1)"); d3+=("$(drain 3)")
  echo "run $r: reference ${ref[-1]} jobs/s, 1 process ${d1[-1]} jobs/s, 3 processes ${d3[-1]} jobs/s"
done
mref=$(printf '%s\n' "${ref[@]}" | median)
m1=$(printf '%s\n' "${d1[@]}" | median)
m3=$(printf '%s\n' "${d3[@]}" | median)
echo "reference (bare SQL loop, 4 clients): $mref jobs/s"
echo "drain, 1 serve process:  $m1 jobs/s ($(awk "BEGIN {printf \"%.0f\", 100 * $m1 / $mref}")% of the reference)"
echo "drain, 3 serve processes: $m3 jobs/s ($(awk "BEGIN {printf \"%.0f\", 100 * $m3 / $mref}")% of the reference)"
echo "pickup latency, idle queue, NOTIFY (p50 p99 ms): $(pickup)"
echo "override reached all 3 processes within (ms, upper bound): $(override)"
