# Sourced by the build and fetch scripts beside it: strict mode, the cache
# root, `log` and `die` naming the script, and the download of one Go module.
#
# Environment:
#   INFERGATE_CACHE_DIR   cache root (default ~/.cache/infergate)
set -euo pipefail

CACHE_ROOT="${INFERGATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/infergate}"
SCRIPT_NAME="$(basename "$0" .sh)"

log() { echo "$SCRIPT_NAME: $*" >&2; }
die() { log "error: $*"; exit 1; }

# module_dir MODULE VERSION: download MODULE@VERSION into the Go module cache
# from a throwaway module of its own (so nothing but that exact version is
# asked of the proxy) and print its directory; nothing when it fails.
module_dir() {
  local work
  work=$(mktemp -d)
  (cd "$work" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod init infergate.dev/module-fetch >/dev/null 2>&1 \
    && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json "$1@$2" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p') || true
  rm -rf "$work"
}
