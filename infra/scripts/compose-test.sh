#!/usr/bin/env bash
# `make compose-test`: docker-compose.yml and docker-compose.cluster.yml
# brought up by a real Docker engine, with infra/compose/stand-ins.yml for
# the images no registry serves here, and a campaign sent through each
# (infra/composetest).
#
# It starts a dockerd of its own: data root HF_DOCKER_ROOT (default
# ~/.cache/harnessflow/docker: the images stay cached between runs), exec
# root, socket and pid file in a fresh folder under /tmp (short paths, for
# the sockets), and stops it by its pid when it ends, failed or not. Needs
# Debian's docker.io, docker-compose and mmdebstrap (infra/scripts/
# ensure-deps.sh --compose installs them), Go, and the network to the Debian
# mirror and the Go module proxy (GOPROXY, default `go env GOPROXY`). Root
# is needed to run dockerd.
set -euo pipefail
cd "$(dirname "$0")/../.."

missing=()
for tool in dockerd docker docker-compose mmdebstrap go; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "compose-test: missing ${missing[*]} (Debian: apt-get install docker.io docker-compose mmdebstrap; or bash infra/scripts/ensure-deps.sh --compose)" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "compose-test: dockerd needs root" >&2
  exit 1
fi

data=${HF_DOCKER_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/harnessflow/docker}
run=$(mktemp -d /tmp/hf-dockerd.XXXXXX)
mkdir -p "$data"
started=$(date +%s)

dockerd --data-root "$data" --exec-root "$run/exec" -H "unix://$run/docker.sock" \
  --pidfile "$run/dockerd.pid" >"$run/dockerd.log" 2>&1 &
pid=$!

stop() {
  local rc=$?
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "compose-test: dockerd $pid did not stop in 60 s: killing it" >&2
      kill -KILL "$pid"
    fi
    wait "$pid" 2>/dev/null || true
  fi
  if [ "$rc" != 0 ]; then
    echo "compose-test: failed; dockerd's last lines:" >&2
    tail -n 20 "$run/dockerd.log" >&2 || true
  fi
  rm -rf "$run"
  echo "compose-test: $(( $(date +%s) - started )) s in all" >&2
  exit "$rc"
}
trap stop EXIT
trap 'exit 130' INT TERM

export DOCKER_HOST="unix://$run/docker.sock"
for i in $(seq 60); do
  docker version >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { echo "compose-test: dockerd exited:" >&2; tail -n 20 "$run/dockerd.log" >&2; exit 1; }
  [ "$i" = 60 ] && { echo "compose-test: dockerd did not answer in 60 s" >&2; exit 1; }
  sleep 1
done
echo "compose-test: dockerd $pid on $DOCKER_HOST, data root $data" >&2

# The containers cannot have more open files than dockerd's hard limit (the
# script's); ClickHouse's service asks 262144 unless told otherwise.
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt 262144 ]; then
  export HF_CLICKHOUSE_NOFILE=${HF_CLICKHOUSE_NOFILE:-$hard}
fi

# The classic builder: docker-compose 1.29 builds through the daemon's API,
# and the CLI's BuildKit needs a plugin Debian's docker.io lacks.
export DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0
bash infra/scripts/compose-base-images.sh
export GOPROXY=${GOPROXY:-$(go env GOPROXY)}
go test -tags composetest -count=1 -v -timeout 50m ./infra/composetest
