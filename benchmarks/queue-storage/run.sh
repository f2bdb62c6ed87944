#!/usr/bin/env bash
# The canonical `postgres` backend against the queue-storage `postgres-queue`
# backend, side by side, in one command:
#
#   benchmarks/queue-storage/run.sh [DSN] [conveyor-bench options...]
#
# Without a DSN it starts a throwaway PostgreSQL 15 cluster (scripts/pg-cluster.sh,
# 127.0.0.1, PostgreSQL's default settings: fsync and synchronous_commit on)
# and removes it afterwards; PG_CLUSTER_SETTINGS=test makes it fsync=off, for
# an extra run only (conveyor-bench labels its figures fsync=off). It builds
# conveyor-bench and every storage plugin of the tree (ninja: a no-op when up to date), fills in
# each backend config of this folder (*.toml, @DSN@ replaced) whose plugin was
# built, and runs the workloads `steady`, `steady-held-txn` and `drain` (the
# saturated throughput, for "queue-storage >= canonical") on all of them in one
# conveyor-bench process. Options after the DSN go to conveyor-bench
# (e.g. --quick, --steady-rate 4000, --steady-jobs 500000).
#
# Environment: BUILD_DIR (default <repo>/build), OUT (default
# ./queue-storage-results), WORKLOADS (default steady,steady-held-txn,drain),
# PG_PORT (throwaway cluster's port; default the first free of 5490-5499),
# PG_CLUSTER_SETTINGS (default or test, above), SKIP_BUILD=1 to use the
# build as it is.
#
# Writes to OUT: table.txt (also printed), bench-results.json,
# bench-results.svg, progress.log, server-settings.txt, configs/*.toml.
# Exit code: conveyor-bench's (0 all measured, 1 a workload failed, 2 usage).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD_DIR:-$root/build}
out=${OUT:-$PWD/queue-storage-results}
workloads=${WORKLOADS:-steady,steady-held-txn,drain}
pg_bin=/usr/lib/postgresql/15/bin

dsn=""
if [[ $# -gt 0 && $1 != -* ]]; then
  dsn=$1
  shift
fi

work=$(mktemp -d /tmp/conveyor-qs-bench.XXXXXX)
chmod 755 "$work"  # the throwaway cluster inside runs as the postgres user
cluster=""
cleanup() {
  [[ -n $cluster ]] && bash "$root/scripts/pg-cluster.sh" stop "$cluster"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- build ----
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  if [[ ! -f $build/build.ninja ]]; then
    echo "run.sh: configuring $build (Release)" >&2
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCONVEYOR_SKIP_PARTS=web >&2
  else
    # Plugin folders are globbed at configure time: configure again to see new ones.
    cmake -S "$root" -B "$build" >/dev/null
  fi
  # Every plugin target of the tree, so a backend added later is built too.
  mapfile -t plugin_targets < <(ninja -C "$build" -t targets all |
    grep -o '^conveyor_plugin_[A-Za-z0-9_]*' | sort -u)
  echo "run.sh: building conveyor-bench ${plugin_targets[*]}" >&2
  ninja -C "$build" conveyor-bench >&2
  # A plugin that does not build is left out (and named below), not fatal.
  for t in "${plugin_targets[@]}"; do
    ninja -C "$build" "$t" >"$work/build-$t.log" 2>&1 ||
      echo "run.sh: $t did not build (see below); its backend is skipped" >&2
  done
fi
bench=$build/bin/conveyor-bench
plugins=$build/lib/conveyor/plugins
[[ -x $bench ]] || { echo "run.sh: $bench is missing (build it, or unset SKIP_BUILD)" >&2; exit 2; }

# ---- database ----
if [[ -z $dsn ]]; then
  port=${PG_PORT:-}
  if [[ -z $port ]]; then
    for p in $(seq 5490 5499); do
      if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
    done
    [[ -n $port ]] || { echo "run.sh: no free port in 5490-5499 (set PG_PORT or give a DSN)" >&2; exit 2; }
  fi
  cluster=$work/pg
  echo "run.sh: starting a throwaway PostgreSQL on 127.0.0.1:$port" >&2
  dsn=$(PG_CLUSTER_SETTINGS=${PG_CLUSTER_SETTINGS:-default} \
    bash "$root/scripts/pg-cluster.sh" start "$cluster" "$port")
fi

mkdir -p "$out/configs"
psql_bin=$(command -v psql || echo "$pg_bin/psql")
"$psql_bin" -X -A -t -q -d "$dsn" -c \
  "SELECT name || ' = ' || setting FROM pg_settings WHERE name IN ('server_version', 'fsync',
     'synchronous_commit', 'autovacuum', 'autovacuum_naptime', 'autovacuum_vacuum_scale_factor',
     'autovacuum_vacuum_threshold', 'shared_buffers', 'max_connections') ORDER BY name" \
  >"$out/server-settings.txt"

# ---- backends: every config of this folder whose plugin is built ----
configs=()
skipped=()
escaped_dsn=${dsn//\\/\\\\}
escaped_dsn=${escaped_dsn//\"/\\\"}
for template in "$here"/*.toml; do
  name=$(sed -n 's/^plugin *= *"\(.*\)"/\1/p' "$template" | head -1)
  if [[ ! -f $plugins/libconveyor-$name.so ]]; then
    skipped+=("$(basename "$template") (plugin $name not built: no $plugins/libconveyor-$name.so)")
    continue
  fi
  text=$(<"$template")
  printf '%s\n' "${text//@DSN@/$escaped_dsn}" >"$out/configs/$(basename "$template")"
  configs+=(--config "$out/configs/$(basename "$template")")
done
[[ ${#configs[@]} -gt 0 ]] || { echo "run.sh: no backend config has a built plugin" >&2; exit 2; }
for s in "${skipped[@]}"; do echo "run.sh: skipping $s: comparison pending" >&2; done

# ---- run ----
echo "run.sh: conveyor-bench ${configs[*]} --workloads $workloads $*" >&2
code=0
"$bench" "${configs[@]}" --workloads "$workloads" --out "$out" "$@" \
  2> >(tee "$out/progress.log" >&2) >"$out/table.txt" || code=$?
{
  cat "$out/table.txt"
  echo "PostgreSQL settings:"
  sed 's/^/  /' "$out/server-settings.txt"
  for s in "${skipped[@]}"; do echo "not measured: $s"; done
  echo "results: $out (table.txt, bench-results.json, bench-results.svg)"
} | tee "$out/summary.txt"
exit "$code"
