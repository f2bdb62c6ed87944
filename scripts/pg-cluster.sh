#!/usr/bin/env bash
# Starts or stops a throwaway PostgreSQL 15 cluster for tests, listening on
# 127.0.0.1 only, on a non-default port, owned by the postgres user.
#   scripts/pg-cluster.sh start DIR PORT   -> prints the DSN on stdout
#   scripts/pg-cluster.sh stop DIR
set -euo pipefail
bin=/usr/lib/postgresql/15/bin
cmd=${1:?start|stop}
dir=${2:?cluster directory}
as_pg() { if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case "$cmd" in
  start)
    port=${3:?port}
    mkdir -p "$dir"
    [[ $(id -u) -eq 0 ]] && chown postgres:postgres "$dir"
    as_pg "$bin/initdb" -D "$dir/data" -U postgres -A trust --no-sync >"$dir/initdb.log" 2>&1
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=200" start >/dev/null
    as_pg "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE DATABASE conveyor_test" >/dev/null
    echo "postgresql://postgres@127.0.0.1:$port/conveyor_test"
    ;;
  stop)
    [[ -d "$dir/data" ]] && as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    ;;
  *) echo "usage: $0 start DIR PORT | stop DIR" >&2; exit 2 ;;
esac
