#!/bin/bash
# Install oxiedge into a virtual environment at ROOT/opt/oxiedge, entirely from the host:
# wheels for the TARGET architecture (pip --platform, binary wheels only), byte-code
# compiled on the host with the same Python minor version as the target's /usr/bin/python3.
# Running pip inside an emulated chroot leaks host settings and fails TLS
# (docs/appliance.md, "Why the image is built this way").
#
#   image/install-venv.sh ROOT ARCH WHEEL [REQUIREMENT...]
#     ARCH: arm64 | amd64 (Debian names); WHEEL: the project's wheel (pip wheel --no-deps).
set -euo pipefail

[ $# -ge 3 ] || { echo "usage: $0 ROOT arm64|amd64 WHEEL [REQUIREMENT...]" >&2; exit 2; }
ROOT=$(realpath "$1"); ARCH=$2; WHEEL=$3; shift 3
case "$ARCH" in
    arm64) PLATFORM=manylinux2014_aarch64 ;;
    amd64) PLATFORM=manylinux2014_x86_64 ;;
    *) echo "unsupported arch $ARCH (rocksdict has no 32-bit wheels)" >&2; exit 2 ;;
esac
# The target's Python minor version: read from ROOT (/usr/bin/python3 -> python3.X), else
# PY_VERSION (bookworm 3.11, trixie 3.13).
PY=${PY_VERSION:-$(readlink "$ROOT/usr/bin/python3" 2>/dev/null | sed -n 's/^python\(3\.[0-9]*\)$/\1/p' || true)}
PY=${PY:-3.11}
PYTHON=${PYTHON:-python3}       # the host interpreter that runs pip
VENV=/opt/oxiedge
SITE=$VENV/lib/python$PY/site-packages

rm -rf "$ROOT$VENV"
install -d "$ROOT$SITE" "$ROOT$VENV/bin"
# Only PyPI and the given wheel: no host pip.conf (extra indexes, constraints, find-links)
# leaks into the image. Versions are pinned by image/constraints.txt (OXIEDGE_PIP_CONSTRAINTS
# names another file; empty: unpinned).
HERE=$(cd "$(dirname "$0")" && pwd)
constraints=()
CONSTRAINTS=${OXIEDGE_PIP_CONSTRAINTS-$HERE/constraints.txt}
if [ -n "$CONSTRAINTS" ]; then constraints=(--constraint "$CONSTRAINTS"); fi
env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL -u PIP_CONSTRAINT \
    PIP_CONFIG_FILE=/dev/null \
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "${constraints[@]}" --no-compile --no-warn-script-location \
    --only-binary=:all: --platform "$PLATFORM" --python-version "$PY" \
    --implementation cp --abi "cp${PY/./}" --target "$ROOT$SITE" "$WHEEL" "$@"
# pip --target writes console scripts with the host's interpreter path: drop them, the
# venv gets its own launcher below. direct_url.json records the build's temporary wheel
# path (meaningless on the device, and it would make every image differ).
rm -rf "$ROOT$SITE/bin"
for record in "$ROOT$SITE"/*.dist-info/direct_url.json; do
    [ -e "$record" ] || continue
    sed -i '/\/direct_url\.json,/d' "$(dirname "$record")/RECORD"
    rm -f "$record"
done

# The venv skeleton, as `python3 -m venv` would lay it out on the target.
cat > "$ROOT$VENV/pyvenv.cfg" <<CFG
home = /usr/bin
include-system-site-packages = false
version = $PY
executable = /usr/bin/python$PY
command = /usr/bin/python$PY -m venv $VENV
CFG
ln -sfn "/usr/bin/python$PY" "$ROOT$VENV/bin/python3"
ln -sfn python3 "$ROOT$VENV/bin/python"
ln -sfn python3 "$ROOT$VENV/bin/python$PY"
ln -sfn lib "$ROOT$VENV/lib64"
cat > "$ROOT$VENV/bin/oxiedge" <<LAUNCHER
#!$VENV/bin/python3
import sys

from oxiedge.cli import main

if __name__ == "__main__":
    sys.exit(main())
LAUNCHER
chmod 0755 "$ROOT$VENV/bin/oxiedge"

# Byte-code compiled ahead: the target's root is read-only for the service
# (ProtectSystem=strict), and hash-based .pyc files keep the image reproducible. With the
# host's interpreter when it is the same minor version, else with the target's own inside
# ROOT (trixie's 3.13 on a bookworm host; under qemu-user for arm64: slower, same bytes).
# (Only the host's Debian interpreter: a pyenv shim on the PATH may name a version it lacks.)
HOST_PY=/usr/bin/python$PY
if [ -x "$HOST_PY" ]; then
    "$HOST_PY" -m compileall -q -j 0 --invalidation-mode checked-hash \
        -s "$ROOT" -p / "$ROOT$SITE" >/dev/null
elif [ -x "$ROOT/usr/bin/python$PY" ]; then
    chroot "$ROOT" "/usr/bin/python$PY" -m compileall -q --invalidation-mode checked-hash \
        "$SITE" >/dev/null
else
    echo "no python$PY on the host or in $ROOT to compile the byte code" >&2; exit 1
fi
echo "installed oxiedge venv into $ROOT$VENV ($(du -sh "$ROOT$VENV" | cut -f1))"
