#!/usr/bin/env bash
# The unchanged core on the postgres-queue plugin, end to end, through the
# `conveyor` command: enqueue (due and delayed), a rate-limit override, serve
# until every job completed, queues and ratelimit listings, a clean stop.
#   serve_end_to_end_test.sh CONVEYOR_BINARY
# Needs CONVEYOR_TEST_PG_DSN; without it the test is skipped (exit 77), or
# fails when CI=true.
set -euo pipefail
conveyor=${1:?usage: serve_end_to_end_test.sh CONVEYOR_BINARY}
if [[ -z ${CONVEYOR_TEST_PG_DSN:-} ]]; then
  if [[ ${CI:-} == true ]]; then echo "CI=true but CONVEYOR_TEST_PG_DSN is not set" >&2; exit 1; fi
  echo "set CONVEYOR_TEST_PG_DSN to run this test"; exit 77
fi
psql_bin=$(command -v psql || echo /usr/lib/postgresql/15/bin/psql)
work=$(mktemp -d /tmp/conveyor-pgq-e2e.XXXXXX)
schema="e2e_$(date +%s)_$$"
serve_pid=
cleanup() {
  [[ -n $serve_pid ]] && kill "$serve_pid" 2>/dev/null || true
  PGOPTIONS="-c client_min_messages=warning" "$psql_bin" -X -q -d "$CONVEYOR_TEST_PG_DSN" \
    -c "DROP SCHEMA IF EXISTS \"$schema\" CASCADE" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [[ -f $work/serve.log ]] && tail -20 "$work/serve.log" >&2; exit 1; }

cat >"$work/conveyor.toml" <<TOML
[storage]
plugin = "postgres-queue"
[storage.options]
dsn = "$CONVEYOR_TEST_PG_DSN"
schema = "$schema"
slots = 4
rotation_interval_ms = 200
TOML
cv() { "$conveyor" --config "$work/conveyor.toml" "$@"; }
completed() { cv --json queues | tr -d ' \n' | grep -o '"completed":[0-9]*' | head -1 | cut -d: -f2; }

cv enqueue e2e noop --count 3000 | grep -q "enqueued 3000 jobs" || fail "enqueue"
cv enqueue e2e noop --count 2 --delay 1 | grep -q "enqueued 2 jobs" || fail "delayed enqueue"
cv ratelimit set e2e --rate 5000 --burst 500 | grep -q "limited to 5000/s" || fail "ratelimit set"
cv ratelimit ls | grep -q "^e2e .*5000 .*500" || fail "ratelimit ls does not list the override"
cv queues | grep -q "^e2e .* 3000 .* 2 " || fail "queues before serve: $(cv queues)"

"$conveyor" --config "$work/conveyor.toml" serve >"$work/serve.log" 2>&1 &
serve_pid=$!
deadline=$((SECONDS + 90))
while [[ $(completed) != 3002 ]]; do
  kill -0 "$serve_pid" 2>/dev/null || fail "serve exited early"
  ((SECONDS < deadline)) || fail "not all jobs completed: $(cv queues)"
  sleep 0.3
done
grep -q "storage 'postgres-queue' (queue-storage)" "$work/serve.log" || fail "serve did not report the plugin"
cv --json queues | tr -d ' \n' | grep -q '"source":"override"' || fail "override not applied"
kill -TERM "$serve_pid"
code=0; wait "$serve_pid" || code=$?
((code == 0)) || fail "serve did not stop cleanly (exit $code)"
serve_pid=
rotations=$("$psql_bin" -X -A -t -q -d "$CONVEYOR_TEST_PG_DSN" -c "SELECT rotations FROM \"$schema\".ring")
((rotations >= 1)) || fail "the ring never rotated"
echo "PASS: 3002 jobs completed through conveyor serve on postgres-queue; $rotations ring rotations"
