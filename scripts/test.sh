#!/usr/bin/env bash
# Sets up and runs every test: installs the Debian packages, builds with
# warnings as errors, runs the whole suite (CTest), then builds again under
# AddressSanitizer + UndefinedBehaviorSanitizer and runs the suite there too.
# A throwaway PostgreSQL cluster on 127.0.0.1 is started for the PostgreSQL
# tests and always stopped. With CI=true, PostgreSQL tests fail instead of
# skipping when no server is reachable.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
CONVEYOR_DEPS_TEST=1 bash scripts/install-deps.sh
jobs=$(nproc)

pg_dir=$(mktemp -d /tmp/conveyor-pg.XXXXXX)
cleanup() { bash "$root/scripts/pg-cluster.sh" stop "$pg_dir"; rm -rf "$pg_dir"; }
trap cleanup EXIT
if [[ -z "${CONVEYOR_TEST_PG_DSN:-}" ]]; then
  CONVEYOR_TEST_PG_DSN=$(bash scripts/pg-cluster.sh start "$pg_dir" "${CONVEYOR_TEST_PG_PORT:-54329}")
fi
export CONVEYOR_TEST_PG_DSN
echo "conveyor: PostgreSQL for tests at $CONVEYOR_TEST_PG_DSN"

run_suite() {  # build-dir, extra cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja -DCONVEYOR_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  (cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 600)
}

run_suite build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo
(
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DCONVEYOR_SANITIZE=ON -DCONVEYOR_BUILD_BENCHMARKS=OFF
)
# Fuzz the parsers for a bounded time (replays kept regression inputs first).
FUZZ_SECONDS=${FUZZ_SECONDS:-60} bash scripts/fuzz.sh
echo "conveyor: all tests passed (regular and sanitizer builds, fuzzing)"
