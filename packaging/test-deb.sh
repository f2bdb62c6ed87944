#!/usr/bin/env bash
# Installs a built conveyor .deb on this system (Debian 12, as root; a
# throwaway machine or container: no systemd needed), checks it, and purges it:
#
#   packaging/test-deb.sh build-pkg/conveyor_0.1.0_amd64.deb
#
# Checks: the declared dependencies (dpkg-shlibdeps), the command and its
# version, every installed plugin loads from /usr/lib/conveyor/plugins with no
# CONVEYOR_PLUGIN_DIR, the conveyor user, /var/lib/conveyor, the conffile
# /etc/conveyor/conveyor.toml; `conveyor serve --config
# /etc/conveyor/conveyor.toml` as the conveyor user (runuser, not systemd)
# answers on 127.0.0.1, runs enqueued jobs and stops on SIGTERM with exit 0;
# `systemd-analyze verify` of the unit (when installed); `dpkg -r` keeps the
# config and the data, `dpkg --purge` removes the config, both the files.
#
# Leaves the system as it found it: the package purged, and the conveyor
# user, its group and /var/lib/conveyor removed when this run made them.
# Refuses to run while a conveyor package is installed.
set -euo pipefail

started=$SECONDS
log() { echo "test-deb: $*"; }
die() {
  echo "test-deb: FAIL: $*" >&2
  exit 1
}
step() { log "[$((SECONDS - started)) s] $*"; }

