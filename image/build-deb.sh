#!/bin/bash
# Build the oxiedge .deb for machines that already run Debian or Raspberry Pi OS.
#
#   image/build-deb.sh [--suite trixie|bookworm] [--arch amd64|arm64] [--out DIR]
#
# Writes DIR/oxiedge_VERSION~SUITE_ARCH.deb (default DIR: image/out; suite trixie; arch: the
# host's). The package holds a self-contained venv in /opt/oxiedge built for that suite's
# python3 (3.13 on trixie, 3.11 on bookworm) inside a root file system of that suite, as the
# image is built (pinned wheels: image/constraints.txt, byte code compiled by the target's
# interpreter), the `oxiedge` wrapper in /usr/bin, the hardened unit, sysusers.d and
# tmpfiles.d entries and /etc/oxiedge/oxiedge.env as a conffile. Maintainer scripts:
# image/deb/. Reproducible: SOURCE_DATE_EPOCH (default: the commit's time) fixes every time
# stamp. OXIEDGE_MAINTAINER='Name <email>' for the control file and changelog (default:
# the commit's author).
# Needs root, mmdebstrap and dpkg-deb (image/deps.sh); OXIEDGE_COMMIT,
# OXIEDGE_WORKTREE, OXIEDGE_MIRROR and OXIEDGE_PIP_CONSTRAINTS as for image/build.sh.
set -euo pipefail

SUITE=trixie
ARCH=$(dpkg --print-architecture)
OUT=
usage() {
    sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
        --suite) SUITE=$2; shift 2 ;;
        --arch) ARCH=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done
case "$SUITE" in trixie|bookworm) ;; *) echo "--suite must be trixie or bookworm" >&2; exit 2 ;; esac
case "$ARCH" in arm64|amd64) ;; *) echo "--arch must be amd64 or arm64" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "run as root (mmdebstrap --mode=root, file ownership)" >&2; exit 1; }
for tool in mmdebstrap dpkg-deb python3; do
    command -v "$tool" >/dev/null || { echo "missing $tool: run image/deps.sh" >&2; exit 1; }
