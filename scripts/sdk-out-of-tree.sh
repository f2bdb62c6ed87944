#!/usr/bin/env bash
# The storage-plugin SDK as a third party uses it, from an install alone:
#   1. installs BUILD_DIR into a temporary prefix (cmake --install);
#   2. copies the example plugins out of the prefix (share/doc/conveyor/
#      examples) into a temporary directory: nothing below refers to the
#      source tree, and step 3 checks that no build file does;
#   3. builds each example with its own CMakeLists.txt, find_package(ConveyorSDK)
#      finding the prefix through CMAKE_PREFIX_PATH only;
#   4. builds the C example again with plain cc and pkg-config (conveyor-sdk);
#   5. runs the installed conveyor-conformance on every plugin built;
#   6. runs the installed conveyor: it finds its own plugins by name through
#      <prefix>/bin/../lib/conveyor/plugins, and serves an example plugin given
#      by path (enqueue, rate limit and queues through the admin API).
# Exits non-zero on any failure.
#
# Usage: scripts/sdk-out-of-tree.sh BUILD_DIR   (a complete build of this tree)
set -euo pipefail

# shellcheck source=scripts/out-of-tree-common.sh
source "$(dirname "$0")/out-of-tree-common.sh" sdk-out-of-tree "$@"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# Nothing from the caller's environment may point the builds or the binaries
# at this tree: only the prefix is given, explicitly.
unset CMAKE_PREFIX_PATH ConveyorSDK_DIR PKG_CONFIG_PATH CONVEYOR_PLUGIN_DIR CONVEYOR_CONFIG \
  CONVEYOR_STORAGE_PLUGIN CONVEYOR_SERVER_LISTEN CONVEYOR_ADMIN_TOKEN

# ---- 1. install --------------------------------------------------------------
prefix=$work/prefix
logged "$work/install.log" cmake --install "$build_dir" --prefix "$prefix"
conformance=$prefix/bin/conveyor-conformance
conveyor=$prefix/bin/conveyor
for f in "$conformance" "$conveyor" "$prefix/include/conveyor/storage_plugin.h" \
         "$prefix/include/conveyor/storage_plugin.hpp"; do
  [[ -f "$f" ]] || die "the install lacks $f"
done
config_file=$(find "$prefix" -name ConveyorSDKConfig.cmake -print -quit)
pc_file=$(find "$prefix" -name conveyor-sdk.pc -print -quit)
[[ -n "$config_file" ]] || die "the install lacks ConveyorSDKConfig.cmake"
[[ -n "$pc_file" ]] || die "the install lacks conveyor-sdk.pc"
# The package files must point into the prefix only, never at this tree or build.
for dir in "$source_dir" "$build_dir"; do
  if grep -rIlF -- "$dir/" "$(dirname "$config_file")" "$pc_file" >/dev/null; then
    die "the installed package files refer to $dir: $(grep -rIlF -- "$dir/" "$(dirname "$config_file")" "$pc_file")"
  fi
done
say "installed into $prefix"

# ---- 2. the examples, from the install --------------------------------------
examples=$prefix/share/doc/conveyor/examples
[[ -f "$examples/memory_c/memory.c" && -f "$examples/memory_cpp/memory.cc" ]] ||
  die "the install lacks the example plugins in $examples"
cp -R "$examples/memory_c" "$examples/memory_cpp" "$work/"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

