#!/usr/bin/env bash
# Measures the dispatch rate of a rate-limited queue (50/s, burst 10) over
# 20 s while a client polls ListQueues and /metrics every 250 ms, and the same
# without polling, on the SQLite plugin. The API must not slow dispatch: both
# rates should be 50/s.
#
#   bash server/bench_dispatch_under_polling.sh [BUILD_DIR]   (default: build)
#
# Needs curl. Uses a fresh temporary database and a free loopback port.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
bin=$build/bin/conveyor
work=$(mktemp -d /tmp/conveyor-bench-api.XXXXXX)
server_pid=""
poll_pid=""
cleanup() {
  [[ -n $poll_pid ]] && kill "$poll_pid" 2>/dev/null || true
  [[ -n $server_pid ]] && kill -INT "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
cat >"$work/conveyor.toml" <<TOML
[storage]
plugin = "sqlite"
plugin_dir = "$build/lib/conveyor/plugins"
[storage.options]
path = "$work/conveyor.db"
[server]
listen = "127.0.0.1:$port"
allow_unauthenticated = true
TOML

dispatched() {  # dispatched count of queue $1, from /metrics
  curl -s "$url/metrics" | awk -v q="conveyor_jobs_dispatched_total{queue=\"$1\"}" '$1 == q {print $2}'
}

poll() {  # ListQueues + /metrics every 250 ms; logs each request's seconds
  while true; do
    curl -s -o /dev/null -w '%{time_total}\n' -X POST -H 'Content-Type: application/json' -d '{}' \
      "$url/conveyor.v1.AdminService/ListQueues" >>"$work/poll.log"
    curl -s -o /dev/null -w '%{time_total}\n' "$url/metrics" >>"$work/poll.log"
    sleep 0.25
  done
}

"$bin" --config "$work/conveyor.toml" serve 2>"$work/serve.err" &
server_pid=$!
for _ in $(seq 100); do "$bin" --server "$url" queues >/dev/null 2>&1 && break; sleep 0.1; done

measure() {  # queue, with_polling(0/1) -> prints the rate over 20 s after a 2 s warm-up
  local q=$1 polling=$2
  "$bin" --server "$url" ratelimit set "$q" --rate 50 --burst 10 >/dev/null
  "$bin" --server "$url" enqueue "$q" noop --count 3000 >/dev/null
  if [[ $polling == 1 ]]; then poll & poll_pid=$!; fi
  sleep 2
  local a b t0 t1
  t0=$(date +%s.%N); a=$(dispatched "$q")
  sleep 20
  t1=$(date +%s.%N); b=$(dispatched "$q")
  if [[ $polling == 1 ]]; then kill "$poll_pid"; wait "$poll_pid" 2>/dev/null || true; poll_pid=""; fi
  python3 -c "print(f'{($b - $a) / ($t1 - $t0):.2f} jobs/s ({$b - $a} dispatched in {$t1 - $t0:.2f} s)')"
}

echo "queue limited to 50/s burst 10, 3000 noop jobs, rate over 20 s after 2 s:"
echo "  without polling: $(measure quiet 0)"
echo "  with ListQueues + /metrics every 250 ms: $(measure polled 1)"
python3 - "$work/poll.log" <<'PY'
import sys
t = sorted(float(x) for x in open(sys.argv[1]) if x.strip())
print(f"  poll requests: {len(t)}, median {t[len(t)//2]*1000:.1f} ms, max {t[-1]*1000:.1f} ms")
PY
