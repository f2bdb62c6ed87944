#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each: first over its kept
# regression inputs and seed corpus, then fuzzing for FUZZ_SECONDS (default
# 60). A crash leaves its input in build-fuzz/; keep it in
# fuzz/regressions/<target>/ once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
# -O1, as libFuzzer's documentation builds: the build is most of this
# script's time (the fuzzing itself is bounded by FUZZ_SECONDS).
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  -DCONVEYOR_FUZZ=ON -DCONVEYOR_BUILD_TESTS=OFF -DCONVEYOR_BUILD_BENCHMARKS=OFF -DCONVEYOR_WERROR=ON >/dev/null
targets=(config)
[[ -f fuzz/api_fuzz.cc ]] && targets+=(api)
for t in "${targets[@]}"; do
  cmake --build build-fuzz --target "${t}_fuzz"
done
for t in "${targets[@]}"; do
  work=build-fuzz/corpus-$t
  mkdir -p "$work" "fuzz/regressions/$t"  # git keeps no empty folders
  echo "conveyor: ${t}_fuzz: replaying regressions and seeds"
  build-fuzz/bin/${t}_fuzz -runs=0 fuzz/regressions/$t fuzz/corpus/$t
  echo "conveyor: ${t}_fuzz: fuzzing for ${seconds}s"
  (cd build-fuzz && bin/${t}_fuzz -max_total_time="$seconds" -max_len=8192 -print_final_stats=1 \
    "corpus-$t" ../fuzz/corpus/$t 2>&1 | tail -n 12)
done
echo "conveyor: fuzzing passed: ${targets[*]}"
