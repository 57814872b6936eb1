#!/bin/bash
# Build the oxiedge appliance image: one command, Debian 13 (trixie), no loop mounts.
#
#   image/build.sh [--suite trixie|bookworm] [--arch arm64|amd64] [--board rpi|generic]
#                  [--out DIR] [--ssh-key FILE] [--compress] [--16k]
#
#   suite    trixie (default: Python 3.13) or bookworm (Python 3.11, no Pi 5).
#   rpi      arm64 only: Raspberry Pi 3 / 4 / 400 / CM4 / Zero 2 W and, on trixie, Pi 5 /
#            500 / CM5 (Debian raspi-firmware + linux-image-arm64, on trixie from
#            trixie-backports for the Pi 5's RP1 drivers), MBR: vfat RASPIFIRM + ext4
#            RASPIROOT + ext4 OXIDATA.
#   generic  the same root file system for emulators: arm64 (QEMU virt) or amd64
#            (linux-image-cloud-amd64); QEMU boots it with the kernel and initrd written
#            next to the image (direct kernel boot).
#   --16k    generic arm64 with Debian's 16 KiB-page kernel (linux-image-arm64-16k, the
#            page size of Apple-silicon machines under Asahi Linux); name ends in -16k.
#
# Output in DIR (default image/out): NAME.img, NAME.packages.txt (Debian + Python
# packages), NAME.build.txt (step times and sizes), NAME.vmlinuz and NAME.initrd.img
# (for QEMU). NAME = oxiedge-BOARD-ARCH. Needs root and the tools from image/deps.sh.
# Two builds of one commit are bit-identical. Inputs: OXIEDGE_COMMIT (default HEAD, what
# goes into the wheel), SOURCE_DATE_EPOCH (default: that commit's time), OXIEDGE_MIRROR
# (a Debian archive URL, e.g. a snapshot; default http://deb.debian.org/debian, plus
# debian-security), OXIEDGE_PIP_CONSTRAINTS (PyPI pins; default image/constraints.txt),
# OXIEDGE_WORKTREE=1 (build the working tree instead of a commit).
set -euo pipefail

SUITE=trixie
ARCH=arm64
BOARD=rpi
OUT=
SSH_KEY=
COMPRESS=0
PAGES_16K=0
usage() {
    sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
        --suite) SUITE=$2; shift 2 ;;
        --arch) ARCH=$2; shift 2 ;;
        --board) BOARD=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --ssh-key) SSH_KEY=$(realpath "$2"); shift 2 ;;
        --compress) COMPRESS=1; shift ;;
        --16k) PAGES_16K=1; shift ;;
        -h|--help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done
case "$SUITE" in trixie|bookworm) ;; *) echo "--suite must be trixie or bookworm" >&2; exit 2 ;; esac
case "$ARCH" in arm64|amd64) ;; *) echo "--arch must be arm64 or amd64" >&2; exit 2 ;; esac
case "$BOARD" in rpi|generic) ;; *) echo "--board must be rpi or generic" >&2; exit 2 ;; esac
if [ "$BOARD" = rpi ] && [ "$ARCH" != arm64 ]; then
    echo "--board rpi needs --arch arm64" >&2; exit 2
fi
if [ "$PAGES_16K" = 1 ] && [ "$BOARD-$ARCH" != generic-arm64 ]; then
    echo "--16k needs --arch arm64 --board generic" >&2; exit 2
fi
[ "$(id -u)" = 0 ] || { echo "run as root (mmdebstrap --mode=root, file ownership)" >&2; exit 1; }

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
OUT=$(mkdir -p "${OUT:-$HERE/out}" && cd "${OUT:-$HERE/out}" && pwd)
# The default suite keeps the historical name; another suite is in the name.
NAME=oxiedge-$BOARD-$ARCH
[ "$SUITE" = trixie ] || NAME=$NAME-$SUITE
[ "$PAGES_16K" = 0 ] || NAME=$NAME-16k
CACHE=${OXIEDGE_IMAGE_CACHE:-$HERE/cache}/$SUITE-$ARCH
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
record "build $NAME ($SUITE), SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH, commit $(git -C "$REPO" rev-parse --short "$COMMIT" 2>/dev/null || echo none)"

# --- 0. emulation for a foreign architecture (binfmt_misc + qemu-user-static, F flag)
if [ "$ARCH" = arm64 ] && [ "$(dpkg --print-architecture)" != arm64 ]; then
    if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
        mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
        update-binfmts --enable qemu-aarch64
    fi
fi

# --- 1. the project's wheel (pure Python), built from this checkout (image/lib/wheel.sh)
step wheel
. "$HERE/lib/wheel.sh"
WHEEL=$(project_wheel "$REPO" "$WORK")
done_step "$(basename "$WHEEL")"

