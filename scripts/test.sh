#!/usr/bin/env bash
# Sets up and runs every test: installs the Debian packages, compiles the
# core and its tests with clang's thread-safety analysis (the mutex
# annotations checked, as errors), builds with warnings as errors, runs the
# whole suite (CTest), then builds again under
# AddressSanitizer + UndefinedBehaviorSanitizer and runs the suite there too,
# then a third time under ThreadSanitizer for the core, server and SQLite
# tests (CTest labels core, server, sqlite), then fuzzes the parsers. The
# regular build is also packed into a .deb, installed, checked and purged.
# A throwaway PostgreSQL cluster on 127.0.0.1 is started for the PostgreSQL
# tests and always stopped. With CI=true, PostgreSQL tests fail instead of
# skipping when no server is reachable.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bash scripts/install-deps.sh test
jobs=$(nproc)

pg_dir=$(mktemp -d /tmp/conveyor-pg.XXXXXX)
cleanup() { bash "$root/scripts/pg-cluster.sh" stop "$pg_dir"; rm -rf "$pg_dir"; }
trap cleanup EXIT
if [[ -z "${CONVEYOR_TEST_PG_DSN:-}" ]]; then
  CONVEYOR_TEST_PG_DSN=$(bash scripts/pg-cluster.sh start "$pg_dir" "${CONVEYOR_TEST_PG_PORT:-54329}")
fi
export CONVEYOR_TEST_PG_DSN
echo "conveyor: PostgreSQL for tests at $CONVEYOR_TEST_PG_DSN"

stage_start=$SECONDS
stage() {  # name: prints how long the previous stage took
  echo "conveyor: $1 (previous stage: $((SECONDS - stage_start)) s)"
  stage_start=$SECONDS
}

# build-dir, then cmake args, then optionally `--` and the ctest args that
# select tests (and, with TARGETS set, only those targets are built).
run_suite() {
  local dir=$1; shift
  local cmake_args=() ctest_args=()
  while (($#)) && [[ $1 != -- ]]; do cmake_args+=("$1"); shift; done
  (($#)) && shift && ctest_args=("$@")
  cmake -S . -B "$dir" -G Ninja -DCONVEYOR_WERROR=ON "${cmake_args[@]}" >/dev/null
  # shellcheck disable=SC2086  # TARGETS is a list of names
  cmake --build "$dir" -j "$jobs" ${TARGETS:+--target $TARGETS}
  (cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 600 "${ctest_args[@]}")
}

# Line tables only (-g1): stack traces keep file and line, and the builds
# take about a quarter less time than with full debug info.
line_tables=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
             "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
             "-DCMAKE_CXX_FLAGS_DEBUG=-g1" "-DCMAKE_C_FLAGS_DEBUG=-g1")

stage "clang -Wthread-safety build of the core library and core_tests (compiled, not run)"
# Clang checks the mutex annotations (GUARDED_BY, REQUIRES, EXCLUDES:
# core/internal/conveyor/internal/mutex.hpp), which GCC ignores. First, so a lock
# error fails in minutes. Only the core targets, at -O0 without debug info:
# the diagnostics are the point. All warnings are errors here too (the
# project builds warning-free under clang).
CC=clang CXX=clang++ cmake -S . -B build-clang -G Ninja -DCONVEYOR_WERROR=ON \
  -DCONVEYOR_THREAD_SAFETY=ON -DCONVEYOR_BUILD_BENCHMARKS=OFF -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG=-g0 -DCMAKE_C_FLAGS_DEBUG=-g0 >/dev/null
cmake --build build-clang -j "$jobs" --target conveyor_core core_tests
stage "regular build and the whole suite"
run_suite build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo "${line_tables[@]}"
stage "the Debian package: packed from the regular build, installed, checked and purged"
# cmake/Packaging.cmake; packaging/test-deb.sh runs the installed server as
# the conveyor user (no systemd here) and purges the package on exit.
rm -f build-test/conveyor_*.deb
(cd build-test && cpack -G DEB >/dev/null)
bash packaging/test-deb.sh build-test/conveyor_*_"$(dpkg --print-architecture)".deb
stage "AddressSanitizer + UBSan build and the whole suite"
(
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # The downstream tests pace themselves at a downstream's 20/s for about a
  # minute each: run once, in the regular stage.
  run_suite build-asan -DCMAKE_BUILD_TYPE=Debug "${line_tables[@]}" -DCONVEYOR_SANITIZE=ON \
    -DCONVEYOR_BUILD_BENCHMARKS=OFF \
    -- -LE '^downstream$'
)
stage "ThreadSanitizer build: core, server, SQLite and HTTP delivery tests"
(
  # Every report is a failure, except inside libraries we do not build
  # (scripts/tsan.supp). RelWithDebInfo: TSan's slowdown is large enough
  # without -O0 on top.
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp
  TARGETS="core_tests server_tests sqlite_storage_tests delivery_tests" run_suite build-tsan \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "${line_tables[@]}" -DCONVEYOR_SANITIZE=thread \
    -DCONVEYOR_BUILD_BENCHMARKS=OFF \
    -- -L '^(core|server|sqlite|delivery)$'
)
stage "fuzzing"
# Fuzz the parsers for a bounded time (replays kept regression inputs first).
FUZZ_SECONDS=${FUZZ_SECONDS:-30} bash scripts/fuzz.sh
stage "done"
echo "conveyor: all tests passed (clang thread-safety check, regular, ASan/UBSan and TSan builds, fuzzing) in $SECONDS s"
