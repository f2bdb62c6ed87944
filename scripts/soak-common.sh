# Sourced by scripts/soak.sh and scripts/soak-limits.sh (not run on its own):
# what both soaks do alike. The sourcing script sets root (the repository),
# work (its temporary directory), schema, and the variables below.
#
#   soak_pid     the engine process under test, stopped by soak_cleanup
#   dsn          the PostgreSQL server in use ("" for none)
#   own_cluster  the throwaway cluster soak_start_cluster started ("" for none)

soak_pid=""
dsn=${dsn:-}
own_cluster=""
psql_bin=/usr/lib/postgresql/15/bin/psql
[[ -x $psql_bin ]] || psql_bin=psql

# The EXIT trap: stops the engine process, drops the schema, stops the
# throwaway cluster and removes the work directory.
soak_cleanup() {
  if [[ -n $soak_pid ]] && kill -0 "$soak_pid" 2>/dev/null; then
    kill -TERM "$soak_pid" 2>/dev/null || true
    wait "$soak_pid" 2>/dev/null || true
  fi
  if [[ -n $dsn ]]; then
    "$psql_bin" -X -q -d "$dsn" -c "DROP SCHEMA IF EXISTS \"$schema\" CASCADE" >/dev/null 2>&1 || true
  fi
  [[ -n $own_cluster ]] && bash "$root/scripts/pg-cluster.sh" stop "$own_cluster"
  rm -rf "$work"
}

# soak_start_cluster NAME PORT: unless dsn is set, starts a throwaway cluster
# in $work/pg on PORT and sets dsn; exit 2 (NAME: in the message) when it cannot.
soak_start_cluster() {
  [[ -z $dsn ]] || return 0
  own_cluster="$work/pg"
  dsn=$(bash "$root/scripts/pg-cluster.sh" start "$own_cluster" "$2") || {
    echo "$1: cannot start a PostgreSQL cluster; $own_cluster/initdb.log and server.log:" >&2
    cat "$own_cluster"/*.log >&2 || true
    exit 2
  }
}

# soak_enqueue QUEUE COUNT: COUNT "noop" jobs on QUEUE through the CLI's cv
# (defined by the sourcing script), in chunks of 100,000 (one transaction each).
soak_enqueue() {
  local left=$2 n
  while ((left > 0)); do
    n=$((left < 100000 ? left : 100000))
    cv enqueue "$1" noop --count "$n" >/dev/null
    left=$((left - n))
  done
}
