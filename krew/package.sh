#!/usr/bin/env bash
# Packs a built infergate binary as the kubectl plugin archive krew installs:
# kubectl-infergate_<version>_<os>_<arch>.tar.gz holding `kubectl-infergate`
# (the binary; it answers as the plugin under that name) and README.md.
#
#   krew/package.sh target/release/infergate v0.1.0 linux amd64 dist/
set -euo pipefail
[[ $# -eq 5 ]] || { echo "usage: $0 BINARY VERSION OS ARCH OUTDIR" >&2; exit 2; }
binary=$1 version=$2 os=$3 arch=$4 out=$5
[[ -x "$binary" ]] || { echo "error: $binary is not an executable" >&2; exit 2; }
[[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+ ]] || { echo "error: version $version is not vMAJOR.MINOR.PATCH" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$binary" "$stage/kubectl-infergate"
cp "$root/README.md" "$stage/README.md"
mkdir -p "$out"
archive="$out/kubectl-infergate_${version}_${os}_${arch}.tar.gz"
tar -C "$stage" --owner=0 --group=0 --mtime='1970-01-01' -czf "$archive" kubectl-infergate README.md
echo "$archive"
