#!/bin/bash
# Installs BUILD_DIR into a temporary prefix and checks that every file the
# installed docs and headers cite is installed (check_installed_docs.py).
#   installed_docs_cite_installed_files.sh BUILD_DIR
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >"$prefix.log" 2>&1 || {
  cat "$prefix.log"
  rm -f "$prefix.log"
  exit 1
}
rm -f "$prefix.log"
python3 "$here/check_installed_docs.py" "$prefix"
