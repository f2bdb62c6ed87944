#!/bin/bash
# The warning that storage which is neither durable nor multi-process (the
# SDK's in-memory examples) lives in one process only, wherever the command
# line opens storage itself: serve, reads (queues, ratelimit ls, jobs) and
# changes (ratelimit set, queues pause, ...); enqueue has its own. None on
# durable storage.
#   process_local_storage_warning.sh CONVEYOR_BINARY MEMORY_PLUGIN_SO
set -u
conveyor=$1
memory_plugin=$2
dir=$(mktemp -d)
serve_pid=
cleanup() {
  [[ -n $serve_pid ]] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# expect_warning NAME STDERR_FILE CONSEQUENCE: exactly one warning line,
# naming the plugin and what happens.
expect_warning() {
  local n
  n=$(grep -c "warning: storage plugin 'memory_c' is neither durable nor multi-process" "$2")
  [[ $n == 1 ]] || fail "$1: $n warning lines, expected 1; stderr: $(cat "$2")"
  grep -q -- "$3" "$2" || fail "$1: the warning does not say '$3'; stderr: $(cat "$2")"
}

printf '[storage]\nplugin = "%s"\n' "$memory_plugin" >"$dir/memory.toml"
printf '[storage]\nplugin = "sqlite"\n[storage.options]\npath = "%s/c.db"\n' "$dir" >"$dir/sqlite.toml"

# A read sees the command's own empty storage.
"$conveyor" --config "$dir/memory.toml" queues >"$dir/out" 2>"$dir/err" || fail "queues exited $?"
expect_warning "queues" "$dir/err" "this command sees storage of its own, empty, not the jobs of a running server"
grep -q 'conveyor --server URL' "$dir/err" || fail "queues: the warning names no way out: $(cat "$dir/err")"

# A change is made to storage that vanishes with the command.
"$conveyor" --config "$dir/memory.toml" ratelimit set q --rate 5 >"$dir/out" 2>"$dir/err" ||
  fail "ratelimit set exited $?"
expect_warning "ratelimit set" "$dir/err" "the change made here is made to this command's own storage and vanishes when it exits"
"$conveyor" --config "$dir/memory.toml" queues pause q >"$dir/out" 2>"$dir/err" || fail "queues pause exited $?"
expect_warning "queues pause" "$dir/err" "vanishes when it exits"

# A refused change says only why it was refused.
"$conveyor" --config "$dir/memory.toml" ratelimit set q --rate 0 >"$dir/out" 2>"$dir/err" &&
  fail "ratelimit set --rate 0 succeeded"
grep -q 'warning' "$dir/err" && fail "a refused change also warned: $(cat "$dir/err")"

# serve: its log says so at start, before any job runs.
"$conveyor" --config "$dir/memory.toml" serve >"$dir/serve.out" 2>"$dir/serve.err" &
serve_pid=$!
for _ in $(seq 100); do
  grep -q "neither durable nor multi-process" "$dir/serve.err" "$dir/serve.out" && break
  sleep 0.1
done
kill "$serve_pid"
wait "$serve_pid"
status=$?
serve_pid=
[[ $status == 0 ]] || fail "serve exited $status after SIGTERM; log: $(cat "$dir/serve.err" "$dir/serve.out")"
log=$(cat "$dir/serve.err" "$dir/serve.out")
grep -q "storage plugin 'memory_c' is neither durable nor multi-process: the jobs live in this process only and are lost when it stops" <<<"$log" ||
  fail "serve did not warn; log: $log"
grep -q "set \[server\] listen" <<<"$log" || fail "serve without [server] does not say how to reach its jobs; log: $log"

# Durable storage: no warning anywhere.
"$conveyor" --config "$dir/sqlite.toml" ratelimit set q --rate 5 >"$dir/out" 2>"$dir/err" ||
  fail "ratelimit set on sqlite exited $?: $(cat "$dir/err")"
"$conveyor" --config "$dir/sqlite.toml" queues >"$dir/out" 2>>"$dir/err" || fail "queues on sqlite exited $?"
grep -q 'warning' "$dir/err" && fail "durable storage warned: $(cat "$dir/err")"

if ((failures)); then
  echo "process_local_storage_warning: $failures failure(s)"
  exit 1
fi
echo "process_local_storage_warning: PASS"
