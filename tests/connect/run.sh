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

missing=()
command -v node >/dev/null || missing+=("node (apt-get install nodejs)")
command -v npm >/dev/null || missing+=("npm (apt-get install npm)")
if ((${#missing[@]})); then
  if [[ ${CI:-} == true ]]; then
    echo "connect clients test FAILED: missing ${missing[*]}; scripts/install-deps.sh test installs them" >&2
    exit 1
  fi
  echo "connect clients test SKIPPED: missing ${missing[*]}"
  exit 0
fi

mkdir -p "$work"
cp "$here/package.json" "$here/package-lock.json" "$here/buf.gen.yaml" "$here/connect.test.mjs" "$work/"
cd "$work"
if ! cmp -s package-lock.json node_modules/.conveyor-installed-lock 2>/dev/null; then
  npm ci --no-audit --no-fund --prefer-offline --loglevel=error
  cp package-lock.json node_modules/.conveyor-installed-lock
fi
export PATH="$work/node_modules/.bin:$PATH" BUF_CACHE_DIR="$work/buf-cache"
rm -rf gen
buf generate "$proto" --template buf.gen.yaml
export CONVEYOR_PROTO_DIR="$proto"
exec node --test --test-reporter=tap --test-concurrency=1 connect.test.mjs
