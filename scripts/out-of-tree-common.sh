# Sourced by scripts/embed-out-of-tree.sh and scripts/sdk-out-of-tree.sh (not
# run on its own), as `source .../out-of-tree-common.sh NAME "$@"`: checks the
# command line (BUILD_DIR, a complete build), and sets
#   build_dir   BUILD_DIR, absolute
#   source_dir  this tree
#   work        a fresh temporary directory outside the tree (canonical path:
#               the loader reports canonical paths); the caller's EXIT trap
#               removes it
# and defines say, die and logged, their messages prefixed with NAME.

oot_name=$1
shift
if [[ $# -ne 1 || ! -f "$1/CMakeCache.txt" ]]; then
  echo "usage: $0 BUILD_DIR (a configured and fully built Conveyor build directory)" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/conveyor-${oot_name%%-*}.XXXXXX")
work=$(cd "$work" && pwd -P)
case "$work/" in
  "$source_dir"/*) echo "$oot_name: TMPDIR must be outside the source tree" >&2; rm -rf "$work"; exit 2 ;;
esac

say() { echo "$oot_name: $*"; }
die() { echo "$oot_name: FAIL: $*" >&2; exit 1; }
# Runs a command with its output in a log; on failure shows the log's end.
logged() {  # log-file command...
  local log=$1; shift
  if ! "$@" >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    die "'$*' failed (log above)"
  fi
}
