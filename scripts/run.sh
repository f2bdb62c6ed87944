#!/usr/bin/env bash
# Sets up and runs Conveyor on the embedded default (SQLite, data/conveyor.db):
# installs the Debian packages running needs (scripts/install-deps.sh run:
# no PostgreSQL, no test frameworks), builds the command and its plugins, and
# starts `conveyor serve` with config/conveyor.toml. Ctrl-C stops it gracefully.
#
# The PostgreSQL plugins are built too when libpqxx is installed
# (scripts/install-deps.sh postgres installs it; then run this again).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh run
# Left out: the conformance tool (it needs GoogleTest) and, without libpqxx,
# the PostgreSQL plugins.
skip="sdk/conformance"
if pkg-config --exists libpqxx 2>/dev/null; then
  with_postgres=1
else
  with_postgres=0
  skip="$skip;postgres;postgres-queue;postgres-common"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCONVEYOR_BUILD_TESTS=OFF \
  -DCONVEYOR_BUILD_BENCHMARKS=OFF "-DCONVEYOR_SKIP_PARTS=$skip" >/dev/null
targets=(conveyor)  # builds the SQLite plugin with it
((with_postgres)) && targets+=(conveyor_plugin_postgres conveyor_plugin_postgres_queue)
cmake --build build --target "${targets[@]}"
echo "conveyor: built build/bin/conveyor and its plugins in build/lib/conveyor/plugins"
((with_postgres)) ||
  echo "conveyor: PostgreSQL plugins not built (no libpqxx): sudo scripts/install-deps.sh postgres, then run this again"
echo "conveyor: in another terminal try (README.md, \"Five minutes with it\"):"
echo "  build/bin/conveyor ratelimit set email --rate 50 --burst 10"
echo "  build/bin/conveyor enqueue email noop --count 2000"
echo "  build/bin/conveyor queues"
echo "  dashboard and API: http://127.0.0.1:8080/"
mkdir -p data  # the database's directory (config/conveyor.toml: data/conveyor.db)
exec build/bin/conveyor --config config/conveyor.toml serve
