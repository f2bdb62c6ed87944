# Sourced by the run.sh of the tests that run node (clients/node,
# tests/connect, tests/dashboard); not run on its own.

# require_node_tools WHAT [MISSING...]: with node or npm missing (or anything
# the caller found missing, given as MISSING), skips the test, printing
# "WHAT SKIPPED: missing ..." (exit 0), or under CI=true fails it (exit 1):
# CI must never pass by skipping.
require_node_tools() {
  local what=$1
  shift
  local missing=("$@")
  command -v node >/dev/null || missing+=("node (apt-get install nodejs)")
  command -v npm >/dev/null || missing+=("npm (apt-get install npm)")
  if ((${#missing[@]})); then
    if [[ ${CI:-} == true ]]; then
      echo "$what FAILED: missing ${missing[*]}; scripts/install-deps.sh test installs them" >&2
      exit 1
    fi
    echo "$what SKIPPED: missing ${missing[*]}"
    exit 0
  fi
}

# npm_ci_once: `npm ci` in the current directory only when package-lock.json
# changed since the last one (offline once installed).
npm_ci_once() {
  if ! cmp -s package-lock.json node_modules/.conveyor-installed-lock 2>/dev/null; then
    npm ci --no-audit --no-fund --prefer-offline --loglevel=error
    cp package-lock.json node_modules/.conveyor-installed-lock
  fi
}
