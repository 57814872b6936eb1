#!/bin/bash
# Build the oxiedge appliance image: one command, Debian bookworm, no loop mounts.
#
#   image/build.sh [--arch arm64|amd64] [--board rpi|generic] [--out DIR] [--ssh-key FILE]
#                  [--compress]
#
#   rpi      arm64 only: Raspberry Pi 3 / 4 / Zero 2 W (Debian raspi-firmware +
#            linux-image-arm64), MBR: vfat RASPIFIRM + ext4 RASPIROOT + ext4 OXIDATA.
#   generic  the same root file system for emulators: arm64 (QEMU virt) or amd64
#            (linux-image-cloud-amd64); QEMU boots it with the kernel and initrd written
#            next to the image (direct kernel boot).
#
# Output in DIR (default image/out): NAME.img, NAME.packages.txt (Debian + Python
# packages), NAME.build.txt (step times and sizes), NAME.vmlinuz and NAME.initrd.img
# (for QEMU). NAME = oxiedge-BOARD-ARCH. Needs root and the tools from image/deps.sh.
# Two builds of one commit are bit-identical. Inputs: OXIEDGE_COMMIT (default HEAD, what
# goes into the wheel), SOURCE_DATE_EPOCH (default: that commit's time), OXIEDGE_MIRROR
# (e.g. a snapshot archive; default: mmdebstrap's Debian default with security and
# updates), OXIEDGE_PIP_CONSTRAINTS (pin PyPI versions), OXIEDGE_WORKTREE=1 (build the
# working tree instead of a commit).
set -euo pipefail

ARCH=arm64
BOARD=rpi
OUT=
SSH_KEY=
COMPRESS=0
usage() {
    sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
        --arch) ARCH=$2; shift 2 ;;
        --board) BOARD=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --ssh-key) SSH_KEY=$(realpath "$2"); shift 2 ;;
        --compress) COMPRESS=1; shift ;;
        -h|--help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done
case "$ARCH" in arm64|amd64) ;; *) echo "--arch must be arm64 or amd64" >&2; exit 2 ;; esac
case "$BOARD" in rpi|generic) ;; *) echo "--board must be rpi or generic" >&2; exit 2 ;; esac
if [ "$BOARD" = rpi ] && [ "$ARCH" != arm64 ]; then
    echo "--board rpi needs --arch arm64" >&2; exit 2
fi
[ "$(id -u)" = 0 ] || { echo "run as root (mmdebstrap --mode=root, file ownership)" >&2; exit 1; }

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
OUT=$(mkdir -p "${OUT:-$HERE/out}" && cd "${OUT:-$HERE/out}" && pwd)
NAME=oxiedge-$BOARD-$ARCH
CACHE=${OXIEDGE_IMAGE_CACHE:-$HERE/cache}/$ARCH
COMMIT=${OXIEDGE_COMMIT:-HEAD}   # what goes into the image (git archive)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$REPO" log -1 --format=%ct "$COMMIT" 2>/dev/null || date +%s)}
export LC_ALL=C.UTF-8 TZ=UTC

for tool in mmdebstrap mke2fs mkfs.vfat mcopy sfdisk python3 systemd-sysusers; do
    command -v "$tool" >/dev/null || { echo "missing $tool: run image/deps.sh" >&2; exit 1; }
done

