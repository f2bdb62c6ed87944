#!/usr/bin/env bash
# Sets up and runs Conveyor on the embedded default (SQLite, data/conveyor.db):
# installs the Debian packages it needs, builds, and starts `conveyor serve`
# with config/conveyor.toml. Ctrl-C stops it gracefully.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCONVEYOR_BUILD_TESTS=OFF -DCONVEYOR_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build --target conveyor
echo "conveyor: built build/bin/conveyor; in another terminal try:"
echo "  build/bin/conveyor enqueue email noop --count 2000"
echo "  build/bin/conveyor ratelimit set email --rate 50 --burst 10"
echo "  build/bin/conveyor queues"
echo "  dashboard and API: http://127.0.0.1:8080/"
mkdir -p data  # the database's directory (config/conveyor.toml: data/conveyor.db)
exec build/bin/conveyor --config config/conveyor.toml serve