# --- 2. Debian root file system
PACKAGES=(systemd systemd-sysv systemd-timesyncd systemd-resolved udev dbus kmod
    openssh-server sudo python3 cloud-guest-utils fdisk e2fsprogs dosfstools
    iproute2 iputils-ping less nano ca-certificates openssl initramfs-tools zstd)
# Which kernel: Debian's own everywhere. The Pi 5 family (BCM2712 with the RP1 south
# bridge: Ethernet, USB, GPIO) needs the RP1 drivers (rp1_pci, clk-rp1, pinctrl-rp1) that
# mainline gained after trixie's 6.12: trixie-backports' linux-image-arm64 (7.x) has them
# and the BCM2712 device trees (docs/appliance.md, "Boards").
KERNEL_RPI=linux-image-arm64
if [ "$SUITE" = trixie ]; then KERNEL_RPI=linux-image-arm64/trixie-backports; fi
case "$BOARD-$ARCH" in
    rpi-arm64) PACKAGES+=("$KERNEL_RPI" raspi-firmware firmware-brcm80211 wpasupplicant)
        # fixed, gpio-regulator: the Pi 4/400/CM4/5 device trees give the SD slot's host
        # (emmc2, sdio1) vmmc/vqmmc supplies that are regulator-fixed and regulator-gpio
        # nodes; their drivers are modules, and without them the SD host defers for ever
        # ("vmmc regulator not available") and the root is never found (Pi 3: none).
        MODULES="ext4 vfat nls_cp437 nls_ascii mmc_block sdhci_iproc bcm2835 sdhci_pltfm
            sdhci_brcmstb dwc2 xhci_pci pcie_brcmstb reset_raspberrypi usb_storage uas nvme
            virtio_blk virtio_pci virtio_mmio fixed gpio-regulator"
        # Pi 5 root on SD (sdhci-brcmstb, in the SoC) or on USB/NVMe behind RP1.
        if [ "$SUITE" = trixie ]; then
            MODULES="$MODULES pinctrl_brcmstb_bcm2712 irq_bcm2712_mip gpio_brcmstb reset_brcmstb
                rp1_pci clk_rp1 pinctrl_rp1 dwc3 xhci_plat_hcd macb"
        fi ;;
    generic-arm64) if [ "$PAGES_16K" = 1 ]; then PACKAGES+=(linux-image-arm64-16k); else PACKAGES+=(linux-image-arm64); fi
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
# Sources: the suite, its updates and security, and (trixie) backports for the Pi kernel;
# all of them stay in the image's sources for upgrades.
MIRROR=${OXIEDGE_MIRROR:-http://deb.debian.org/debian}
SECURITY=${OXIEDGE_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
COMPONENTS="main non-free-firmware"
mirrors=("deb $MIRROR $SUITE $COMPONENTS" "deb $MIRROR $SUITE-updates $COMPONENTS"
    "deb $SECURITY $SUITE-security $COMPONENTS")
if [ "$SUITE" = trixie ]; then mirrors+=("deb $MIRROR $SUITE-backports $COMPONENTS"); fi
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
    "$SUITE" "$ROOT" "${mirrors[@]}"
if [ "$BOARD" = rpi ]; then
    # What the boards' firmware loads (docs/appliance.md, "The FAT partition, per board"):
    # a hook that silently copies nothing must fail the build, not the first boot.
    for f in config.txt cmdline.txt bootcode.bin start.elf fixup.dat start4.elf fixup4.dat \
        bcm2837-rpi-3-b.dtb bcm2837-rpi-zero-2-w.dtb bcm2711-rpi-4-b.dtb \
        $([ "$SUITE" = trixie ] && echo bcm2712-rpi-5-b.dtb bcm2712-d-rpi-5-b.dtb); do
        [ -s "$FIRMWARE/$f" ] || { echo "no $f on the FAT partition" >&2; exit 1; }
    done
fi
record "step rootfs (mmdebstrap, packages): $(( $(cat "$WORK/t-packages") - STEP_START )) s, $(du -sh --exclude=opt/oxiedge "$ROOT" | cut -f1) root, $(du -sh "$FIRMWARE" | cut -f1) firmware"
record "step customize: $(( $(cat "$WORK/t-customize") - $(cat "$WORK/t-packages") )) s"
record "step venv: $(( $(cat "$WORK/t-venv") - $(cat "$WORK/t-customize") )) s, $(du -sh "$ROOT/opt/oxiedge" | cut -f1)"

# --- 4. finalize: package list, no caches/logs, clamped times
step finalize
{
    echo "# $NAME: Debian $SUITE packages (name version arch), from: ${mirrors[*]}"
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
