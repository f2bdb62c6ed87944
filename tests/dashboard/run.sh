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

# shellcheck source=tests/node_tools.sh
source "$here/../node_tools.sh"
missing=()
[[ -x $chromium ]] || missing+=("$chromium (apt-get install chromium)")
require_node_tools "dashboard test" "${missing[@]}"

mkdir -p "$work"
cp "$here/package.json" "$here/package-lock.json" "$here/dashboard.test.mjs" "$work/"
cd "$work"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 CONVEYOR_CHROMIUM="$chromium"
npm_ci_once  # again only when the lock file changed: offline once installed
exec node --test --test-reporter=tap --test-concurrency=1 dashboard.test.mjs