(($# == 1)) || {
  echo "usage: $0 path/to/conveyor_VERSION_ARCH.deb" >&2
  exit 2
}
[[ $(id -u) -eq 0 ]] || die "run as root (it installs a package and adds a user)"
deb=$(realpath -e "$1")
[[ $deb == *.deb ]] || die "$deb is not a .deb"
# Nowhere near a source tree: no config/conveyor.toml relative to the
# working directory may stand in for the installed one.
cd /

pkg_status() { dpkg-query -W -f='${db:Status-Status}' conveyor 2>/dev/null || echo not-installed; }
[[ $(pkg_status) == not-installed ]] ||
  die "a conveyor package is installed here ($(pkg_status)); purge it first (dpkg --purge conveyor)"

user_existed=false
getent passwd conveyor >/dev/null && user_existed=true
group_existed=false
getent group conveyor >/dev/null && group_existed=true
datadir_existed=false
[[ -e /var/lib/conveyor ]] && datadir_existed=true

work=$(mktemp -d)
runuser_pid=""
cleanup() {
  local rc=$?
  if [[ -n $runuser_pid ]] && kill -0 "$runuser_pid" 2>/dev/null; then
    pkill -KILL -P "$runuser_pid" 2>/dev/null || true
    kill -KILL "$runuser_pid" 2>/dev/null || true
  fi
  if [[ $(pkg_status) != not-installed ]]; then
    dpkg --purge conveyor >/dev/null 2>&1 || true
  fi
  if ! $user_existed && getent passwd conveyor >/dev/null; then userdel conveyor || true; fi
  if ! $group_existed && getent group conveyor >/dev/null; then groupdel conveyor || true; fi
  if ! $datadir_existed; then rm -rf /var/lib/conveyor; fi
  rm -rf "$work"
  if ((rc == 0)); then
    log "PASS in $((SECONDS - started)) s"
  else
    log "FAIL (exit $rc) after $((SECONDS - started)) s; cleaned up"
  fi
}
trap cleanup EXIT

version=$(dpkg-deb -f "$deb" Version)
depends=$(dpkg-deb -f "$deb" Depends)
step "package $(dpkg-deb -f "$deb" Package) $version ($(dpkg-deb -f "$deb" Architecture)); Depends: $depends"
# dpkg-shlibdeps ran: the libraries the binaries and plugins link are declared.
for lib in libc6 libstdc++6 libsqlite3-0 adduser; do
  [[ ", $depends," == *", $lib "* || ", $depends," == *", $lib,"* ]] ||
    die "Depends does not name $lib (did dpkg-shlibdeps run?): $depends"
done
contents=$(dpkg-deb -c "$deb")
grep -q ' \./etc/conveyor/conveyor\.toml$' <<<"$contents" || die "the package has no /etc/conveyor/conveyor.toml"

step "installing (apt-get, so missing dependencies come from the archive)"
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$deb" >"$work/install.log" 2>&1 ||
  {
    cat "$work/install.log" >&2
    die "apt-get install $deb failed"
  }
[[ $(pkg_status) == installed ]] || die "after install the package is '$(pkg_status)'"

step "the command"
[[ -x /usr/bin/conveyor ]] || die "/usr/bin/conveyor is missing"
out=$(/usr/bin/conveyor --version)
[[ $out == "conveyor $version" ]] || die "conveyor --version says '$out', the package is $version"
log "  conveyor --version: $out"

step "the plugins, found from the binary's location (no CONVEYOR_PLUGIN_DIR, no config)"
plugin_dir=/usr/lib/conveyor/plugins
[[ -f $plugin_dir/libconveyor-sqlite.so ]] || die "$plugin_dir/libconveyor-sqlite.so is missing"
for so in "$plugin_dir"/libconveyor-*.so; do
  name=$(basename "$so" .so)
  name=${name#libconveyor-}
  # From / so nothing relative to the working directory helps.
  out=$(cd / && env -u CONVEYOR_PLUGIN_DIR -u CONVEYOR_CONFIG /usr/bin/conveyor plugin info "$name" 2>&1) ||
    die "conveyor plugin info $name failed: $out"
  grep -q "$so" <<<"$out" || die "conveyor plugin info $name did not load $so: $out"
  log "  plugin info $name: $(grep -m1 -E '^version:' <<<"$out" | tr -s ' ') ($so)"
done

step "the user, the data directory, the conffile, the unit"
IFS=: read -r _ _ _ _ _ home shell < <(getent passwd conveyor) || die "no user conveyor"
[[ $home == /var/lib/conveyor ]] || die "conveyor's home is $home"
[[ $shell == */nologin || $shell == /bin/false ]] || die "conveyor's shell is $shell"
(($(id -u conveyor) < 1000)) || die "conveyor is not a system user (uid $(id -u conveyor))"
[[ $(stat -c '%U:%G %a' /var/lib/conveyor) == "conveyor:conveyor 750" ]] ||
  die "/var/lib/conveyor is $(stat -c '%U:%G %a' /var/lib/conveyor), not conveyor:conveyor 750"
conffiles=$(dpkg-query -W -f='${Conffiles}' conveyor)
grep -q '^ /etc/conveyor/conveyor.toml ' <<<"$conffiles" || die "/etc/conveyor/conveyor.toml is not a conffile: $conffiles"
[[ $(stat -c '%U:%G %a' /etc/conveyor/conveyor.toml) == "root:conveyor 640" ]] ||
  die "/etc/conveyor/conveyor.toml is $(stat -c '%U:%G %a' /etc/conveyor/conveyor.toml), not root:conveyor 640"
grep -q '^path = "/var/lib/conveyor/conveyor.db"' /etc/conveyor/conveyor.toml ||
  die "the config does not keep the database in /var/lib/conveyor"
unit=$(dpkg -L conveyor | grep '/systemd/system/conveyor\.service$') || die "the package has no conveyor.service"
grep -q '^ExecStart=/usr/bin/conveyor serve --config /etc/conveyor/conveyor.toml$' "$unit" ||
  die "$unit does not run conveyor serve --config /etc/conveyor/conveyor.toml"
log "  $unit, conffile /etc/conveyor/conveyor.toml, user conveyor (uid $(id -u conveyor))"

step "conveyor serve --config /etc/conveyor/conveyor.toml as the conveyor user (runuser, no systemd)"
listen=$(sed -n 's/^listen = "\([^"]*\)".*/\1/p' /etc/conveyor/conveyor.toml)
[[ $listen == 127.0.0.1:* ]] || die "the config's [server] listen is '$listen', not on 127.0.0.1"
port=${listen##*:}
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
listen_env=()
if port_busy "$port"; then
  # Something else (another test, a developer's server) has the default
  # port: the same config, another port, through its environment variable.
  for _ in $(seq 50); do
    port=$((20000 + RANDOM % 20000))
    port_busy "$port" || break
  done
  listen_env=("CONVEYOR_SERVER_LISTEN=127.0.0.1:$port")
  log "  127.0.0.1:${listen##*:} is taken: serving on $port (CONVEYOR_SERVER_LISTEN)"
fi
url="http://127.0.0.1:$port"
cli() { /usr/bin/conveyor --server "$url" "$@"; }
# As conveyor.service does: the conveyor user, working directory the data
# directory. runuser waits for its child, so the child is signalled below.
(cd /var/lib/conveyor && exec runuser -u conveyor -- env "${listen_env[@]}" \
  /usr/bin/conveyor serve --config /etc/conveyor/conveyor.toml) >"$work/serve.log" 2>&1 &
runuser_pid=$!
deadline=$((SECONDS + 60))
until cli queues >/dev/null 2>&1; do
  kill -0 "$runuser_pid" 2>/dev/null || {
    cat "$work/serve.log" >&2
    die "conveyor serve exited before answering"
  }
  ((SECONDS < deadline)) || {
    cat "$work/serve.log" >&2
    die "conveyor serve did not answer on $url within 60 s"
  }
  sleep 0.1
done
server_pid=$(pgrep -P "$runuser_pid" | head -n1)
[[ -n $server_pid ]] || die "cannot find runuser's child"
[[ $(ps -o user= -p "$server_pid") == conveyor ]] || die "the server runs as $(ps -o user= -p "$server_pid")"
[[ $(readlink "/proc/$server_pid/exe") == /usr/bin/conveyor ]] || die "the server is $(readlink "/proc/$server_pid/exe")"
log "  answering on $url after $((SECONDS - deadline + 60)) s, pid $server_pid, user conveyor"

cli enqueue package-smoke noop --count 5 >/dev/null
deadline=$((SECONDS + 30))
# `queues` prints a table: the COMPLETED column of the row package-smoke.
completed() {
  cli queues | awk 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "COMPLETED") c = i }
                    c && $1 == "package-smoke" { print $c }'
}
until [[ $(completed) == 5 ]]; do
  ((SECONDS < deadline)) || {
    cli queues >&2 || true
    die "the 5 noop jobs did not complete within 30 s"
  }
  sleep 0.1
done
log "  5 noop jobs enqueued and completed:"
cli queues | sed 's/^/    /'
[[ $(stat -c %U /var/lib/conveyor/conveyor.db) == conveyor ]] || die "conveyor.db is not owned by conveyor"

kill -TERM "$server_pid"
rc=0
wait "$runuser_pid" || rc=$?
runuser_pid=""
((rc == 0)) || {
  cat "$work/serve.log" >&2
  die "conveyor serve exited $rc after SIGTERM"
}
log "  SIGTERM: exit 0"

if command -v systemd-analyze >/dev/null; then
  step "systemd-analyze verify $unit"
  # It exits 0 on what systemd would ignore (an unknown key, a bad value):
  # any word from it is a failure.
  out=$(systemd-analyze verify "$unit" 2>&1) || die "systemd-analyze verify $unit failed: $out"
  [[ -z $out ]] || die "systemd-analyze verify $unit: $out"
else
  step "systemd-analyze is not installed: the unit is not verified"
fi

step "dpkg -r: the files go, the config and the data stay"
dpkg -r conveyor >"$work/remove.log" 2>&1 || {
  cat "$work/remove.log" >&2
  die "dpkg -r conveyor failed"
}
[[ ! -e /usr/bin/conveyor && ! -e $plugin_dir && ! -e $unit ]] || die "dpkg -r left the command, the plugins or the unit"
[[ -f /etc/conveyor/conveyor.toml ]] || die "dpkg -r removed the conffile"
[[ -f /var/lib/conveyor/conveyor.db ]] || die "dpkg -r removed the data"

step "dpkg --purge: the config goes, the data and the user stay"
dpkg --purge conveyor >"$work/purge.log" 2>&1 || {
  cat "$work/purge.log" >&2
  die "dpkg --purge conveyor failed"
}
[[ $(pkg_status) == not-installed ]] || die "after purge the package is '$(pkg_status)'"
[[ ! -e /usr/bin/conveyor ]] || die "/usr/bin/conveyor is still there"
[[ ! -e /etc/conveyor ]] || die "/etc/conveyor is still there after purge"
[[ -f /var/lib/conveyor/conveyor.db ]] || die "purge removed the data"
getent passwd conveyor >/dev/null || die "purge removed the conveyor user"
for link in /etc/systemd/system/conveyor.service /etc/systemd/system/multi-user.target.wants/conveyor.service; do
  [[ ! -L $link && ! -e $link ]] || die "purge left $link"
done
