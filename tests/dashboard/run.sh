#!/usr/bin/env bash
# Runs the dashboard end-to-end test (CTest: dashboard_e2e).
#   run.sh WORK_DIR   with CONVEYOR_BIN (and optionally CONVEYOR_PLUGIN_DIR,
#                     CONVEYOR_DASHBOARD_ARTIFACTS, CONVEYOR_CHROMIUM) set.
# WORK_DIR gets a copy of package.json, package-lock.json and the test, and
# its node_modules from `npm ci`, run once per lock file (so later runs need
# no network). Without chromium, node or npm the test is skipped locally and
# fails under CI=true: CI must never pass by skipping.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=${1:?usage: run.sh WORK_DIR}
chromium=${CONVEYOR_CHROMIUM:-/usr/bin/chromium}

missing=()
[[ -x $chromium ]] || missing+=("$chromium (apt-get install chromium)")
command -v node >/dev/null || missing+=("node (apt-get install nodejs)")
command -v npm >/dev/null || missing+=("npm (apt-get install npm)")
if ((${#missing[@]})); then
  if [[ ${CI:-} == true ]]; then
    echo "dashboard test FAILED: missing ${missing[*]}; scripts/install-deps.sh test installs them" >&2
    exit 1
  fi
  echo "dashboard test SKIPPED: missing ${missing[*]}"
  exit 0
fi

mkdir -p "$work"
cp "$here/package.json" "$here/package-lock.json" "$here/dashboard.test.mjs" "$work/"
cd "$work"
# npm ci again only when the lock file changed: offline once installed.
if ! cmp -s package-lock.json node_modules/.conveyor-installed-lock 2>/dev/null; then
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --prefer-offline --loglevel=error
  cp package-lock.json node_modules/.conveyor-installed-lock
fi
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 CONVEYOR_CHROMIUM="$chromium"
exec node --test --test-reporter=tap --test-concurrency=1 dashboard.test.mjs
