"""Slow: the Raspberry Pi image's boot files for every supported board (rpi-arm64 only).

No emulator runs a Pi 4 or Pi 5 boot firmware, so what each board's firmware would load
is checked on the built image itself (``OXIEDGE_BOOT_TARGET=rpi-arm64``, the image as in
tests/appliance/qemu.py): ``config.txt`` read for each board as its firmware reads it
(tests/appliance/pifirmware.py) names a kernel, an initrd and a device tree that are on
the FAT partition; the firmware files of the Pi 3/4 families are there; ``cmdline.txt``
finds the root by label with the boards' serial consoles; the root file system has the
Pi 5's RP1 and SD drivers, and the initramfs can reach the root on the SD card of a Pi
3, 4 and 5. The boot itself: test_image_boot.py with ``OXIEDGE_BOOT_MACHINE=raspi3b`` or
``raspi4b``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from .pifirmware import BOARDS, boot_files
from .qemu import BOARD, MTOOLS_ENV, NAME, card_get, card_read, fat_offset

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(BOARD != "rpi", reason="the Pi image only (OXIEDGE_BOOT_TARGET=rpi-arm64)"),
]

# Boards whose device tree Debian's kernel does not ship (docs/appliance.md, "Boards").
NO_DEVICE_TREE = {"CM5"}


def fat_names(card: Path) -> set[str]:
    out = subprocess.run(["mdir", "-b", "-i", f"{card}@@{fat_offset(card)}", "::"],
                         capture_output=True, text=True, check=True, timeout=60,
                         env=MTOOLS_ENV).stdout
    return {line.rsplit("/", 1)[-1] for line in out.split()}


def root_debugfs(card: Path, request: str) -> str:
    """A debugfs request on the root partition (p2): read without mounting it."""
    table = subprocess.run(["sfdisk", "--json", str(card)], capture_output=True, text=True,
                           check=True, timeout=30).stdout
    start = int(re.findall(r'"start":\s*(\d+)', table)[1]) * 512
    return subprocess.run(["debugfs", "-R", request, f"{card}?offset={start}"],
                          capture_output=True, text=True, check=True, timeout=120).stdout


def root_ls(card: Path, path: str) -> set[str]:
    """Names in a directory of the root partition."""
    # ls -p: /inode/mode/uid/gid/name/size/
    return {line.split("/")[5] for line in root_debugfs(card, f"ls -p {path}").splitlines()
            if line.startswith("/")}


def module_name(path: str) -> str:
    """kernel/drivers/mmc/host/sdhci_iproc.ko.xz -> sdhci-iproc (modprobe's equivalence)."""
    return Path(path).name.split(".ko")[0].replace("_", "-")


def initramfs_names(data: bytes) -> set[str]:
    """File names of an initramfs: "newc" cpio archives, uncompressed ones (early
    microcode, amd64) first, then the zstd-compressed main one."""
    names: set[str] = set()
    pos = 0
    while pos < len(data):
        if not data.startswith(b"070701", pos):
            if data[pos] == 0:  # padding between archives
                pos += 1
                continue
            data = subprocess.run(["zstd", "-dc"], input=data[pos:], capture_output=True,
                                  check=True, timeout=120).stdout
            pos = 0
            continue
        size = int(data[pos + 54:pos + 62], 16)
        name_len = int(data[pos + 94:pos + 102], 16)
        name = data[pos + 110:pos + 110 + name_len - 1].decode()
        pos = (pos + 110 + name_len + 3) & ~3
        pos = (pos + size + 3) & ~3
        if name != "TRAILER!!!":
            names.add(name)
    return names


@pytest.fixture(scope="module")
def card(image: Path) -> Path:
    return image / f"{NAME}.img"


def test_every_board_finds_its_boot_files(card: Path) -> None:
    names = fat_names(card)
    config = card_read(card, "config.txt").stdout
    for setting in ("arm_64bit=1", "enable_uart=1", "upstream_kernel=1"):
        assert re.search(rf"^{setting}$", config, re.M), config
    # Pi 3 / Zero 2 W: bootcode.bin, start.elf, fixup.dat; Pi 4 / 400 / CM4: start4.elf,
    # fixup4.dat; the Pi 5's firmware is in its EEPROM.
    assert {"bootcode.bin", "start.elf", "fixup.dat", "start4.elf", "fixup4.dat"} <= names
    missing: set[str] = set()
    for board in BOARDS:
        files = boot_files(config, board)
        assert files.kernel in names, (board, files)
        assert files.initramfs in names, (board, files)
        assert files.cmdline in names, (board, files)
        if files.device_tree not in names:
            missing.add(board)
    assert missing == NO_DEVICE_TREE, missing
    assert boot_files(config, "Pi 500").device_tree == "bcm2712-d-rpi-5-b.dtb"
    assert boot_files(config, "Pi 5").device_tree == "bcm2712-rpi-5-b.dtb"
    cmdline = card_read(card, "cmdline.txt").stdout.split()
    for arg in ("root=LABEL=RASPIROOT", "console=ttyS1,115200", "console=ttyAMA10,115200",
                "rootwait"):
        assert arg in cmdline, cmdline


def test_root_and_initramfs_have_the_pi_drivers(card: Path, tmp_path: Path) -> None:
    (version,) = root_ls(card, "/usr/lib/modules") - {".", ".."}
    # Where raspi-firmware's hook copies the device trees from: the 7.x kernels keep them
    # in modules/VERSION/dtb, their package links this old path to it.
    assert f"linux-image-{version}" in root_ls(card, "/usr/lib")
    dtbs = root_ls(card, f"/usr/lib/modules/{version}/dtb/broadcom")
    assert {"bcm2712-rpi-5-b.dtb", "bcm2711-rpi-4-b.dtb", "bcm2837-rpi-3-b.dtb"} <= dtbs
    drivers = f"/usr/lib/modules/{version}/kernel/drivers"
    assert any(n.startswith("rp1_pci.ko") for n in root_ls(card, f"{drivers}/misc/rp1"))
    assert any(n.startswith("pinctrl-rp1.ko") for n in root_ls(card, f"{drivers}/pinctrl"))
    assert any(n.startswith("clk-rp1.ko") for n in root_ls(card, f"{drivers}/clk"))
    assert any(n.startswith("macb.ko")
               for n in root_ls(card, f"{drivers}/net/ethernet/cadence"))

    config = card_read(card, "config.txt").stdout
    initrd = tmp_path / "initrd"
    card_get(card, boot_files(config, "Pi 5").initramfs or "", initrd)
    modules = {module_name(n) for n in initramfs_names(initrd.read_bytes()) if ".ko" in n}
    builtin = root_debugfs(card, f"cat /usr/lib/modules/{version}/modules.builtin")
    modules |= {module_name(line) for line in builtin.split()}
    # The SD card: Pi 3 (sdhost: bcm2835), Pi 4 (emmc2: sdhci-iproc), Pi 5 (sdhci-brcmstb),
    # the Pi 4's and 5's card supplies (regulator-fixed and regulator-gpio nodes: without
    # their drivers the SD host waits for ever); USB and NVMe behind the Pi 5's RP1 and PCIe.
    needed = {"bcm2835", "sdhci-iproc", "sdhci-brcmstb", "fixed", "gpio-regulator",
              "rp1-pci", "pcie-brcmstb", "nvme", "dwc2", "xhci-plat-hcd", "usb-storage",
              "pinctrl-rp1", "clk-rp1"}
    assert needed <= modules, sorted(needed - modules)
