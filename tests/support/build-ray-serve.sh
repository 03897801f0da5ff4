#!/usr/bin/env bash
# Installs Ray Serve (`ray[serve]` from PyPI, at a pinned version) into a
# virtual environment in a cache outside the repository, for the test that
# checks every Serve config infergate generates with Ray's own schema.
# Prints the environment's python. Does nothing when it is already there.
#
#   tests/support/build-ray-serve.sh
#
# Environment:
#   INFERGATE_RAY_VERSION   Ray release (default below)
#   INFERGATE_CACHE_DIR     cache root (default ~/.cache/infergate)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

VERSION="${INFERGATE_RAY_VERSION:-2.60.0}"
DEST="$CACHE_ROOT/ray-serve/${VERSION}"
PYTHON="$DEST/venv/bin/python"
# Written last: a half-finished install is redone.
MARKER="$DEST/installed"

if [[ -x "$PYTHON" && -f "$MARKER" ]]; then
  echo "$PYTHON"
  exit 0
fi

command -v python3 >/dev/null || die "python3 is required to install ray[serve] (Debian: apt-get install python3 python3-venv)"
start=$(date +%s)
rm -rf "$DEST"
mkdir -p "$DEST"
python3 -m venv "$DEST/venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
log "installing ray[serve]==${VERSION} (a few minutes the first time)"
"$DEST/venv/bin/pip" install --quiet --disable-pip-version-check "ray[serve]==${VERSION}" \
  || die "pip install ray[serve]==${VERSION} failed (is PyPI reachable?)"
"$PYTHON" -c 'from ray.serve.schema import ServeDeploySchema' \
  || die "ray ${VERSION} installed but ray.serve.schema.ServeDeploySchema does not import"
touch "$MARKER"
log "ray[serve] ${VERSION} ready in $DEST after $(( $(date +%s) - start ))s"
echo "$PYTHON"
