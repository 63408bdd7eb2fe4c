#!/usr/bin/env bash
# Installs what harnessflow's local runs and tests need when it is missing:
# Debian's clickhouse-server (and client), and with --test also chromium (the
# HTML report's render test). Used by `make test`, `make demo` and .ci/run.
# Without root it prints the one command that does the install.
set -euo pipefail

have_clickhouse() {
  command -v clickhouse-server >/dev/null 2>&1 || command -v clickhouse >/dev/null 2>&1
}

missing=()
have_clickhouse || missing+=(clickhouse-server clickhouse-client)
command -v clickhouse-client >/dev/null 2>&1 || command -v clickhouse >/dev/null 2>&1 || missing+=(clickhouse-client)
if [ "${1:-}" = "--test" ]; then
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

# de-duplicate
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ "$(id -u)" != 0 ]; then
  echo "harnessflow needs ${missing[*]}; install with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} (Debian packages)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The package starts a system service on some images; harnessflow runs its own
# server processes, so stop it to free the default ports.
if command -v service >/dev/null 2>&1; then service clickhouse-server stop >/dev/null 2>&1 || true; fi
