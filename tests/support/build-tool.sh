#!/usr/bin/env bash
# Builds a Go tool the tests use from its Go module at a pinned version into
# a cache outside the repository, and prints the path of the binary. Does
# nothing when it is already there.
#
#   tests/support/build-tool.sh helm    # helm.sh/helm/v3/cmd/helm (helm lint, the chart tests)
#   tests/support/build-tool.sh lwepp   # the Gateway API Inference Extension's minimal endpoint picker
#   tests/support/build-tool.sh krew    # sigs.k8s.io/krew/cmd/krew (installs the plugin from its krew manifest)
#   tests/support/build-tool.sh kwok    # sigs.k8s.io/kwok/cmd/kwok (fake Nodes and their pods, the scheduling tests),
#                                       # with its "fast" Node and Pod stages in stages.yaml beside bin/
#
# Environment:
#   INFERGATE_HELM_VERSION               Helm release (default below)
#   INFERGATE_INFERENCE_EXTENSION_VERSION  sigs.k8s.io/gateway-api-inference-extension release (default below)
#   INFERGATE_KWOK_VERSION               sigs.k8s.io/kwok release (default below)
#   INFERGATE_KREW_VERSION               sigs.k8s.io/krew release (default below)
#   INFERGATE_CACHE_DIR                  cache root (default ~/.cache/infergate)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

case "${1:-}" in
  helm)
    NAME=helm
    VERSION="${INFERGATE_HELM_VERSION:-v3.22.0}"
    MODULE="helm.sh/helm/v3"
    PACKAGE="helm.sh/helm/v3/cmd/helm"
    ;;
  lwepp)
    NAME=inference-extension
    VERSION="${INFERGATE_INFERENCE_EXTENSION_VERSION:-v1.6.0}"
    MODULE="sigs.k8s.io/gateway-api-inference-extension"
    PACKAGE="sigs.k8s.io/gateway-api-inference-extension/cmd/lwepp"
    ;;
  kwok)
    NAME=kwok
    VERSION="${INFERGATE_KWOK_VERSION:-v0.8.0}"
    MODULE="sigs.k8s.io/kwok"
    PACKAGE="sigs.k8s.io/kwok/cmd/kwok"
    # The stages `kwokctl` gives a cluster by default (kwok alone has none):
    # Nodes made Ready and kept so with a Lease, pods run, completed, deleted.
    STAGES="node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml"
    ;;
  krew)
    NAME=krew
    VERSION="${INFERGATE_KREW_VERSION:-v0.4.3}"
    MODULE="sigs.k8s.io/krew"
    PACKAGE="sigs.k8s.io/krew/cmd/krew"
    ;;
  *) die "usage: $0 helm|lwepp|kwok|krew" ;;
esac
DEST="$CACHE_ROOT/$NAME/${VERSION}"
BIN="$DEST/bin/${PACKAGE##*/}"
STAGES="${STAGES:-}"

if [[ -x "$BIN" && ( -z "$STAGES" || -f "$DEST/stages.yaml" ) ]]; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || die "Go is required to build ${PACKAGE} (https://go.dev/dl)"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
start=$(date +%s)
mkdir -p "$DEST/bin"
log "building ${PACKAGE}@${VERSION} (a few minutes on a cold cache)"
# Built inside its own module (its go.mod and go.sum), so nothing but that
# exact version is asked of the proxy (`go install pkg@version` also lists
# the module's versions, which a proxy may refuse).
dir=$(module_dir "$MODULE" "$VERSION")
[[ -d "$dir" ]] || die "could not download ${MODULE}@${VERSION} (is the Go module proxy reachable?)"
(cd "$dir" && GOWORK=off GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" -o "$BIN" "./${PACKAGE#"$MODULE"/}") \
  || die "building ${PACKAGE}@${VERSION} failed (see above)"
if [[ -n "$STAGES" ]]; then
  for stage in $STAGES; do
    [[ -f "$dir/kustomize/stage/$stage" ]] || die "${MODULE}@${VERSION} has no kustomize/stage/$stage"
    echo "---"
    cat "$dir/kustomize/stage/$stage"
  done > "$DEST/stages.yaml.tmp"
  mv "$DEST/stages.yaml.tmp" "$DEST/stages.yaml"
fi
log "${BIN} ready after $(( $(date +%s) - start ))s"
echo "$BIN"
