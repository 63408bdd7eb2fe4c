#!/usr/bin/env bash
# Makes the two base images that infra/compose/stand-ins.yml builds from,
# without any container registry, in the Docker engine of DOCKER_HOST:
#
#   localhost/harnessflow-base:bookworm  Debian bookworm (minbase, with
#       ca-certificates), made by mmdebstrap from this machine's apt sources
#       and `docker import`ed. It trusts the local CAs this machine trusts
#       (/usr/local/share/ca-certificates: a TLS-inspecting proxy's CA, where
#       there is one) and has a policy-rc.d, so that packages installed in a
#       `docker build` start no service.
#   localhost/harnessflow-go:local  that base plus this machine's Go
#       toolchain (`go env GOROOT`), infra/Dockerfile's GO_IMAGE: Debian's
#       golang is older than go.mod asks.
#
# An image already there is kept (the Go image is made again when the
# machine's Go version changed). Used by infra/scripts/compose-test.sh; by
# hand: DOCKER_HOST=... infra/scripts/compose-base-images.sh
set -euo pipefail

base=localhost/harnessflow-base:bookworm
goimg=localhost/harnessflow-go:local
export DOCKER_BUILDKIT=0

# The host's apt sources, in either format (mmdebstrap reads both).
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  if [ -s "$f" ] && grep -qE '^[[:space:]]*(deb|Types:)' "$f"; then
    sources+=("$f")
  fi
done

if ! docker image inspect "$base" >/dev/null 2>&1; then
  command -v mmdebstrap >/dev/null || { echo "compose-base-images: mmdebstrap is not installed (apt-get install mmdebstrap)" >&2; exit 1; }
  [ ${#sources[@]} -gt 0 ] || { echo "compose-base-images: no apt sources under /etc/apt" >&2; exit 1; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  hooks=(--customize-hook='printf "#!/bin/sh\nexit 101\n" >"$1/usr/sbin/policy-rc.d" && chmod 755 "$1/usr/sbin/policy-rc.d"')
  if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    hooks+=(--customize-hook='copy-in /usr/local/share/ca-certificates /usr/local/share'
      --customize-hook='chroot "$1" update-ca-certificates >/dev/null')
  fi
  echo "compose-base-images: mmdebstrap bookworm (about a minute)" >&2
  mmdebstrap --quiet --variant=minbase --include=ca-certificates \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    "${hooks[@]}" bookworm "$tmp/base.tar" "${sources[@]}"
  docker import -c 'CMD ["/bin/bash"]' "$tmp/base.tar" "$base" >/dev/null
  rm -f "$tmp/base.tar"
  echo "compose-base-images: made $base" >&2
fi

goroot=$(go env GOROOT)
gover=$(go env GOVERSION)
if [ "$(docker image inspect -f '{{index .Config.Labels "go.version"}}' "$goimg" 2>/dev/null)" != "$gover" ]; then
  # The context is GOROOT itself; the Dockerfile comes on stdin.
  docker build -q -t "$goimg" -f - "$goroot" >/dev/null <<EOF
FROM $base
COPY . /usr/local/go
ENV PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin GOTOOLCHAIN=local
LABEL go.version=$gover
EOF
  echo "compose-base-images: made $goimg ($gover)" >&2
fi
