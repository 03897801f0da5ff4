#!/usr/bin/env bash
# Builds the KubeRay operator (github.com/ray-project/kuberay/ray-operator)
# from its Go module at a pinned version, with the upstream CRDs of that
# version, into a cache outside the repository. Does nothing when they are
# already there.
#
#   tests/support/build-kuberay.sh          # build if missing, print the directory
#                                           # (bin/ray-operator, crd/*.yaml)
#
# Environment:
#   INFERGATE_KUBERAY_VERSION   KubeRay release (default below)
#   INFERGATE_CACHE_DIR         cache root (default ~/.cache/infergate)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

VERSION="${INFERGATE_KUBERAY_VERSION:-v1.4.2}"
DEST="$CACHE_ROOT/kuberay/${VERSION}"
MODULE="github.com/ray-project/kuberay/ray-operator"

if [[ -x "$DEST/bin/ray-operator" && -f "$DEST/crd/ray.io_rayclusters.yaml" && -f "$DEST/crd/ray.io_rayservices.yaml" ]]; then
  echo "$DEST"
  exit 0
fi

command -v go >/dev/null || die "Go is required to build the KubeRay operator (https://go.dev/dl)"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
start=$(date +%s)
mkdir -p "$DEST/bin" "$DEST/crd"

log "fetching ${MODULE}@${VERSION}"
dir=$(module_dir "$MODULE" "$VERSION")
[[ -d "$dir" ]] || die "could not download ${MODULE}@${VERSION} (is the Go module proxy reachable?)"
for crd in ray.io_rayclusters.yaml ray.io_rayservices.yaml; do
  cp "$dir/config/crd/bases/$crd" "$DEST/crd/$crd" || die "no $crd in ${MODULE}@${VERSION}"
  chmod u+w "$DEST/crd/$crd"
done
log "building ray-operator ${VERSION} (a few minutes on a cold cache)"
GOBIN="$DEST/bin" go install -trimpath -ldflags "-s -w" "${MODULE}@${VERSION}" \
  || die "go install of ${MODULE}@${VERSION} failed (see above)"
log "KubeRay ready in $DEST after $(( $(date +%s) - start ))s"
echo "$DEST"
