#!/usr/bin/env bash
# Runs the stock Connect clients test (CTest: connect_clients).
#   run.sh WORK_DIR PROTO_DIR   with CONVEYOR_BIN (and optionally CONVEYOR_PLUGIN_DIR) set.
# WORK_DIR gets a copy of package.json, package-lock.json, buf.gen.yaml and
# the test, its node_modules from `npm ci` (run once per lock file, so later
# runs need no network), and gen/: the connect-es code `buf generate` makes
# from PROTO_DIR, made afresh each run. Without node or npm the test is
# skipped locally and fails under CI=true: CI must never pass by skipping.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=${1:?usage: run.sh WORK_DIR PROTO_DIR}
proto=$(cd "${2:?usage: run.sh WORK_DIR PROTO_DIR}" && pwd)
# shellcheck source=tests/node_tools.sh
source "$here/../node_tools.sh"
require_node_tools "connect clients test"

mkdir -p "$work"
cp "$here/package.json" "$here/package-lock.json" "$here/buf.gen.yaml" "$here/connect.test.mjs" "$work/"
cd "$work"
npm_ci_once
export PATH="$work/node_modules/.bin:$PATH" BUF_CACHE_DIR="$work/buf-cache"
rm -rf gen
buf generate "$proto" --template buf.gen.yaml
export CONVEYOR_PROTO_DIR="$proto"
exec node --test --test-reporter=tap --test-concurrency=1 connect.test.mjs
