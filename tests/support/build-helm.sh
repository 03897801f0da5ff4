#!/usr/bin/env bash
# Builds helm (helm.sh/helm/v3/cmd/helm) from its Go module at a pinned
# version into a cache outside the repository, for `helm lint` and the
# chart tests. Does nothing when it is already there.
#
#   tests/support/build-helm.sh      # build if missing, print the path of the binary
#
# Environment:
#   INFERGATE_HELM_VERSION   Helm release (default below)
#   INFERGATE_CACHE_DIR      cache root (default ~/.cache/infergate)
set -euo pipefail

VERSION="${INFERGATE_HELM_VERSION:-v3.22.0}"
CACHE_ROOT="${INFERGATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/infergate}"
DEST="$CACHE_ROOT/helm/${VERSION}"
PACKAGE="helm.sh/helm/v3/cmd/helm"

log() { echo "build-helm: $*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -x "$DEST/bin/helm" ]]; then
  echo "$DEST/bin/helm"
  exit 0
fi

command -v go >/dev/null || die "Go is required to build helm (https://go.dev/dl)"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
start=$(date +%s)
mkdir -p "$DEST/bin"
log "building helm ${VERSION} from ${PACKAGE} (a few minutes on a cold cache)"
GOBIN="$DEST/bin" go install -trimpath -ldflags "-s -w" "${PACKAGE}@${VERSION}" \
  || die "go install of ${PACKAGE}@${VERSION} failed (is the Go module proxy reachable?)"
log "helm ready in $DEST/bin after $(( $(date +%s) - start ))s"
echo "$DEST/bin/helm"
