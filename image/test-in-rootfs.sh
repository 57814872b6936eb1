#!/bin/bash
# Run the default test suite with a Debian release's own Python, in a root file system of
# that release (chroot; no container runtime needed). The project supports bookworm's
# Python 3.11 (the CI host) and trixie's 3.13 (the image); 3.13 is not in bookworm.
#
#   image/test-in-rootfs.sh [--suite trixie|bookworm] [--keep DIR] [--minimal] [PYTEST_ARGS...]
#
# The root (mmdebstrap, the host's architecture) gets the suite's python3 and python3-venv
# and the Debian packages .ci/run installs for the tests that need them (mosquitto and its
# clients, node-mqtt, npm, rabbitmq-server, prometheus, chromium and chromium-driver,
# valgrind); --minimal leaves those out (those tests then skip, saying why). The checkout is
# copied to /src (git archive of HEAD, or the working tree with OXIEDGE_WORKTREE=1) and, with
# no PYTEST_ARGS, `bash .ci/run` runs there: the README's command (a venv, `pip install -e
# '.[test]'`, `pytest -n auto`), then ruff and mypy, all on the suite's interpreter. pip in
# the root installs offline from wheels the host downloads for that Python (pip --platform,
# as image/install-venv.sh does; the runtime dependencies at image/constraints.txt's pins):
# the root's CA store need not trust the host's network. With PYTEST_ARGS: the same venv,
# then `pytest PYTEST_ARGS`. The PyPI wheel check is left out in the root (it asks the index;
# it checks cp311 and cp313 on the host). --keep DIR: build the root in DIR and keep it
# (a second run reuses it). Needs root and the Debian mirror (OXIEDGE_MIRROR).
set -euo pipefail

SUITE=trixie
KEEP=
MINIMAL=0
while [ $# -gt 0 ]; do
    case "$1" in
        --suite) SUITE=$2; shift 2 ;;
        --keep) KEEP=$2; shift 2 ;;
        --minimal) MINIMAL=1; shift ;;
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
    # and what the tests mounted inside (`ip netns add` mounts the root's /run/netns)
    awk -v root="$ROOT/" 'index($2, root) == 1 {print $2}' /proc/mounts | sort -r \
        | while read -r m; do umount -l "$m" 2>/dev/null || true; done
    [ -n "$KEEP" ] || rm -rf "$ROOT"
}
trap cleanup EXIT

# mount: the disk-full tests mount a small tmpfs; iproute2: a hostile-client test as root.
PACKAGES=python3,python3-venv,openssl,ca-certificates,procps,mount,iproute2
[ "$MINIMAL" = 1 ] || PACKAGES=$PACKAGES,mosquitto,mosquitto-clients,node-mqtt,nodejs,npm,rabbitmq-server,prometheus,chromium,chromium-driver,valgrind
if [ ! -x "$ROOT/usr/bin/python3" ]; then
    rm -rf "$ROOT"
    mmdebstrap --mode=root --variant=apt --include="$PACKAGES" \
        --aptopt='Acquire::Retries "3"' \
        "$SUITE" "$ROOT" "deb ${OXIEDGE_MIRROR:-http://deb.debian.org/debian} $SUITE main" >&2
fi
# No service started by a later package install (.ci/run installs what is missing).
printf '#!/bin/sh\nexit 101\n' > "$ROOT/usr/sbin/policy-rc.d"
chmod 0755 "$ROOT/usr/sbin/policy-rc.d"
grep -qw localhost "$ROOT/etc/hosts" 2>/dev/null || printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n' >> "$ROOT/etc/hosts"
PY=$(readlink "$ROOT/usr/bin/python3" | sed 's/^python//')
ARCH=$(uname -m)

# The wheels pip in the root installs from: the project's runtime and test dependencies and
# its build backend, binary wheels for the root's Python, from PyPI (not the host's pip
# settings: its find-links and constraints are for the host's Python).
WHEELS=/opt/test-wheels
requirements=$(python3 -c 'import sys, tomllib
p = tomllib.load(open(sys.argv[1], "rb"))
print("\n".join(p["project"]["dependencies"] + p["project"]["optional-dependencies"]["test"]
                + p["build-system"]["requires"]))' "$REPO/pyproject.toml")
mkdir -p "$ROOT$WHEELS"
# shellcheck disable=SC2086
env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL -u PIP_CONSTRAINT \
    PIP_CONFIG_FILE=/dev/null python3 -m pip download --quiet --disable-pip-version-check \
    --only-binary=:all: --platform "manylinux2014_$ARCH" --platform "manylinux_2_28_$ARCH" \
    --platform "manylinux_2_34_$ARCH" --python-version "$PY" --implementation cp \
    --abi "cp${PY/./}" --constraint "$HERE/constraints.txt" \
    -d "$ROOT$WHEELS" $requirements >&2

# The checkout, fresh each run (its venv kept: pip updates it).
mkdir -p "$ROOT/src"
find "$ROOT/src" -mindepth 1 -maxdepth 1 ! -name .venv -exec rm -rf {} +
if [ "${OXIEDGE_WORKTREE:-0}" = 1 ]; then
    tar -C "$REPO" --exclude=./.venv --exclude=./.git --exclude=./image/out \
        --exclude=./image/cache --exclude=__pycache__ -cf - . | tar -C "$ROOT/src" -xf -
else
    git -C "$REPO" archive --format=tar HEAD | tar -C "$ROOT/src" -xf -
fi
# npm in the root (the amqplib tests fetch their client with it) trusts what the host's
# Node trusts: behind a TLS-intercepting proxy the host's bundle has its CA, Debian's does not.
host_ca=${NODE_EXTRA_CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}
node_ca=()
if [ -r "$host_ca" ]; then
    cp "$host_ca" "$ROOT/etc/ssl/host-ca.crt"
    node_ca=(NODE_EXTRA_CA_CERTS=/etc/ssl/host-ca.crt)
fi
for m in proc sys dev dev/pts; do
    mkdir -p "$ROOT/$m"
    case $m in proc) mount -t proc proc "$ROOT/proc" ;; *) mount --bind "/$m" "$ROOT/$m" ;; esac
    mounts+=("$ROOT/$m")
done
mount -t tmpfs tmpfs "$ROOT/dev/shm" && mounts+=("$ROOT/dev/shm")
if [ $# -gt 0 ]; then
    # shellcheck disable=SC2016
    run='python3 -m venv .venv && .venv/bin/pip install -q -e ".[test]" && exec .venv/bin/python -m pytest "$@"'
else
    run='exec bash .ci/run'
fi
echo "python$PY in $SUITE ($ROOT): ${*:-bash .ci/run}" >&2
chroot "$ROOT" env -i PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LC_ALL=C.UTF-8 PIP_NO_INDEX=1 PIP_FIND_LINKS="$WHEELS" PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore "${node_ca[@]}" \
    PYTEST_ADDOPTS="-p no:cacheprovider --deselect tests/appliance/test_wheels.py::test_every_runtime_dependency_has_a_wheel" \
    sh -c "cd /src && $run" pytest "$@"
