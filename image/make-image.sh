#!/bin/bash
# Assemble the disk image from directories, without loop devices or mounts: each file
# system is made in its own file (mkfs.vfat + mcopy, mke2fs -d), then the MBR partition
# table is written with sfdisk and the file systems are copied in with dd.
#
#   image/make-image.sh ROOT FIRMWARE_DIR OUT.img
#
# Layout (MBR: the Pi 3 boot ROM cannot read GPT):
#   p1  FAT32  RASPIFIRM  /boot/firmware    (firmware, kernel, initrd, DTBs, config.txt)
#   p2  ext4   RASPIROOT  /                 (sized to the root file system + headroom)
#   p3  ext4   OXIDATA    /var/lib/oxiedge  (small; grown to fill the card on first boot)
# Fixed labels, disk id, UUIDs and hash seeds; file times come clamped from the caller and
# mke2fs uses SOURCE_DATE_EPOCH for its own time stamps.
set -euo pipefail

[ $# -eq 3 ] || { echo "usage: $0 ROOT FIRMWARE_DIR OUT.img" >&2; exit 2; }
ROOT=$(realpath "$1"); FIRMWARE=$(realpath "$2"); IMG=$3
: "${SOURCE_DATE_EPOCH:=0}"
export E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH MTOOLS_SKIP_CHECK=1
TMP=$(mktemp -d "$(dirname "$IMG")/.make-image.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

MIB=$((1024 * 1024))
START_MIB=4                                   # first partition at 4 MiB (SD erase blocks)
FW_MIB=${OXIEDGE_FIRMWARE_MIB:-256}
DATA_MIB=${OXIEDGE_DATA_MIB:-64}
# Root: what is there plus 30 % and 256 MiB of headroom for upgrades and logs.
used_kib=$(du -sk --apparent-size "$ROOT" | cut -f1)
ROOT_MIB=$(( (used_kib * 13 / 10) / 1024 + 256 ))
[ "$(find "$FIRMWARE" -mindepth 1 | head -1)" ] || FW_MIB=${OXIEDGE_FIRMWARE_MIB:-64}

# p1: FAT32 with a fixed volume id; --invariant keeps mkfs.vfat from using the clock.
mkfs.vfat -F 32 -n RASPIFIRM -i 0E0E0E01 --invariant -C "$TMP/firmware.img" $((FW_MIB * 1024)) >/dev/null
if [ "$(find "$FIRMWARE" -mindepth 1 | head -1)" ]; then
    # Sorted for a stable directory order; -m keeps the (clamped) modification times.
    (cd "$FIRMWARE" && find . -mindepth 1 -maxdepth 1 -printf '%P\n' | sort | while read -r entry; do
        mcopy -s -m -p -Q -i "$TMP/firmware.img" "$entry" ::
    done)
fi

# p2 and p3: ext4 filled straight from the directories (mke2fs -d).
mkext4() { # label uuid hash_seed size_mib source_dir root_owner
    mke2fs -q -F -t ext4 -L "$1" -U "$2" -E "hash_seed=$3,root_owner=$6" -m 1 \
        -d "$5" "$TMP/$1.img" "${4}M"
    # e2fsprogs < 1.47.2 stamps every copied inode's ctime with the clock, and atime is
    # copied from the source, where the build itself read files (mtime is clamped by the
    # caller): set both to SOURCE_DATE_EPOCH so two builds of one commit give the same bytes.
    (cd "$5" && find . -printf '%P\n') | while IFS= read -r path; do
        printf 'sif "/%s" ctime @%s\nsif "/%s" atime @%s\n' \
            "$path" "$SOURCE_DATE_EPOCH" "$path" "$SOURCE_DATE_EPOCH"
    done > "$TMP/$1.ctime"
    debugfs -w -f "$TMP/$1.ctime" "$TMP/$1.img" >/dev/null 2>"$TMP/$1.ctime.log"
    if grep -v '^debugfs ' "$TMP/$1.ctime.log" | grep -q .; then
        echo "warning: debugfs could not reset some ctimes:" >&2
        grep -v '^debugfs ' "$TMP/$1.ctime.log" | head -5 >&2
    fi
}
# The data partition and the firmware are mounted over these directories: in the root
# file system they are empty mount points (the data partition starts empty).
DATA_OWNER=$(stat -c %u:%g "$ROOT/var/lib/oxiedge")
[ -z "$(ls -A "$ROOT/var/lib/oxiedge")" ] || { echo "$ROOT/var/lib/oxiedge is not empty" >&2; exit 1; }
[ -z "$(ls -A "$ROOT/boot/firmware")" ] || { echo "$ROOT/boot/firmware is not empty" >&2; exit 1; }
mkext4 RASPIROOT 6f786965-6467-4500-8000-000000000002 6f786965-6467-4500-8000-0000000000a2 \
    "$ROOT_MIB" "$ROOT" 0:0
mkdir -p "$TMP/data"
mkext4 OXIDATA 6f786965-6467-4500-8000-000000000003 6f786965-6467-4500-8000-0000000000a3 \
    "$DATA_MIB" "$TMP/data" "$DATA_OWNER"

# The disk: partition table, then each file system at its offset.
TOTAL_MIB=$((START_MIB + FW_MIB + ROOT_MIB + DATA_MIB))
rm -f "$IMG"
truncate -s "${TOTAL_MIB}M" "$IMG"
s() { echo $(( $1 * MIB / 512 )); }   # MiB -> 512-byte sectors
sfdisk --quiet --no-reread --no-tell-kernel "$IMG" <<TABLE
label: dos
label-id: 0x6f786965
unit: sectors

start=$(s $START_MIB), size=$(s $FW_MIB), type=c, bootable
start=$(s $((START_MIB + FW_MIB))), size=$(s $ROOT_MIB), type=83
start=$(s $((START_MIB + FW_MIB + ROOT_MIB))), size=$(s $DATA_MIB), type=83
TABLE
put() { dd if="$1" of="$IMG" bs=1M seek="$2" conv=notrunc,sparse status=none; }
put "$TMP/firmware.img" "$START_MIB"
put "$TMP/RASPIROOT.img" $((START_MIB + FW_MIB))
put "$TMP/OXIDATA.img" $((START_MIB + FW_MIB + ROOT_MIB))
echo "image $IMG: ${TOTAL_MIB} MiB (firmware ${FW_MIB}, root ${ROOT_MIB}, data ${DATA_MIB} MiB)"
