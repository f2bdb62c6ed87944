#!/usr/bin/env bash
# The engine embedded as a third party embeds it, from an install alone:
#   1. installs BUILD_DIR into a temporary prefix (cmake --install);
#   2. checks the public headers: each compiles on its own from the prefix,
#      and no internal header (core/internal) sits among them;
#   3. copies the embedding example out of the prefix (share/doc/conveyor/
#      examples/embedded) and builds it with its own CMakeLists.txt,
#      find_package(Conveyor) finding the prefix through CMAKE_PREFIX_PATH only;
#      no build file may refer to the source tree;
#   4. runs it: the engine loads the installed SQLite plugin by name (the
#      package's plugin directory) and runs every job once.
# Exits non-zero on any failure.
#
# Usage: scripts/embed-out-of-tree.sh BUILD_DIR   (a complete build of this tree)
set -euo pipefail

# shellcheck source=scripts/out-of-tree-common.sh
source "$(dirname "$0")/out-of-tree-common.sh" embed-out-of-tree "$@"
trap 'rm -rf "$work"' EXIT

# Only the prefix, given explicitly, may point the build at Conveyor.
unset CMAKE_PREFIX_PATH Conveyor_DIR ConveyorSDK_DIR CONVEYOR_PLUGIN_DIR CONVEYOR_CONFIG \
  CONVEYOR_STORAGE_PLUGIN

# ---- 1. install --------------------------------------------------------------
prefix=$work/prefix
logged "$work/install.log" cmake --install "$build_dir" --prefix "$prefix"
config_file=$(find "$prefix" -name ConveyorConfig.cmake -print -quit)
[[ -n "$config_file" ]] || die "the install lacks ConveyorConfig.cmake"
[[ -n "$(find "$prefix" -name 'libconveyor_core.a' -print -quit)" ]] || die "the install lacks libconveyor_core.a"
for dir in "$source_dir" "$build_dir"; do
  if grep -rIlF -- "$dir/" "$(dirname "$config_file")" >/dev/null; then
    die "the installed package files refer to $dir"
  fi
done
say "installed into $prefix"

# ---- 2. the public headers ---------------------------------------------------
include=$prefix/include
for h in engine config clock rate_limit queue_report validation; do
  [[ -f "$include/conveyor/$h.hpp" ]] || die "the install lacks the public header conveyor/$h.hpp"
done
for f in "$source_dir"/core/internal/conveyor/internal/*.hpp; do
  [[ ! -e "$include/conveyor/$(basename "$f")" && ! -e "$include/conveyor/internal/$(basename "$f")" ]] ||
    die "the internal header $(basename "$f") is installed ($include/conveyor)"
done
cxx=${CXX:-c++}
for h in "$include"/conveyor/*.hpp; do
  echo "#include <conveyor/$(basename "$h")>" >"$work/header.cc"
  logged "$work/header-$(basename "$h").log" "$cxx" -std=c++20 -fsyntax-only -Wall -Wextra -Werror \
    -I "$include" "$work/header.cc"
done
say "public headers compile on their own: $(cd "$include/conveyor" && ls ./*.hpp | tr '\n' ' ')"

# ---- 3. the example, built from the prefix alone ----------------------------
example=$prefix/share/doc/conveyor/examples/embedded
[[ -f "$example/main.cc" && -f "$example/CMakeLists.txt" ]] || die "the install lacks $example"
cp -R "$example" "$work/embedded"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
logged "$work/configure.log" cmake -S "$work/embedded" -B "$work/embedded/build" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror"
logged "$work/build.log" cmake --build "$work/embedded/build"
found=$(sed -n 's/^Conveyor_DIR:[A-Z]*=//p' "$work/embedded/build/CMakeCache.txt")
[[ "$found/" == "$prefix"/* ]] || die "find_package(Conveyor) found '$found', not the prefix"
if grep -rIlF -- "$source_dir/" "$work/embedded/build" >/dev/null; then
  die "the build refers to the source tree: $(grep -rIlF -- "$source_dir/" "$work/embedded/build" | head -3)"
fi
say "built with CMake from the prefix alone (Conveyor_DIR=$found)"

# ---- 4. run it on the installed plugin ---------------------------------------
grep -qaF "$prefix/lib/conveyor/plugins" "$work/embedded/build/embedded_example" ||
  die "the example was not compiled with the prefix's plugin directory (CONVEYOR_PACKAGE_PLUGIN_DIR)"
out=$("$work/embedded/build/embedded_example" "$work/example.db" 2>&1) ||
  die "the embedded example failed: $out"
grep -q "all 50 jobs ran exactly once" <<<"$out" || die "unexpected output: $out"
grep -q "greetings: 50 completed, limit queue-config" <<<"$out" || die "unexpected report: $out"
say "the embedded engine loaded $prefix/lib/conveyor/plugins/libconveyor-sqlite.so and ran 50 jobs once each"
say "PASS"
