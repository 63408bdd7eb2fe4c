#!/usr/bin/env bash
# Installs what harnessflow's local runs and tests need when it is missing:
# Debian's clickhouse-server (and client), and with --test also chromium (the
# HTML report's render test), Debian's prometheus (promtool and prometheus,
# for infra/prometheus's and infra/grafana's tests), Debian's zookeeper
# (with its Java runtime: the ClickHouse cluster test, internal/chcluster)
# Python 3.9+ with its venv module (the Python SDK's tests and its install
# recipe: python3, python3-venv), chDB, ClickHouse 26.7
# as a library that the tests load in-process (internal/chdb; npm's
# @chdb/lib-linux-x64-gnu into the user's cache, Debian's npm first if there
# is no npm), and npm's kafkajs and @kafkajs/confluent-schema-registry, the
# independent Confluent serializer of the interoperability test
# (internal/testenv.Node; into the user's cache too). With --compose, Debian's
# docker.io, docker-compose and mmdebstrap (make compose-test). Used by `make test`,
# `make demo`, `make compose-test` and .ci/run. Without root it
# prints the commands that do the install.
set -euo pipefail

# Keep in step with LibraryVersion in internal/chdb (a test checks).
chdb_version=26.7.3-stable.1
chdb_dir="${XDG_CACHE_HOME:-$HOME/.cache}/harnessflow/chdb"
chdb_pkg="$chdb_dir/node_modules/@chdb/lib-linux-x64-gnu"
# Keep in step with NPMInteropPackages in internal/testenv.
npm_interop_pkgs=(kafkajs@2.2.4 @kafkajs/confluent-schema-registry@4.1.0)
npm_interop_dir="${HF_NPM_INTEROP:-${XDG_CACHE_HOME:-$HOME/.cache}/harnessflow/npm-interop}"

have_clickhouse() {
  command -v clickhouse-server >/dev/null 2>&1 || command -v clickhouse >/dev/null 2>&1
}

missing=()
have_clickhouse || missing+=(clickhouse-server clickhouse-client)
command -v clickhouse-client >/dev/null 2>&1 || command -v clickhouse >/dev/null 2>&1 || missing+=(clickhouse-client)
need_chdb=0
need_interop=0
if [ "${1:-}" = "--test" ]; then
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
  { command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; } || missing+=(prometheus)
  { [ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null 2>&1; } || missing+=(zookeeper)
  # The Python SDK's tests (producers/python) need Python 3.9 or later, and
  # its documented install (a venv, then pip) the venv module with ensurepip:
  # Debian's python3-venv.
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null || missing+=(python3)
  python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
  # HF_CHDB_LIBRARY names a libchdb.so of the user's own; else the pinned
  # version must be in the cache (an older one there is replaced).
  if [ -z "${HF_CHDB_LIBRARY:-}" ] &&
    ! { [ -f "$chdb_pkg/libchdb.so" ] && grep -q "\"version\": *\"$chdb_version\"" "$chdb_pkg/package.json" 2>/dev/null; }; then
    need_chdb=1
    command -v npm >/dev/null 2>&1 || missing+=(npm)
  fi
  for p in "${npm_interop_pkgs[@]}"; do
    name="${p%@*}"
    version="${p##*@}"
    if ! grep -q "\"version\": *\"$version\"" "$npm_interop_dir/node_modules/$name/package.json" 2>/dev/null; then
      need_interop=1
    fi
  done
  if [ "$need_interop" = 1 ]; then
    command -v npm >/dev/null 2>&1 || missing+=(npm)
  fi
fi

# With --compose (make compose-test): Debian's Docker engine and compose,
# and mmdebstrap for the local base image (infra/scripts/compose-test.sh).
for arg in "$@"; do
  if [ "$arg" = "--compose" ]; then
    { command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1; } || missing+=(docker.io)
    command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
    command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
  fi
done

install_interop() {
  echo "installing ${npm_interop_pkgs[*]} into $npm_interop_dir" >&2
  npm install --prefix "$npm_interop_dir" --no-audit --no-fund "${npm_interop_pkgs[@]}" >&2
}

install_chdb() {
  echo "installing chDB $chdb_version (libchdb.so, about 540 MB) into $chdb_dir" >&2
  npm install --prefix "$chdb_dir" --no-audit --no-fund "@chdb/lib-linux-x64-gnu@$chdb_version" >&2
}

if [ ${#missing[@]} -eq 0 ]; then
  if [ "$need_chdb" = 1 ]; then install_chdb; fi
  if [ "$need_interop" = 1 ]; then install_interop; fi
  exit 0
fi

# de-duplicate
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ "$(id -u)" != 0 ]; then
  echo "harnessflow needs ${missing[*]}; install with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  if [ "$need_chdb" = 1 ]; then
    echo "and then chDB (as yourself, not root):" >&2
    echo "  npm install --prefix \"$chdb_dir\" --no-audit --no-fund @chdb/lib-linux-x64-gnu@$chdb_version" >&2
  fi
  if [ "$need_interop" = 1 ]; then
    echo "and the interoperability test's npm packages (as yourself):" >&2
    echo "  npm install --prefix \"$npm_interop_dir\" --no-audit --no-fund ${npm_interop_pkgs[*]}" >&2
  fi
  exit 1
fi
echo "installing ${missing[*]} (Debian packages)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The packages start system services on some images; harnessflow runs its own
# server processes (the tests their own Prometheus on a free port), so stop
# them to free the default ports (ClickHouse's, Prometheus's 9090).
if command -v service >/dev/null 2>&1; then
  service clickhouse-server stop >/dev/null 2>&1 || true
  service prometheus stop >/dev/null 2>&1 || true
  service zookeeper stop >/dev/null 2>&1 || true
  # make compose-test starts a dockerd of its own.
  service docker stop >/dev/null 2>&1 || true
fi
if [ "$need_chdb" = 1 ]; then install_chdb; fi
if [ "$need_interop" = 1 ]; then install_interop; fi
exit 0
