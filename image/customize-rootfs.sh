#!/bin/bash
# Turn a Debian root file system (a plain directory) into the oxiedge appliance's root:
# unit + sysusers + config files, the operator account, enabled units, SD-card care,
# first-boot step, no SSH host keys and no password anywhere.
#
#   image/customize-rootfs.sh ROOT [--board rpi|generic] [--ssh-key FILE]
#
# Works on any directory (tests run it on a nearly empty one); steps that need packages
# which are not in ROOT (ssh, networkd, ...) are skipped for what is missing. Run as root.
set -euo pipefail

usage() { echo "usage: $0 ROOT [--board rpi|generic] [--ssh-key FILE]" >&2; exit 2; }
[ $# -ge 1 ] || usage
ROOT=$(realpath "$1"); shift
BOARD=generic
SSH_KEY=
while [ $# -gt 0 ]; do
    case "$1" in
        --board) BOARD=$2; shift 2 ;;
        --ssh-key) SSH_KEY=$2; shift 2 ;;
        *) usage ;;
    esac
done
case "$BOARD" in rpi|generic) ;; *) usage ;; esac
[ -d "$ROOT" ] || { echo "no such directory: $ROOT" >&2; exit 1; }
[ "$ROOT" != / ] || { echo "refusing to customize the running system" >&2; exit 1; }
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)

# 1. Overlay files (config, first-boot script and unit, CLI wrapper) and the unit itself.
cp -dR --preserve=mode,links,timestamps "$HERE/rootfs/." "$ROOT/"
chown -R 0:0 "$ROOT/etc/ssh/sshd_config.d" "$ROOT/etc/sudoers.d" "$ROOT/usr/lib/oxiedge" \
    "$ROOT/usr/local/bin/oxiedge"
install -D -m 0644 "$REPO/systemd/oxiedge.service" "$ROOT/usr/lib/systemd/system/oxiedge.service"
install -D -m 0644 "$REPO/systemd/oxiedge.sysusers" "$ROOT/usr/lib/sysusers.d/oxiedge.conf"
if [ -f "$REPO/docs/appliance.md" ]; then
    install -D -m 0644 "$REPO/docs/appliance.md" "$ROOT/usr/share/doc/oxiedge/appliance.md"
fi

# 2. Accounts: the service account (oxiedge) and the operator (admin, SSH key only). The
#    tool creates locked entries ("!*") in shadow: no password hash is ever written.
systemd-sysusers --root="$ROOT" \
    "$ROOT/usr/lib/sysusers.d/oxiedge.conf" "$ROOT/usr/lib/sysusers.d/oxiedge-admin.conf"
uid_of() { awk -F: -v u="$1" '$1 == u { print $3 }' "$ROOT/etc/passwd"; }
gid_of() { awk -F: -v g="$1" '$1 == g { print $3 }' "$ROOT/etc/group"; }
OX_UID=$(uid_of oxiedge); OX_GID=$(gid_of oxiedge)
ADMIN_UID=$(uid_of admin); ADMIN_GID=$(gid_of admin)

install -d -m 0750 -o "$ADMIN_UID" -g "$ADMIN_GID" "$ROOT/home/admin"
install -d -m 0700 -o "$ADMIN_UID" -g "$ADMIN_GID" "$ROOT/home/admin/.ssh"
if [ -n "$SSH_KEY" ]; then
    install -m 0600 -o "$ADMIN_UID" -g "$ADMIN_GID" "$SSH_KEY" "$ROOT/home/admin/.ssh/authorized_keys"
fi

# 3. Configuration and data directory (its own partition on the image, see build.sh).
install -d -m 0755 "$ROOT/etc/oxiedge"
install -m 0640 -o 0 -g "$OX_GID" "$REPO/systemd/oxiedge.env" "$ROOT/etc/oxiedge/oxiedge.env"
install -d -m 0750 -o "$OX_UID" -g "$OX_GID" "$ROOT/var/lib/oxiedge"

