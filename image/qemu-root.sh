#!/bin/sh
# A Debian trixie root file system holding QEMU 10 and the device tree tools, for the slow
# boot test on QEMU's Raspberry Pi 4 B (OXIEDGE_BOOT_MACHINE=raspi4b): the machine arrived in
# QEMU 9.0, bookworm's QEMU is 7.2. The test runs qemu-system-aarch64 and fdtput in it by
# chroot (tests/appliance/raspi4b.py, OXIEDGE_QEMU_ROOT=DIR). Root; 250 MB, ~3 min.
#
#   image/qemu-root.sh DIR
set -e
if [ "$#" -ne 1 ]; then
    echo "usage: $0 DIR" >&2
    exit 2
fi
MIRROR=${OXIEDGE_MIRROR:-http://deb.debian.org/debian}
mmdebstrap --mode=root --variant=apt --include=qemu-system-arm,device-tree-compiler \
    trixie "$1" "deb $MIRROR trixie main" "deb $MIRROR trixie-updates main"
chroot "$1" qemu-system-aarch64 -machine help | grep -q '^raspi4b ' || {
    echo "$1: its QEMU has no raspi4b machine" >&2
    exit 1
}
echo "OXIEDGE_QEMU_ROOT=$1"