WORK=$(mktemp -d /var/tmp/oxiedge-image.XXXXXX)
ROOT=$WORK/root
FIRMWARE=$WORK/firmware
cleanup() {
    mountpoint -q "$ROOT/boot/firmware" 2>/dev/null && umount "$ROOT/boot/firmware"
    rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$ROOT" "$FIRMWARE" "$CACHE"

LOG=$OUT/$NAME.build.txt
: > "$LOG"
record() { echo "$*" | tee -a "$LOG"; }
STEP_START=0
step() { STEP_NAME=$1; STEP_START=$(date +%s); echo "== $1" >&2; }
done_step() { record "step $STEP_NAME: $(( $(date +%s) - STEP_START )) s${1:+, $1}"; }
BUILD_START=$(date +%s)
record "build $NAME, SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH, commit $(git -C "$REPO" rev-parse --short "$COMMIT" 2>/dev/null || echo none)"

# --- 0. emulation for a foreign architecture (binfmt_misc + qemu-user-static, F flag)
if [ "$ARCH" = arm64 ] && [ "$(dpkg --print-architecture)" != arm64 ]; then
    if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
        mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
        update-binfmts --enable qemu-aarch64
    fi
fi

# --- 1. the project's wheel (pure Python), built from this checkout
#     From the committed tree (git archive $OXIEDGE_COMMIT): what a commit says is what the image
#     holds, and no stale build/ directory leaks in. OXIEDGE_WORKTREE=1 takes the working
#     tree instead (uncommitted changes, for development).
step wheel
mkdir -p "$WORK/src"
if [ "${OXIEDGE_WORKTREE:-0}" = 1 ] || ! git -C "$REPO" rev-parse HEAD >/dev/null 2>&1; then
    tar -C "$REPO" --exclude=./.venv --exclude=./build --exclude=./.git --exclude='*.egg-info' \
        --exclude=./image/out --exclude=./image/cache --exclude=__pycache__ -cf - . \
        | tar -C "$WORK/src" -xf -
else
    git -C "$REPO" archive --format=tar "$COMMIT" | tar -C "$WORK/src" -xf -
fi
env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null \
    python3 -m pip wheel --quiet --no-deps --disable-pip-version-check -w "$WORK/wheel" "$WORK/src"
WHEEL=$(ls "$WORK"/wheel/oxiedge-*.whl)
done_step "$(basename "$WHEEL")"

# --- 2. Debian root file system
PACKAGES=(systemd systemd-sysv systemd-timesyncd systemd-resolved udev dbus kmod
    openssh-server sudo python3 cloud-guest-utils fdisk e2fsprogs dosfstools
    iproute2 iputils-ping less nano ca-certificates openssl initramfs-tools zstd)
case "$BOARD-$ARCH" in
    rpi-arm64) PACKAGES+=(linux-image-arm64 raspi-firmware firmware-brcm80211 wpasupplicant)
        MODULES="ext4 vfat nls_cp437 nls_ascii mmc_block sdhci_iproc bcm2835 sdhci_pltfm
            dwc2 xhci_pci pcie_brcmstb reset_raspberrypi usb_storage uas nvme
            virtio_blk virtio_pci virtio_mmio" ;;
    generic-arm64) PACKAGES+=(linux-image-arm64)
        MODULES="ext4 vfat nls_cp437 nls_ascii virtio_blk virtio_pci virtio_mmio virtio_net
            nvme usb_storage uas" ;;
    generic-amd64) PACKAGES+=(linux-image-cloud-amd64)
        MODULES="ext4 vfat nls_cp437 nls_ascii virtio_blk virtio_pci virtio_scsi virtio_net
            sd_mod nvme ata_piix" ;;
esac
# initramfs with a short module list (MODULES=list): Debian's default MODULES=most takes
# ~56 min under emulation, the list ~1 min. Written before the kernel is installed.
SETUP_INITRAMFS="mkdir -p \"\$1/etc/initramfs-tools/conf.d\" \"\$1/etc/initramfs-tools/hooks\"
echo MODULES=list > \"\$1/etc/initramfs-tools/conf.d/oxiedge\"
echo COMPRESS=zstd >> \"\$1/etc/initramfs-tools/conf.d/oxiedge\"
echo '$(echo $MODULES)' > \"\$1/etc/initramfs-tools/oxiedge-modules\"
install -m 0755 '$HERE/lib/initramfs-hook' \"\$1/etc/initramfs-tools/hooks/oxiedge-modules\""
mirrors=()
if [ -n "${OXIEDGE_MIRROR:-}" ]; then mirrors=("$OXIEDGE_MIRROR"); fi
# Customization runs as mmdebstrap hooks, while the chroot still has /proc, /dev and the
# firmware bind mount (the raspi-firmware kernel hook needs them).
CUSTOMIZE="'$HERE/customize-rootfs.sh' \"\$1\" --board $BOARD${SSH_KEY:+ --ssh-key '$SSH_KEY'}"
RASPI_HOOK=true
if [ "$BOARD" = rpi ]; then
    # Rewrite cmdline.txt/config.txt with the settings customize-rootfs.sh made.
    # (the hook only acts when called the way a kernel package's postinst calls it)
    RASPI_HOOK='for k in "$1"/lib/modules/*; do chroot "$1" env DEB_MAINT_PARAMS=configure /etc/kernel/postinst.d/z50-raspi-firmware "${k##*/}"; done'
