#!/usr/bin/env bash
# Installs every Debian package Conveyor needs to build, test and run.
# Idempotent: packages already present are left alone. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libboost-dev            # Boost.DLL (header-only with BOOST_DLL_USE_STD_FS)
  libsqlitecpp-dev libsqlite3-dev
  libpqxx-dev libpq-dev
  libtomlplusplus-dev libfmt-dev libspdlog-dev libcli11-dev
  nlohmann-json3-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  postgresql-15 postgresql-client-15
)
if [[ "${CONVEYOR_DEPS_TEST:-0}" == 1 ]]; then
  packages+=(clang clang-format)
  packages+=(libclang-rt-14-dev)  # libFuzzer and sanitizer runtimes for scripts/fuzz.sh
  # The dashboard's browser test: Debian's chromium, driven by playwright-core from npm.
  packages+=(chromium)
  # Node.js may come from elsewhere (NodeSource's nodejs bundles npm, and Debian's npm
  # conflicts with it): add Debian's only for a command that is missing.
  command -v node >/dev/null || packages+=(nodejs)
  command -v npm >/dev/null || packages+=(npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""
  [[ $(id -u) -eq 0 ]] || sudo_cmd="sudo"
  echo "conveyor: installing ${missing[*]}" >&2
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
