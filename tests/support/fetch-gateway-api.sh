#!/usr/bin/env bash
# Fetches the Gateway API standard-channel CRDs (sigs.k8s.io/gateway-api) from
# their Go module at a pinned version into a cache outside the repository.
# Does nothing when they are already there. (The KubeRay CRDs come with the
# operator: build-kuberay.sh.)
#
#   tests/support/fetch-gateway-api.sh     # fetch if missing, print the CRD directory
#
# Environment:
#   INFERGATE_GATEWAY_API_VERSION   Gateway API release (default below)
#   INFERGATE_CACHE_DIR             cache root (default ~/.cache/infergate)
set -euo pipefail

VERSION="${INFERGATE_GATEWAY_API_VERSION:-v1.4.1}"
CACHE_ROOT="${INFERGATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/infergate}"
DEST="$CACHE_ROOT/gateway-api/${VERSION}/crd"
MODULE="sigs.k8s.io/gateway-api"

log() { echo "fetch-gateway-api: $*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -f "$DEST/gateway.networking.k8s.io_httproutes.yaml" ]]; then
  echo "$DEST"
  exit 0
fi

command -v go >/dev/null || die "Go is required to fetch the Gateway API CRDs from the Go module proxy"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "fetching ${MODULE}@${VERSION}"
dir=$(cd "$work" && go mod init infergate.dev/gateway-api-fetch >/dev/null 2>&1 && go mod download -json "${MODULE}@${VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
[[ -d "$dir/config/crd/standard" ]] || die "could not download ${MODULE}@${VERSION} (is the Go module proxy reachable?)"
mkdir -p "$DEST"
cp "$dir"/config/crd/standard/*.yaml "$DEST/"
chmod u+w "$DEST"/*.yaml
log "Gateway API ${VERSION} standard-channel CRDs in $DEST"
echo "$DEST"
