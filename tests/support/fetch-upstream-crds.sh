#!/usr/bin/env bash
# Fetches published CRDs from their projects' Go modules at pinned versions
# into a cache outside the repository, and prints the directory holding them.
# Does nothing when they are already there. (The KubeRay CRDs come with the
# operator: build-kuberay.sh.)
#
#   tests/support/fetch-upstream-crds.sh gateway-api          # Gateway API standard channel
#   tests/support/fetch-upstream-crds.sh prometheus-operator  # monitoring.coreos.com (PodMonitor, ...)
#   tests/support/fetch-upstream-crds.sh inference-extension  # inference.networking.k8s.io (InferencePool)
#   tests/support/fetch-upstream-crds.sh all                  # every one; prints nothing
#
# Environment:
#   INFERGATE_GATEWAY_API_VERSION          Gateway API release (default below)
#   INFERGATE_PROMETHEUS_OPERATOR_VERSION  Prometheus Operator release (default below)
#   INFERGATE_INFERENCE_EXTENSION_VERSION  Gateway API Inference Extension release (default below)
#   INFERGATE_CACHE_DIR                    cache root (default ~/.cache/infergate)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

GATEWAY_API_VERSION="${INFERGATE_GATEWAY_API_VERSION:-v1.4.1}"
PROMETHEUS_OPERATOR_VERSION="${INFERGATE_PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
INFERENCE_EXTENSION_VERSION="${INFERGATE_INFERENCE_EXTENSION_VERSION:-v1.6.0}"

# fetch NAME MODULE VERSION SUBDIR MARKER: copy SUBDIR/*.yaml of MODULE@VERSION
# into the cache unless MARKER is already there; print the directory.
fetch() {
  local name="$1" module="$2" version="$3" subdir="$4" marker="$5"
  local dest="$CACHE_ROOT/$name/$version/crd"
  if [[ -f "$dest/$marker" ]]; then
    echo "$dest"
    return
  fi
  command -v go >/dev/null || die "Go is required to fetch the $name CRDs from the Go module proxy"
  local dir
  log "fetching ${module}@${version}"
  dir=$(module_dir "$module" "$version")
  [[ -f "$dir/$subdir/$marker" ]] || die "could not download ${module}@${version} (is the Go module proxy reachable?)"
  mkdir -p "$dest"
  cp "$dir/$subdir"/*.yaml "$dest/"
  chmod u+w "$dest"/*.yaml
  log "$name ${version} CRDs in $dest"
  echo "$dest"
}

gateway_api() {
  fetch gateway-api sigs.k8s.io/gateway-api "$GATEWAY_API_VERSION" \
    config/crd/standard gateway.networking.k8s.io_httproutes.yaml
}

prometheus_operator() {
  fetch prometheus-operator github.com/prometheus-operator/prometheus-operator "$PROMETHEUS_OPERATOR_VERSION" \
    example/prometheus-operator-crd monitoring.coreos.com_podmonitors.yaml
}

inference_extension() {
  fetch inference-extension sigs.k8s.io/gateway-api-inference-extension "$INFERENCE_EXTENSION_VERSION" \
    config/crd/bases inference.networking.k8s.io_inferencepools.yaml
}

case "${1:-}" in
  gateway-api) gateway_api ;;
  prometheus-operator) prometheus_operator ;;
  inference-extension) inference_extension ;;
  all) gateway_api >/dev/null; prometheus_operator >/dev/null; inference_extension >/dev/null ;;
  *) die "usage: $0 gateway-api|prometheus-operator|inference-extension|all" ;;
esac
