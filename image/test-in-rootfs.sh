#!/bin/bash
# Run the default test suite with a Debian release's own Python, in a root file system of
# that release (chroot; no container runtime needed). The project supports bookworm's
# Python 3.11 (the CI host) and trixie's 3.13 (the image); 3.13 is not in bookworm.
#
#   image/test-in-rootfs.sh [--suite trixie|bookworm] [--keep DIR] [PYTEST_ARGS...]
#
# The root gets the suite's python3 and openssl (mmdebstrap, native architecture); the test
# dependencies are installed from the host as binary wheels for that Python (pip
# --platform, as image/install-venv.sh does); the checkout is copied in (git archive of HEAD,
# or the working tree with OXIEDGE_WORKTREE=1) and run from there with PYTHONPATH. Tests
# that need host packages (mosquitto, rabbitmq-server, node-mqtt, prometheus) skip there;
# the PyPI wheel check is left out (it asks the package index, whose TLS the root's CA
# store may not trust behind a proxy; it runs on the host for cp313 too).
# --keep DIR: build the root in DIR and keep it (a second run reuses it). Needs root.
set -euo pipefail

SUITE=trixie
KEEP=
while [ $# -gt 0 ]; do
    case "$1" in
        --suite) SUITE=$2; shift 2 ;;
        --keep) KEEP=$2; shift 2 ;;
        *) break ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "run as root (mmdebstrap --mode=root, chroot)" >&2; exit 1; }
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
ROOT=${KEEP:-$(mktemp -d /var/tmp/oxiedge-suite.XXXXXX)}
mounts=()
cleanup() {
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
    [ -n "$KEEP" ] || rm -rf "$ROOT"
}
trap cleanup EXIT

if [ ! -x "$ROOT/usr/bin/python3" ]; then
    rm -rf "$ROOT"
    # mount: the disk-full tests mount a small tmpfs; python3-pip: test_wheels asks PyPI.
    mmdebstrap --mode=root --variant=apt \
        --include=python3,python3-pip,openssl,ca-certificates,procps,mount \
        "$SUITE" "$ROOT" "deb ${OXIEDGE_MIRROR:-http://deb.debian.org/debian} $SUITE main" >&2
fi
PY=$(readlink "$ROOT/usr/bin/python3" | sed 's/^python//')
ARCH=$(uname -m)
DEPS=/opt/test-deps
if [ ! -d "$ROOT$DEPS" ]; then
    requirements=$(python3 -c 'import sys, tomllib
p = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join(p["dependencies"] + p["optional-dependencies"]["test"]))' "$REPO/pyproject.toml")
    # shellcheck disable=SC2086
    env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL PIP_CONFIG_FILE=/dev/null \
        python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
        --only-binary=:all: --platform "manylinux2014_$ARCH" --platform "manylinux_2_28_$ARCH" \
        --platform "manylinux_2_34_$ARCH" \
        --python-version "$PY" --implementation cp --abi "cp${PY/./}" \
        --target "$ROOT$DEPS" $requirements >&2
fi
# The dependencies through a .pth file, not PYTHONPATH: tests start subprocesses with a
# PYTHONPATH of their own. The `oxiedge` command, as the console script would be.
echo "$DEPS" > "$ROOT/usr/lib/python3/dist-packages/oxiedge-test-deps.pth"
printf '#!/usr/bin/python3\nimport sys\nfrom oxiedge.cli import main\nsys.exit(main())\n' \
    > "$ROOT/usr/local/bin/oxiedge"
chmod 0755 "$ROOT/usr/local/bin/oxiedge"
rm -rf "$ROOT/src" && mkdir -p "$ROOT/src"
if [ "${OXIEDGE_WORKTREE:-0}" = 1 ]; then
    tar -C "$REPO" --exclude=./.venv --exclude=./.git --exclude=./image/out \
        --exclude=./image/cache --exclude=__pycache__ -cf - . | tar -C "$ROOT/src" -xf -
else
    git -C "$REPO" archive --format=tar HEAD | tar -C "$ROOT/src" -xf -
fi
for m in proc sys dev dev/pts; do
    mkdir -p "$ROOT/$m"
    case $m in proc) mount -t proc proc "$ROOT/proc" ;; *) mount --bind "/$m" "$ROOT/$m" ;; esac
    mounts+=("$ROOT/$m")
done
mount -t tmpfs tmpfs "$ROOT/dev/shm" && mounts+=("$ROOT/dev/shm")
echo "python$PY in $SUITE ($ROOT): pytest $*" >&2
chroot "$ROOT" env -i PATH="$DEPS/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME=/root LC_ALL=C.UTF-8 \
    PYTHONPATH=/src PYTHONDONTWRITEBYTECODE=1 \
    sh -c "cd /src && exec python3 -m pytest -p no:cacheprovider \"\$@\"" pytest \
    --deselect tests/appliance/test_wheels.py::test_every_runtime_dependency_has_an_aarch64_wheel \
    "$@"
