#!/usr/bin/env bash
# Writes the krew plugin manifest (krew.googlecontainertools.github.com/v1alpha2
# Plugin) of a release: one platform per archive made by krew/package.sh,
# each with its download URL (BASE_URL/<archive name>) and sha256.
#
#   krew/manifest.sh v0.1.0 https://example.com/releases/v0.1.0 dist/*.tar.gz > infergate.yaml
#   kubectl krew install --manifest=infergate.yaml            # from the release URLs
#   kubectl krew install --manifest=infergate.yaml --archive=dist/kubectl-infergate_v0.1.0_linux_amd64.tar.gz
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: $0 VERSION BASE_URL ARCHIVE..." >&2; exit 2; }
version=$1 base=${2%/}
shift 2
cat <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: infergate
spec:
  version: ${version}
  shortDescription: Watch, steer and explain infergate InferenceServices
  description: |
    The terminal of infergate, the admission, conversion and reconciliation
    webhook for model-serving workloads:
      status   one screen per service: tracks, route weights, the rollout
               with its steps, conditions, GPUs, KV tokens and budget (-w live)
      rollout  status (exit 0 promoted, 1 rolled back, 2 timeout), promote,
               pause, resume and abort, GitOps-safe
      why      why a service is not ready, with the next command to run
      fit      whether a model fits an AcceleratorClass at each tensor size
      budget   each namespace's GPU budget and what every service charges
  caveats: |
    For completion of "kubectl infergate <TAB>", link the plugin as
    kubectl_complete-infergate next to it:
      ln -s kubectl-infergate "\${KREW_ROOT:-\$HOME/.krew}/bin/kubectl_complete-infergate"
  platforms:
YAML
for archive in "$@"; do
  name=$(basename "$archive")
  [[ "$name" =~ ^kubectl-infergate_${version}_([a-z0-9]+)_([a-z0-9]+)\.tar\.gz$ ]] \
    || { echo "error: $name is not kubectl-infergate_${version}_OS_ARCH.tar.gz" >&2; exit 2; }
  os=${BASH_REMATCH[1]} arch=${BASH_REMATCH[2]}
  sha=$(sha256sum "$archive" | cut -d' ' -f1)
  cat <<YAML
  - selector:
      matchLabels:
        os: ${os}
        arch: ${arch}
    uri: ${base}/${name}
    sha256: ${sha}
    files:
    - from: kubectl-infergate
      to: .
    - from: README.md
      to: .
    bin: kubectl-infergate
YAML
done
