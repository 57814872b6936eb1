"""QEMU's Raspberry Pi 4 B (``raspi4b``) for the slow boot tests: ``OXIEDGE_BOOT_MACHINE=raspi4b``
with ``OXIEDGE_BOOT_TARGET=rpi-arm64``.

The card is started the way a Pi 4's firmware would start it: the kernel, initrd, device tree
(``bcm2711-rpi-4-b.dtb``) and command line that config.txt and cmdline.txt name for a Pi 4
B, copied off the FAT partition (tests/appliance/pifirmware.py); the card sits on the SoC's
EMMC2 host, as on the board, where the kernel's ``sdhci-iproc`` drives it.

QEMU (10.0) models the CPU cores, GIC, UARTs, GPIO, DMA, the property mailbox, the EMMC2 and
legacy SD hosts and the DWC2 USB controller of the BCM2711, not the rest. The device tree is
therefore edited - in a copy, the card's file is untouched - where the board's own kernel
would touch hardware QEMU does not have (each entry says why). QEMU itself drops the PCIe,
GENET Ethernet, RNG and thermal nodes.

This host's QEMU may predate the machine (bookworm's 7.2 has no ``raspi4b``; it arrived in
QEMU 9.0): ``OXIEDGE_QEMU_ROOT=DIR`` names a root file system with a newer QEMU and the
device tree tools (``image/qemu-root.sh DIR`` makes one from trixie); the emulator and
``fdtput`` then run in it by chroot, in a private mount namespace where the test's
directories are bind-mounted at their own paths.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

QEMU_ROOT = os.environ.get("OXIEDGE_QEMU_ROOT", "")

# Device tree nodes set to status "disabled" in the copy.
DISABLED = (
    # The HDMI block's clock/reset controller (brcm,brcm2711-dvp) at 0xfef00000 and the
    # always-on L2 interrupt controller next to it (0xfef00100): nothing there in QEMU, the
    # first read aborts the kernel (a synchronous external abort in their probe, or in the
    # unused-clock sweep at the end of the boot).
    "/soc/clock@7ef00000",
    "/soc/interrupt-controller@7ef00100",
    # The display pipeline that hangs off them: HDMI, its DDC buses, the HVS and pixel valves.
    "/soc/hdmi@7ef00700", "/soc/hdmi@7ef05700", "/soc/i2c@7ef04500", "/soc/i2c@7ef09500",
    "/soc/hvs@7e400000", "/soc/pixelvalve@7e206000", "/soc/pixelvalve@7e207000",
    "/soc/pixelvalve@7e20a000", "/soc/pixelvalve@7e216000", "/soc/pixelvalve@7ec12000",
    # The Wi-Fi module's SDIO host: its power sequence waits for a firmware GPIO (below).
    "/soc/mmc@7e300000",
)
# Properties deleted in the copy. The lines of the Pi 4's GPIO expander are driven through
# the firmware's property mailbox, and QEMU's mailbox does not answer those requests
# ("raspberrypi-exp-gpio ... Failed to get GPIO n config"): the SD card's power switch
# (regulator-sd-vcc) stays a fixed regulator, as the firmware leaves it on, and the 1.8 V
# I/O switch (vqmmc) is not used - QEMU's SD card does not signal at 1.8 V.
DELETED = (
    ("/regulator-sd-vcc", "gpio"),
    ("/emmc2-bus@fe000000/mmc@7e340000", "vqmmc-supply"),
)


def emulator(argv: list[str], *dirs: Path) -> list[str]:
    """``argv`` as it runs here: unchanged, or chrooted into OXIEDGE_QEMU_ROOT with
    ``dirs`` bind-mounted at the same paths (a private mount namespace: the mounts go
    when the process does; the emulator keeps the process id, so a SIGKILL reaches it)."""
    if not QEMU_ROOT:
        return argv
    script = ('root=$1; shift; while [ "$1" != -- ]; do mkdir -p "$root$1" && '
              'mount --bind "$1" "$root$1" || exit 1; shift; done; shift; '
              'exec chroot "$root" "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
            QEMU_ROOT, *(str(d.resolve()) for d in dirs), "--", *argv]


def require_raspi4b() -> None:
    """Skip unless a QEMU with the raspi4b machine (and fdtput next to it) is at hand."""
    if not QEMU_ROOT and shutil.which("fdtput") is None:
        pytest.skip("raspi4b: no fdtput (device-tree-compiler); or set OXIEDGE_QEMU_ROOT")
    machines = subprocess.run(emulator(["qemu-system-aarch64", "-machine", "help"]),
                              capture_output=True, text=True, timeout=60, check=False)
    if "raspi4b" not in machines.stdout:
        pytest.skip("this QEMU has no raspi4b machine (QEMU >= 9.0): set OXIEDGE_QEMU_ROOT "
                    "to a root made by image/qemu-root.sh")


def edit_device_tree(source: Path, dest: Path) -> None:
    """The card's Pi 4 device tree with what QEMU lacks disabled, written to ``dest``."""
    shutil.copyfile(source, dest)
    tree = str(dest.resolve())
    edits = [["fdtput", "-t", "s", tree, node, "status", "disabled"] for node in DISABLED]
    edits += [["fdtput", "-d", tree, node, prop] for node, prop in DELETED]
    for edit in edits:
        proc = subprocess.run(emulator(edit, dest.parent), capture_output=True, text=True,
                              timeout=60, check=False)
        assert proc.returncode == 0, f"{edit}: {proc.stderr}"


