#!/usr/bin/env bash
# CTest workers_drain.<storage>: builds the Node worker (clients/node/run.sh
# --build-only) and runs drain_test.py with the Python worker from the source
# tree.   run.sh STORAGE WORK_DIR SOURCE_DIR   with CONVEYOR_BIN set.
# Without python3, node or npm the test is skipped locally and fails under
# CI=true: CI must never pass by skipping.
set -euo pipefail
storage=${1:?usage: run.sh STORAGE WORK_DIR SOURCE_DIR}
work=${2:?usage: run.sh STORAGE WORK_DIR SOURCE_DIR}
src=$(cd "${3:?usage: run.sh STORAGE WORK_DIR SOURCE_DIR}" && pwd)

missing=()
for tool in python3 node npm; do command -v $tool >/dev/null || missing+=("$tool"); done
if ((${#missing[@]})); then
  if [[ ${CI:-} == true ]]; then
    echo "workers drain test FAILED: missing ${missing[*]}; scripts/install-deps.sh test installs them" >&2
    exit 1
  fi
  echo "workers drain test SKIPPED: missing ${missing[*]}"
  exit 0
fi
bash "$src/clients/node/run.sh" "$work/node" "$src/proto" --build-only >/dev/null
exec python3 "$src/tests/workers/drain_test.py" --storage "$storage" \
  --python-client "$src/clients/python" --node-index "$work/node/dist/src/index.js"
