#!/usr/bin/env bash
# Installs Ray Serve (PyPI `ray[serve]`) at a pinned version into a Python
# virtual environment in a cache outside the repository, so tests validate
# the Serve configs infergate writes with Ray's own schema. Does nothing when
# it is already there.
#
#   tests/support/build-ray-serve.sh        # install if missing, print the directory
#                                           # (venv/bin/python with ray.serve.schema)
#
# Environment:
#   INFERGATE_RAY_VERSION   Ray release (default below)
#   INFERGATE_CACHE_DIR     cache root (default ~/.cache/infergate)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

VERSION="${INFERGATE_RAY_VERSION:-2.60.0}"
DEST="$CACHE_ROOT/ray-serve/${VERSION}"
PYTHON="$DEST/venv/bin/python"
# Written only after a successful install: without it, a half-finished
# install is thrown away and redone.
MARKER="$DEST/installed"

ready() { [[ -x "$PYTHON" && -f "$MARKER" ]]; }

if ready; then
  echo "$DEST"
  exit 0
fi

command -v python3 >/dev/null || die "python3 is required to install ray[serve] (Debian: apt-get install python3 python3-venv)"
python3 -c 'import venv, ensurepip' 2>/dev/null \
  || die "python3 cannot make virtual environments (Debian: apt-get install python3-venv)"
mkdir -p "$(dirname "$DEST")"
# One install at a time (test binaries may ask at once); the one that waited
# finds it done.
exec 9>"$DEST.lock"
flock 9
if ready; then
  echo "$DEST"
  exit 0
fi
start=$(date +%s)
rm -rf "$DEST"
mkdir -p "$DEST"
log "creating a virtual environment in $DEST/venv"
python3 -m venv "$DEST/venv" || die "python3 -m venv $DEST/venv failed (see above)"
log "installing ray[serve]==${VERSION} (a few minutes on a cold cache)"
"$DEST/venv/bin/pip" install --quiet --disable-pip-version-check "ray[serve]==${VERSION}" \
  || die "pip install ray[serve]==${VERSION} failed (is PyPI reachable?)"
"$PYTHON" -c 'from ray.serve.schema import ServeDeploySchema' \
  || die "ray[serve]==${VERSION} is installed but ray.serve.schema.ServeDeploySchema does not import (see above)"
touch "$MARKER"
log "Ray Serve ready in $DEST after $(( $(date +%s) - start ))s"
echo "$DEST"
