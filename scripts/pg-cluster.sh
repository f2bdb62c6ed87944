#!/usr/bin/env bash
# Starts or stops a throwaway PostgreSQL 15 cluster for tests, listening on
# 127.0.0.1 only, on a non-default port, owned by the postgres user.
#   scripts/pg-cluster.sh start DIR PORT   -> prints the DSN on stdout
#   scripts/pg-cluster.sh stop DIR
# To take a started cluster's server down and up again (outage tests), data
# kept:
#   scripts/pg-cluster.sh halt DIR [fast|immediate]   (default fast)
#   scripts/pg-cluster.sh resume DIR
# By default the server runs with fsync=off and max_connections=200 (fast
# tests; a crash of the machine may lose the cluster, which is throwaway).
# PG_CLUSTER_SETTINGS=default at start keeps PostgreSQL's own settings
# (fsync on, max_connections 100, ...), for figures of record; resume keeps
# the choice made at start.
set -euo pipefail
bin=/usr/lib/postgresql/15/bin
cmd=${1:?start|stop|halt|resume}
dir=${2:?cluster directory}
as_pg() { if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
# Starts the server of an initialised cluster on port and waits until it is up.
start_server() {
  local opts="-c listen_addresses=127.0.0.1 -p $1 -k $dir"
  [[ $(cat "$dir/settings" 2>/dev/null) == default ]] || opts+=" -c fsync=off -c max_connections=200"
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "$opts" start >/dev/null
}
case "$cmd" in
  start)
    port=${3:?port}
    settings=${PG_CLUSTER_SETTINGS:-test}
    [[ $settings == test || $settings == default ]] || {
      echo "start: PG_CLUSTER_SETTINGS is test (fsync=off, the default) or default, not '$settings'" >&2
      exit 2
    }
    mkdir -p "$dir"
    echo "$settings" >"$dir/settings"
    [[ $(id -u) -eq 0 ]] && chown postgres:postgres "$dir"
    as_pg "$bin/initdb" -D "$dir/data" -U postgres -A trust --no-sync >"$dir/initdb.log" 2>&1
    start_server "$port"
    echo "$port" >"$dir/port"
    as_pg "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE DATABASE conveyor_test" >/dev/null
    echo "postgresql://postgres@127.0.0.1:$port/conveyor_test"
    ;;
  stop)
    [[ -d "$dir/data" ]] && as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    ;;
  halt)
    mode=${3:-fast}
    [[ $mode == fast || $mode == immediate ]] || { echo "halt: mode is fast or immediate" >&2; exit 2; }
    as_pg "$bin/pg_ctl" -D "$dir/data" -m "$mode" -w -t 60 stop >/dev/null
    ;;
  resume)
    start_server "$(cat "$dir/port")"
    ;;
  *) echo "usage: $0 start DIR PORT | stop DIR | halt DIR [fast|immediate] | resume DIR" >&2; exit 2 ;;
esac
