#!/usr/bin/env bash
# Builds the LeaderWorkerSet controller (sigs.k8s.io/lws, package
# sigs.k8s.io/lws/cmd) from its Go module at a pinned version, with every
# CRD of that version's config/crd/bases (the controller's cache waits for
# each of them), into a cache outside the repository. Does nothing when
# they are already there.
#
#   tests/support/build-lws.sh          # build if missing, print the directory
#                                       # (bin/lws, crd/*.yaml)
#
# Environment:
#   INFERGATE_LWS_VERSION   LeaderWorkerSet release (default below)
#   INFERGATE_CACHE_DIR     cache root (default ~/.cache/infergate)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

VERSION="${INFERGATE_LWS_VERSION:-v0.9.0}"
DEST="$CACHE_ROOT/lws/${VERSION}"
MODULE="sigs.k8s.io/lws"

if [[ -x "$DEST/bin/lws" && -f "$DEST/crd/leaderworkerset.x-k8s.io_leaderworkersets.yaml" ]]; then
  echo "$DEST"
  exit 0
fi

command -v go >/dev/null || die "Go is required to build the LeaderWorkerSet controller (https://go.dev/dl)"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
start=$(date +%s)
mkdir -p "$DEST/bin" "$DEST/crd"

log "fetching ${MODULE}@${VERSION}"
dir=$(module_dir "$MODULE" "$VERSION")
[[ -d "$dir" ]] || die "could not download ${MODULE}@${VERSION} (is the Go module proxy reachable?)"
found=0
for crd in "$dir"/config/crd/bases/*.yaml; do
  [[ -f "$crd" ]] || continue
  cp "$crd" "$DEST/crd/" && chmod u+w "$DEST/crd/$(basename "$crd")" && found=1
done
[[ $found == 1 ]] || die "no CRDs in ${MODULE}@${VERSION}/config/crd/bases"
log "building the LeaderWorkerSet controller ${VERSION} (a few minutes on a cold cache)"
# Built inside the downloaded module with its own go.mod and go.sum: `go
# install pkg@version` asks the proxy for the module's version list, which
# it refuses for this module.
(cd "$dir" && GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" -o "$DEST/bin/lws" ./cmd) \
  || die "go build of ${MODULE}/cmd@${VERSION} failed (see above)"
log "LeaderWorkerSet ready in $DEST after $(( $(date +%s) - start ))s"
echo "$DEST"
