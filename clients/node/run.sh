#!/usr/bin/env bash
# Builds the node worker and runs its tests against a real `conveyor serve`
# (CTest: node_worker).
#   run.sh WORK_DIR PROTO_DIR   with CONVEYOR_BIN (and optionally CONVEYOR_PLUGIN_DIR) set.
#   run.sh WORK_DIR PROTO_DIR --build-only   builds, runs no test (other tests
#   run the built worker: WORK_DIR/dist/src/index.js).
# WORK_DIR gets a copy of the package (package.json, package-lock.json,
# buf.gen.yaml, tsconfig.json, src/, test/), its node_modules from `npm ci`
# (run once per lock file, so later runs need no network), and src/gen/ and
# dist/ from `npm run build` (buf generate PROTO_DIR + tsc), made afresh each
# run. Without node or npm the test is skipped locally and fails under
# CI=true: CI must never pass by skipping.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=${1:?usage: run.sh WORK_DIR PROTO_DIR}
proto=$(cd "${2:?usage: run.sh WORK_DIR PROTO_DIR}" && pwd)
# shellcheck source=tests/node_tools.sh
source "$here/../../tests/node_tools.sh"
require_node_tools "node worker test"

mkdir -p "$work"
cd "$work"
rm -rf src test
cp "$here/package.json" "$here/package-lock.json" "$here/buf.gen.yaml" "$here/tsconfig.json" .
cp -r "$here/src" "$here/test" .
rm -rf src/gen # a local build's, if any: made afresh below
npm_ci_once
export PATH="$work/node_modules/.bin:$PATH" BUF_CACHE_DIR="$work/buf-cache" CONVEYOR_PROTO_DIR="$proto"
npm run --silent build
[[ ${3:-} == --build-only ]] && exit 0
exec node --test --test-reporter=tap --test-concurrency=1 dist/test/*.test.js
