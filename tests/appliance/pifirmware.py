"""What a Raspberry Pi's boot firmware takes from the card's FAT partition, for the tests.

QEMU's Raspberry Pi machines do not run the boot firmware (``bootcode.bin`` and
``start*.elf`` on Pi 3/4, the EEPROM on Pi 5): they start a kernel given on QEMU's command
line. ``boot_files`` reads ``config.txt`` the way the firmware does for one board (the
``[all]`` section and the board's conditional filters; ``kernel=``, ``initramfs``,
``device_tree=``, ``cmdline=``) so that the emulated Pi boots exactly the kernel, initrd,
device tree and command line a real board would find, and the slow test can check that
every supported board finds its files.
"""

from __future__ import annotations

from dataclasses import dataclass

# board -> (the config.txt filters that apply to it, the device tree the firmware loads by
# default with upstream_kernel=1: the mainline names Debian's kernel ships).
BOARDS: dict[str, tuple[tuple[str, ...], str]] = {
    "Pi 3 B": (("pi3",), "bcm2837-rpi-3-b.dtb"),
    "Pi 3 B+": (("pi3", "pi3+"), "bcm2837-rpi-3-b-plus.dtb"),
    "Pi 3 A+": (("pi3", "pi3+"), "bcm2837-rpi-3-a-plus.dtb"),
    "Zero 2 W": (("pi02",), "bcm2837-rpi-zero-2-w.dtb"),
    "Pi 4 B": (("pi4",), "bcm2711-rpi-4-b.dtb"),
    "Pi 400": (("pi4", "pi400"), "bcm2711-rpi-400.dtb"),
    "CM4": (("pi4", "cm4"), "bcm2711-rpi-cm4-io.dtb"),
    "Pi 5": (("pi5",), "bcm2712-rpi-5-b.dtb"),
    # The Pi 500's own name: Debian's kernel has no such file, config.txt's [pi500] section
    # names the Pi 5 D0 one (image/customize-rootfs.sh).
    "Pi 500": (("pi5", "pi500"), "bcm2712-rpi-500.dtb"),
    "CM5": (("pi5", "cm5"), "bcm2712-rpi-cm5-cm5io.dtb"),
}


@dataclass(frozen=True)
class BootFiles:
    """The FAT partition's file names one board's firmware loads."""

    kernel: str
    initramfs: str | None
    device_tree: str
    cmdline: str  # the file holding the kernel's command line


def boot_files(config: str, board: str) -> BootFiles:
    """``config.txt`` as ``board``'s firmware reads it: later settings win, a ``[FILTER]``
    line starts a section that applies only if the filter is ``all`` or one of the
    board's; ``initramfs FILE followkernel`` loads FILE after the kernel."""
    filters, default_dtb = BOARDS[board]
    applies = True
    kernel = "kernel8.img"  # the firmware's default for arm_64bit=1
    initramfs: str | None = None
    device_tree = default_dtb
    cmdline = "cmdline.txt"
    for raw in config.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            name = line[1:-1].strip().lower()
            applies = name == "all" or name in filters
            continue
        if not applies:
            continue
        if line.startswith("initramfs "):
            initramfs = line.split()[1]
            continue
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if key == "kernel":
            kernel = value
        elif key == "device_tree" and value:
            device_tree = value
        elif key == "cmdline":
            cmdline = value
    return BootFiles(kernel, initramfs, device_tree, cmdline)