def raspi4b_command(card: Path, console: Path, netdev: str, debug: str) -> list[str]:
    """QEMU's Raspberry Pi 4 B (2 GiB, 4 cores; a card size that is a power of 2) started
    as its firmware would start the card; the serial console is the mini UART (ttyS1,
    cmdline.txt's, QEMU's second serial port), named again last so that /dev/console,
    where the journal is forwarded, is the serial port."""
    from .pifirmware import boot_files
    from .qemu import card_get, card_read

    require_raspi4b()
    files = console.parent / "pi4-boot"
    files.mkdir(exist_ok=True)
    chosen = boot_files(card_read(card, "config.txt").stdout, "Pi 4 B")
    for name in (chosen.kernel, chosen.initramfs, chosen.device_tree):
        if name:
            card_get(card, name, files / name)
    tree = files / f"qemu-{chosen.device_tree}"
    edit_device_tree(files / chosen.device_tree, tree)
    cmdline = card_read(card, chosen.cmdline).stdout.strip()
    at = {path: str(path.resolve()) for path in (card, console, files)}
    return emulator([
        "qemu-system-aarch64", "-machine", "raspi4b",
        "-kernel", f"{at[files]}/{chosen.kernel}", "-dtb", str(tree.resolve()),
        *(["-initrd", f"{at[files]}/{chosen.initramfs}"] if chosen.initramfs else []),
        "-append", f"{cmdline} console=ttyS1,115200 {debug}",
        # The card on the EMMC2 host (the board's SD slot). QEMU's raspi4b plugs a -drive
        # if=sd card into the legacy SD host, the Wi-Fi one on a Pi 4; its EMMC2 is the
        # first "generic-sdhci" on the system bus (the last one QEMU creates).
        "-drive", f"if=none,id=card,file={at[card]},format=raw",
        "-device", "sd-card,drive=card,bus=/generic-sdhci/sd-bus",
        # The Pi 4's Ethernet (GENET) is not modelled: QEMU's USB network adapter on the
        # DWC2 USB, as on raspi3b (usb0, matched by the image's en* network file).
        "-netdev", netdev, "-device", "usb-net,netdev=n0,mac=dc:a6:32:00:00:01",
        "-serial", "null", "-serial", f"file:{at[console]}",
    ], card.parent, console.parent)