# ---- 3. CMake builds from the prefix alone ----------------------------------
build_example() {  # name, extra cmake args...
  local name=$1; shift
  local dir=$work/$name
  logged "$dir/configure.log" cmake -S "$dir" -B "$dir/build" "${generator[@]}" \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
  logged "$dir/build.log" cmake --build "$dir/build"
  local found
  found=$(sed -n 's/^ConveyorSDK_DIR:[A-Z]*=//p' "$dir/build/CMakeCache.txt")
  [[ "$found/" == "$prefix"/* ]] || die "$name: find_package(ConveyorSDK) found '$found', not the prefix"
  if grep -rIlF -- "$source_dir/" "$dir/build" >/dev/null; then
    die "$name: the build refers to the source tree $source_dir: $(grep -rIlF -- "$source_dir/" "$dir/build" | head -3)"
  fi
  say "$name: built with CMake from the prefix alone (ConveyorSDK_DIR=$found)"
}
build_example memory_c -DCMAKE_C_FLAGS="-Wall -Wextra -Wpedantic -Werror"
build_example memory_cpp -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror"
memory_c=$work/memory_c/build/libconveyor-memory_c.so
memory_cpp=$work/memory_cpp/build/libconveyor-memory_cpp.so
[[ -f "$memory_c" && -f "$memory_cpp" ]] || die "the example builds did not produce their plugins"
# The C example's project enables C alone: the package config must need no C++.
grep -q "^CMAKE_CXX_COMPILER:" "$work/memory_c/build/CMakeCache.txt" &&
  die "memory_c (LANGUAGES C) ended up with a C++ compiler configured"

# ---- 4. pkg-config and plain cc ---------------------------------------------
pc_dir=$(dirname "$pc_file")
# PKG_CONFIG_LIBDIR replaces the default search path: only the prefix counts.
pc() { PKG_CONFIG_LIBDIR="$pc_dir" pkg-config "$@"; }
pc --exists conveyor-sdk || die "pkg-config cannot read $pc_file"
cflags=$(pc --cflags conveyor-sdk)
cc=${CC:-cc}
logged "$work/pkg-config-build.log" "$cc" -std=c99 -Wall -Wextra -Wpedantic -Werror $cflags \
  -fPIC -shared -fvisibility=hidden -pthread -Wl,--no-undefined \
  -o "$work/libconveyor-memory_pc.so" "$work/memory_c/memory.c"
pc_conformance=$(pc --variable=conformance conveyor-sdk)
[[ -x "$pc_conformance" ]] || die "pkg-config's conformance variable ($pc_conformance) is not executable"
say "memory_c: built with $cc $cflags (pkg-config conveyor-sdk $(pc --modversion conveyor-sdk))"

# ---- 5. conformance ----------------------------------------------------------
for plugin in "$memory_c" "$memory_cpp" "$work/libconveyor-memory_pc.so"; do
  log=$work/conformance-$(basename "$plugin" .so).log
  if ! "$conformance" --plugin "$plugin" >"$log" 2>&1; then
    grep -E "FAILED|CRASHED|TIMEOUT|ERROR|conveyor-conformance:" "$log" >&2 || tail -n 40 "$log" >&2
    die "conveyor-conformance failed on $plugin"
  fi
  say "$(basename "$plugin"): $(grep -E '^conveyor-conformance: [0-9]+ passed' "$log")"
done

# ---- 6. the installed conveyor ----------------------------------------------
# conveyor looks for plugins by name in <its directory>/../lib/conveyor/plugins.
installed_plugin=$(find "$prefix" -name 'libconveyor-*.so' -path '*/conveyor/plugins/*' -print -quit)
[[ -n "$installed_plugin" ]] || die "the install has no plugin in a conveyor/plugins directory"
[[ "$installed_plugin" == "$prefix/lib/conveyor/plugins/"* ]] ||
  die "plugins are installed in $(dirname "$installed_plugin"), but conveyor looks in" \
      "$prefix/lib/conveyor/plugins (<bindir>/../lib/conveyor/plugins)"
name=$(basename "$installed_plugin" .so)
name=${name#libconveyor-}
info=$("$conveyor" plugin info "$name") || die "the installed conveyor cannot load its own plugin '$name' by name"
grep -qF "$installed_plugin" <<<"$info" || die "plugin info $name did not resolve to $installed_plugin: $info"
say "installed conveyor finds its plugins by name in $prefix/lib/conveyor/plugins ($name)"
info=$("$conveyor" plugin info "$memory_c") || die "conveyor plugin info $memory_c failed"
grep -q "memory_c" <<<"$info" || die "plugin info does not name memory_c: $info"

# serve on the C example (in memory: everything goes through the server's API).
start_server() {
  local attempt
  for attempt in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 30000))
    cat >"$work/conveyor.toml" <<EOF
[storage]
plugin = "$memory_c"
[engine]
poll_interval_ms = 100
[server]
listen = "127.0.0.1:$port"
allow_unauthenticated = true
EOF
    "$conveyor" --config "$work/conveyor.toml" serve >"$work/serve.log" 2>&1 &
    server_pid=$!
    url=http://127.0.0.1:$port
    local i
    for i in $(seq 1 100); do  # up to 20 s
      if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
      if "$conveyor" --server "$url" queues >/dev/null 2>&1; then return 0; fi
      sleep 0.2
    done
    if kill -0 "$server_pid" 2>/dev/null; then
      tail -n 20 "$work/serve.log" >&2
      die "conveyor serve did not answer on $url within 20 s"
    fi
    wait "$server_pid" || true
    server_pid=""
    grep -q "cannot listen" "$work/serve.log" || { tail -n 20 "$work/serve.log" >&2; die "conveyor serve exited"; }
  done
  die "no free port found for conveyor serve"
}
start_server
logged "$work/ratelimit.log" "$conveyor" --server "$url" ratelimit set email --rate 500 --burst 50
logged "$work/enqueue.log" "$conveyor" --server "$url" enqueue email noop --count 200
for i in $(seq 1 150); do  # up to 30 s
  queues=$("$conveyor" --server "$url" --json queues)
  if grep -Eq '"completed": ?200' <<<"$queues"; then break; fi
  sleep 0.2
done
grep -Eq '"completed": ?200' <<<"$queues" || die "the 200 jobs did not complete on memory_c: $queues"
grep -Eq '"source": ?"override"' <<<"$queues" || die "the rate-limit override is not shown: $queues"
kill -INT "$server_pid"
wait "$server_pid" || die "conveyor serve did not stop cleanly on SIGINT: $(tail -n 5 "$work/serve.log")"
server_pid=""
say "installed conveyor served memory_c: 200 jobs ran under a rate-limit override"
say "PASS"