# 4. Mounts: noatime everywhere, the data dir on its own partition, /tmp in RAM, no swap.
cat > "$ROOT/etc/fstab" <<FSTAB
# <file system>   <mount point>      <type> <options>                          <dump> <pass>
LABEL=RASPIROOT   /                  ext4   rw,noatime,errors=remount-ro       0      1
LABEL=OXIDATA     /var/lib/oxiedge   ext4   rw,noatime,nodev,nosuid,noexec     0      2
LABEL=RASPIFIRM   /boot/firmware     vfat   rw,noatime,umask=0077,nofail       0      2
tmpfs             /tmp               tmpfs  rw,nosuid,nodev,size=64M,mode=1777 0      0
# No swap: an SD card wears out under swap traffic.
FSTAB
install -d -m 0755 "$ROOT/boot/firmware"

# 5. Identity: filled in on first boot (machine id, hostname, SSH host keys).
printf 'uninitialized\n' > "$ROOT/etc/machine-id"
echo oxiedge > "$ROOT/etc/hostname"
if [ ! -s "$ROOT/etc/hosts" ]; then
    printf '127.0.0.1\tlocalhost\n127.0.1.1\toxiedge\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' \
        > "$ROOT/etc/hosts"
fi
rm -f "$ROOT"/etc/ssh/ssh_host_*_key "$ROOT"/etc/ssh/ssh_host_*_key.pub
rm -f "$ROOT/var/lib/systemd/random-seed" "$ROOT/var/lib/dbus/machine-id"
if [ -d "$ROOT/var/lib/dbus" ]; then ln -sf /etc/machine-id "$ROOT/var/lib/dbus/machine-id"; fi

# 6. Units. systemctl --root edits symlinks only; it needs no running systemd.
enable=(oxiedge.service oxiedge-firstboot.service oxiedge-definitions.service)
for unit in ssh.service systemd-networkd.service systemd-resolved.service \
    systemd-timesyncd.service; do
    if [ -e "$ROOT/usr/lib/systemd/system/$unit" ] || [ -e "$ROOT/lib/systemd/system/$unit" ]; then
        enable+=("$unit")
    fi
done
systemctl --root="$ROOT" enable "${enable[@]}"
# systemd-firstboot would prompt on the console on the first boot: never on an appliance.
systemctl --root="$ROOT" mask systemd-firstboot.service
if [ -e "$ROOT/usr/lib/systemd/system/systemd-networkd-wait-online.service" ]; then
    # Nothing here waits for the network; do not let anything stall the boot on it.
    systemctl --root="$ROOT" mask systemd-networkd-wait-online.service
fi

# 7. Board specifics.
if [ "$BOARD" = rpi ] && [ -f "$ROOT/etc/default/raspi-firmware" ]; then
    # Serial console on the GPIO header (and HDMI), root by label as in the image.
    # (the kernel hook then writes them into /boot/firmware/cmdline.txt, see build.sh)
    defaults=$ROOT/etc/default/raspi-firmware
    sed -i -e '/^#\?ROOTPART=/d' -e '/^#\?CONSOLES=/d' "$defaults"
    # ttyS1: the GPIO header's UART on Pi 3/4/Zero 2 W; ttyAMA10: the Pi 5's debug UART
    # connector (a console that does not exist on a board is ignored by the kernel).
    printf '\n# oxiedge appliance\nROOTPART=LABEL=RASPIROOT\nCONSOLES="ttyS1,115200 ttyAMA10,115200 tty0"\n' >> "$defaults"
    # Appended to config.txt by the kernel hook. The firmware picks the device tree by board
    # name; the Pi 500 (BCM2712 D0 stepping) has none of its own in Debian's kernel, so it
    # gets the Pi 5 D0 one (same SoC and RP1; docs/appliance.md, "Boards").
    cat > "$ROOT/etc/default/raspi-firmware-custom" <<'CUSTOM'
# oxiedge appliance (image/customize-rootfs.sh)
[pi500]
device_tree=bcm2712-d-rpi-5-b.dtb
[all]
CUSTOM
fi
echo "customized $ROOT for board $BOARD (oxiedge uid $OX_UID, admin uid $ADMIN_UID)"