fi
step rootfs
mmdebstrap --mode=root --variant=apt --arch="$ARCH" \
    --components=main,non-free-firmware \
    --include="$(IFS=,; echo "${PACKAGES[*]}")" \
    --aptopt='Acquire::Retries "3"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --setup-hook='mkdir -p "$1/var/cache/apt/archives"' \
    --setup-hook="sync-in $CACHE /var/cache/apt/archives/" \
    --setup-hook="$SETUP_INITRAMFS" \
    --setup-hook="mkdir -p \"\$1/boot/firmware\" && mount --bind '$FIRMWARE' \"\$1/boot/firmware\"" \
    --customize-hook="sync-out /var/cache/apt/archives $CACHE" \
    --customize-hook='rm -f "$1"/var/cache/apt/archives/*.deb' \
    --customize-hook="date +%s > '$WORK/t-packages'" \
    --customize-hook="$CUSTOMIZE" \
    --customize-hook="$RASPI_HOOK" \
    --customize-hook="date +%s > '$WORK/t-customize'" \
    --customize-hook="'$HERE/install-venv.sh' \"\$1\" $ARCH '$WHEEL'" \
    --customize-hook="date +%s > '$WORK/t-venv'" \
    --customize-hook='umount "$1/boot/firmware"' \
    --skip=download/empty \
    bookworm "$ROOT" "${mirrors[@]}"
record "step rootfs (mmdebstrap, packages): $(( $(cat "$WORK/t-packages") - STEP_START )) s, $(du -sh --exclude=opt/oxiedge "$ROOT" | cut -f1) root, $(du -sh "$FIRMWARE" | cut -f1) firmware"
record "step customize: $(( $(cat "$WORK/t-customize") - $(cat "$WORK/t-packages") )) s"
record "step venv: $(( $(cat "$WORK/t-venv") - $(cat "$WORK/t-customize") )) s, $(du -sh "$ROOT/opt/oxiedge" | cut -f1)"

# --- 4. finalize: package list, no caches/logs, clamped times
step finalize
{
    echo "# $NAME: Debian packages (name version arch)"
    dpkg-query --admindir="$ROOT/var/lib/dpkg" -W -f '${Package} ${Version} ${Architecture}\n' | sort
    echo "# Python packages in /opt/oxiedge"
    find "$ROOT/opt/oxiedge/lib" -maxdepth 3 -name '*.dist-info' -printf '%f\n' \
        | sed 's/\.dist-info$//' | sort
} > "$OUT/$NAME.packages.txt"
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/cache/debconf/*-old \
    "$ROOT"/var/lib/dpkg/*-old "$ROOT"/var/cache/ldconfig/aux-cache "$ROOT"/tmp/*
find "$ROOT/var/log" -type f -exec truncate -s 0 {} +
# Kernel and initrd next to the image for QEMU's direct kernel boot (the rpi image boots
# on the arm64 "virt" machine this way too: its initrd carries the virtio modules).
cp -L "$(ls "$ROOT"/boot/vmlinuz-* | sort -V | tail -1)" "$OUT/$NAME.vmlinuz"
cp -L "$(ls "$ROOT"/boot/initrd.img-* | sort -V | tail -1)" "$OUT/$NAME.initrd.img"
# Clamp every time stamp to SOURCE_DATE_EPOCH (mke2fs and mcopy copy them as they are).
find "$ROOT" "$FIRMWARE" -newermt "@$SOURCE_DATE_EPOCH" -print0 \
    | xargs -0r touch --no-dereference --date="@$SOURCE_DATE_EPOCH"
done_step "$(wc -l < "$OUT/$NAME.packages.txt") lines of package list"

# --- 5. partitions and the image, assembled without loop devices
step image
"$HERE/make-image.sh" "$ROOT" "$FIRMWARE" "$OUT/$NAME.img"
done_step "$(du -h --apparent-size "$OUT/$NAME.img" | cut -f1) raw, $(du -h "$OUT/$NAME.img" | cut -f1) allocated"

if [ "$COMPRESS" = 1 ]; then
    step compress
    zstd -q -T0 -3 -f "$OUT/$NAME.img" -o "$OUT/$NAME.img.zst"
    done_step "$(du -h "$OUT/$NAME.img.zst" | cut -f1)"
fi
record "total: $(( $(date +%s) - BUILD_START )) s"
( cd "$OUT" && sha256sum "$NAME.img" > "$NAME.img.sha256" )
record "image: $OUT/$NAME.img"
