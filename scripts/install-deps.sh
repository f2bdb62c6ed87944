#!/usr/bin/env bash
# Installs the Debian packages Conveyor needs. Idempotent: packages already
# present are left alone. Needs root (or sudo).
#
#   scripts/install-deps.sh            build and run on SQLite (scripts/run.sh)
#   scripts/install-deps.sh postgres   also build the PostgreSQL plugins (libpqxx)
#   scripts/install-deps.sh test       everything scripts/test.sh needs: the
#                                      PostgreSQL plugins and server, GoogleTest,
#                                      Google Benchmark, clang (fuzzing,
#                                      formatting), chromium, Node.js, and
#                                      nginx and HAProxy (real limiters)
set -euo pipefail

set_name=${1:-run}
# Build and run on SQLite: the core, the admin server and the dashboard.
packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libboost-dev            # Boost.DLL (header-only with BOOST_DLL_USE_STD_FS)
  libsqlitecpp-dev libsqlite3-dev
  libtomlplusplus-dev libfmt-dev libspdlog-dev libcli11-dev
  nlohmann-json3-dev libcpp-httplib-dev
  libprotobuf-dev protobuf-compiler   # the API's messages, generated from proto/ at build time
  libcurl4-openssl-dev libssl-dev     # HTTP delivery (delivery/): libcurl multi, HMAC signing
)
postgres_build=(libpqxx-dev libpq-dev)
case "$set_name" in
  run) ;;
  postgres) packages+=("${postgres_build[@]}") ;;
  test)
    packages+=("${postgres_build[@]}")
    packages+=(postgresql-15 postgresql-client-15)  # the throwaway server of the tests
    packages+=(libgtest-dev libgmock-dev googletest libbenchmark-dev)
    packages+=(clang clang-format)
    packages+=(prometheus)  # promtool checks a /metrics scrape
    packages+=(libclang-rt-14-dev)  # libFuzzer and sanitizer runtimes for scripts/fuzz.sh
    # The dashboard's browser test: Debian's chromium, driven by playwright-core from npm.
    packages+=(chromium)
    packages+=(python3)  # the reference Python worker (clients/python) and its tests
    packages+=(nginx haproxy)  # real limiters (limit_req, stick tables) of limiter_downstream_tests
    packages+=(pgbouncer)  # the PostgreSQL tests put PgBouncer (transaction and session mode) in front
    packages+=(ccache)  # the five builds of scripts/test.sh recompile little on a re-run
    packages+=(file)  # CPack's dpkg-shlibdeps reads binaries with file(1) (the .deb stage)
    # Node.js may come from elsewhere (NodeSource's nodejs bundles npm, and Debian's npm
    # conflicts with it): add Debian's only for a command that is missing.
    command -v node >/dev/null || packages+=(nodejs)
    command -v npm >/dev/null || packages+=(npm)
    ;;
  *)
    echo "usage: $0 [run|postgres|test] (got '$set_name')" >&2
    exit 2
    ;;
esac

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