done

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
OUT=$(mkdir -p "${OUT:-$HERE/out}" && cd "${OUT:-$HERE/out}" && pwd)
CACHE=${OXIEDGE_IMAGE_CACHE:-$HERE/cache}/$SUITE-$ARCH
COMMIT=${OXIEDGE_COMMIT:-HEAD}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$REPO" log -1 --format=%ct "$COMMIT" 2>/dev/null || date +%s)}
export LC_ALL=C.UTF-8 TZ=UTC
WORK=$(mktemp -d /var/tmp/oxiedge-deb.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
ROOT=$WORK/root
PKG=$WORK/pkg
mkdir -p "$ROOT" "$PKG" "$CACHE"
START=$(date +%s)

if [ "$ARCH" = arm64 ] && [ "$(dpkg --print-architecture)" != arm64 ] \
    && [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    update-binfmts --enable qemu-aarch64
fi

# 1. The project's wheel, then the venv built in a root file system of the target suite.
. "$HERE/lib/wheel.sh"
WHEEL=$(project_wheel "$REPO" "$WORK")
VERSION=$(basename "$WHEEL" | cut -d- -f2)~$SUITE
MIRROR=${OXIEDGE_MIRROR:-http://deb.debian.org/debian}
# Who built it: OXIEDGE_MAINTAINER, else the commit's author.
MAINTAINER=${OXIEDGE_MAINTAINER:-$(git -C "$REPO" log -1 --format='%an <%ae>' "$COMMIT" 2>/dev/null || true)}
[ -n "$MAINTAINER" ] || { echo "set OXIEDGE_MAINTAINER='Name <email>'" >&2; exit 2; }
mmdebstrap --mode=root --variant=apt --arch="$ARCH" --include=python3 \
    --aptopt='Acquire::Retries "3"' \
    --setup-hook='mkdir -p "$1/var/cache/apt/archives"' \
    --setup-hook="sync-in $CACHE /var/cache/apt/archives/" \
    --customize-hook="sync-out /var/cache/apt/archives $CACHE" \
    --customize-hook="'$HERE/install-venv.sh' \"\$1\" $ARCH '$WHEEL'" \
    --skip=download/empty \
    "$SUITE" "$ROOT" "deb $MIRROR $SUITE main" >&2
PY=$(readlink "$ROOT/usr/bin/python3")        # python3.13 / python3.11

# 2. The package tree.
UNITDIR=usr/lib/systemd/system
[ "$SUITE" = bookworm ] && UNITDIR=lib/systemd/system   # bookworm: units stay under /lib
install -d "$PKG/DEBIAN" "$PKG/opt" "$PKG/usr/bin" "$PKG/$UNITDIR" "$PKG/usr/lib/sysusers.d" \
    "$PKG/usr/lib/tmpfiles.d" "$PKG/etc/oxiedge" "$PKG/usr/share/doc/oxiedge" \
    "$PKG/usr/share/lintian/overrides"
cp -a "$ROOT/opt/oxiedge" "$PKG/opt/"
install -m 0755 "$HERE/rootfs/usr/local/bin/oxiedge" "$PKG/usr/bin/oxiedge"
install -m 0644 "$REPO/systemd/oxiedge.service" "$PKG/$UNITDIR/oxiedge.service"
install -m 0644 "$REPO/systemd/oxiedge.sysusers" "$PKG/usr/lib/sysusers.d/oxiedge.conf"
install -m 0644 "$HERE/deb/oxiedge.tmpfiles" "$PKG/usr/lib/tmpfiles.d/oxiedge.conf"
install -m 0644 "$REPO/systemd/oxiedge.env" "$PKG/etc/oxiedge/oxiedge.env"
install -m 0644 "$HERE/deb/copyright" "$PKG/usr/share/doc/oxiedge/copyright"
install -m 0644 "$HERE/deb/lintian-overrides" "$PKG/usr/share/lintian/overrides/oxiedge"
install -m 0644 "$REPO/docs/appliance.md" "$PKG/usr/share/doc/oxiedge/appliance.md"
find "$PKG/opt/oxiedge/lib" -maxdepth 3 -name '*.dist-info' -printf '%f\n' \
    | sed 's/\.dist-info$//' | sort > "$PKG/usr/share/doc/oxiedge/python-packages.txt"
printf 'oxiedge (%s) %s; urgency=medium\n\n  * Built from %s.\n\n -- %s  %s\n' \
    "$VERSION" "$SUITE" "$(git -C "$REPO" rev-parse --short "$COMMIT" 2>/dev/null || echo a working tree)" "$MAINTAINER" \
    "$(date -u -R -d "@$SOURCE_DATE_EPOCH")" | gzip -9n > "$PKG/usr/share/doc/oxiedge/changelog.gz"
for script in postinst prerm postrm; do
    install -m 0755 "$HERE/deb/$script" "$PKG/DEBIAN/$script"
done
echo /etc/oxiedge/oxiedge.env > "$PKG/DEBIAN/conffiles"

# Depends: the suite's interpreter, what the wheels' native code links against (each
# soname mapped to its Debian package; an unknown one fails the build), and the tools the
# maintainer scripts and the wrapper call.
declare -A SONAME_PACKAGE=([libc.so.6]=libc6 [libm.so.6]=libc6 [libpthread.so.0]=libc6
    [libdl.so.2]=libc6 [librt.so.1]=libc6 [ld-linux-aarch64.so.1]=libc6
    [ld-linux-x86-64.so.2]=libc6 [libgcc_s.so.1]=libgcc-s1 [libstdc++.so.6]=libstdc++6)
declare -A native=()
while read -r soname; do
    [ -n "$soname" ] || continue
    package=${SONAME_PACKAGE[$soname]:-}
    [ -n "$package" ] || { echo "no Debian package known for $soname (a wheel's dependency)" >&2; exit 1; }
    native[$package]=1
done < <(find "$PKG/opt/oxiedge" -name '*.so*' -type f -exec readelf -dW {} + 2>/dev/null \
    | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u)
PYVER=${PY#python}
DEPENDS="$PY, python3 (>= $PYVER), python3 (<< ${PYVER%.*}.$(( ${PYVER#*.} + 1 ))), systemd, init-system-helpers (>= 1.54~)"
for package in $(printf '%s\n' "${!native[@]}" | sort); do DEPENDS="$DEPENDS, $package"; done
cat > "$PKG/DEBIAN/control" <<CONTROL
Package: oxiedge
Version: $VERSION
Architecture: $ARCH
Maintainer: $MAINTAINER
Installed-Size: $(du -sk --exclude=DEBIAN "$PKG" | cut -f1)
Depends: $DEPENDS
Section: net
Priority: optional
Homepage: https://example.invalid/oxiedge
Description: MQTT 3.1.1 and AMQP 0-9-1 broker with a durable document store
 oxiedge is an MQTT and AMQP broker for small ARM boards and x86 mini PCs whose
 acknowledged messages survive power cuts (RocksDB with synced writes). This
 package runs it as the hardened systemd unit oxiedge.service under its own
 account, with its data in /var/lib/oxiedge and its settings in
 /etc/oxiedge/oxiedge.env; the operator CLI is "sudo oxiedge status".
 .
 A self-contained Python virtual environment in /opt/oxiedge, built for this
 release's $PY.
CONTROL
(cd "$PKG" && find . -path ./DEBIAN -prune -o -type f -printf '%P\n' | LC_ALL=C sort \
    | xargs -d '\n' md5sum) > "$PKG/DEBIAN/md5sums"
find "$PKG" -newermt "@$SOURCE_DATE_EPOCH" -print0 \
    | xargs -0r touch --no-dereference --date="@$SOURCE_DATE_EPOCH"
DEB=$OUT/oxiedge_${VERSION}_$ARCH.deb
dpkg-deb --root-owner-group -Zxz --build "$PKG" "$DEB" >&2
echo "built $DEB ($(du -h "$DEB" | cut -f1), $PY, $(( $(date +%s) - START )) s)" >&2
echo "$DEB"
