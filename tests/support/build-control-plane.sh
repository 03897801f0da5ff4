#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl and etcd) from their Go modules at pinned versions, into a cache
# outside the repository. Does nothing when the binaries are already there.
#
#   tests/support/build-control-plane.sh          # build if missing, print the bin dir
#
# Environment:
#   INFERGATE_K8S_VERSION    Kubernetes release (default below)
#   INFERGATE_ETCD_VERSION   etcd release (default below)
#   INFERGATE_CACHE_DIR      cache root (default ~/.cache/infergate)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

K8S_VERSION="${INFERGATE_K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${INFERGATE_ETCD_VERSION:-v3.6.8}"
DEST="$CACHE_ROOT/control-plane/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}"
BIN="$DEST/bin"

if [[ -x "$BIN/kube-apiserver" && -x "$BIN/kube-controller-manager" && -x "$BIN/kube-scheduler" && -x "$BIN/kubectl" && -x "$BIN/etcd" ]]; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || die "Go is required to build the control plane (https://go.dev/dl); Kubernetes ${K8S_VERSION} needs the Go version its go.mod names"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$BIN"
WORK="$DEST/src"
start=$(date +%s)

# --- Kubernetes -------------------------------------------------------------
if [[ ! -x "$BIN/kube-apiserver" || ! -x "$BIN/kube-controller-manager" || ! -x "$BIN/kube-scheduler" || ! -x "$BIN/kubectl" ]]; then
  minor="${K8S_VERSION#v1.}"            # 36.3
  staging_version="v0.${minor}"          # v0.36.3
  mod="$WORK/kubernetes"
  rm -rf "$mod" && mkdir -p "$mod"
  log "fetching k8s.io/kubernetes@${K8S_VERSION}"
  gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [[ -f "$gomod" ]] || die "could not download k8s.io/kubernetes@${K8S_VERSION} (is the Go module proxy reachable?)"
  # Every staging module is required as v0.0.0 and replaced by a local path
  # in Kubernetes' own go.mod; a consumer must replace it with the published tag.
  mapfile -t staging < <(grep -E '^[[:space:]]*k8s\.io/[a-z0-9.-]+ v0\.0\.0([[:space:]]|$)' "$gomod" | awk '{print $1}' | sort -u)
  [[ ${#staging[@]} -gt 10 ]] || die "found only ${#staging[@]} staging modules in $gomod"
  gover=$(awk '/^go /{print $2; exit}' "$gomod")
  {
    echo "module infergate.dev/control-plane-build"
    echo
    echo "go ${gover}"
    echo
    echo "require k8s.io/kubernetes ${K8S_VERSION}"
    echo
    echo "replace ("
    for m in "${staging[@]}"; do echo "	$m => $m ${staging_version}"; done
    echo ")"
  } > "$mod/go.mod"
  log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl ${K8S_VERSION} (${#staging[@]} staging modules replaced; several minutes on a cold cache)"
  pkg=k8s.io/component-base/version
  ldflags="-s -w -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor%%.*} -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION} -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=${minor%%.*}"
  (cd "$mod" && go build -trimpath -ldflags "$ldflags" -o "$BIN/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubectl) || die "go build of Kubernetes ${K8S_VERSION} failed (see above)"
fi

# --- etcd -------------------------------------------------------------------
if [[ ! -x "$BIN/etcd" ]]; then
  mod="$WORK/etcd"
  rm -rf "$mod" && mkdir -p "$mod"
  cat > "$mod/main.go" <<'GO'
// etcd server entry point, built from the published etcd server module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  gover=$(go env GOVERSION | sed 's/^go//')
  printf 'module infergate.dev/etcd-build\n\ngo %s\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$gover" "$ETCD_VERSION" > "$mod/go.mod"
  log "building etcd ${ETCD_VERSION}"
  (cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" .) || die "go build of etcd ${ETCD_VERSION} failed (see above)"
fi

log "control plane ready in $BIN after $(( $(date +%s) - start ))s"
echo "$BIN"
