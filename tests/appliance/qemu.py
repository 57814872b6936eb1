"""Helpers of the slow image boot tests: build (or reuse) an image, make an "SD card" from
it, boot it under QEMU (TCG), talk to the guest over forwarded loopback ports.

``OXIEDGE_BOOT_TARGET`` picks the image (default ``generic-amd64``; ``generic-arm64``,
``generic-arm64-16k`` with Debian's 16 KiB-page kernel, ``rpi-arm64`` the Raspberry Pi
image booted on QEMU's arm64 ``virt`` machine), ``OXIEDGE_BOOT_SUITE=bookworm`` the Debian
12 image, ``OXIEDGE_IMAGE_OUT=DIR`` reuses an image ``image/build.sh --out DIR`` built.
``OXIEDGE_BOOT_MACHINE=raspi3b`` (with ``rpi-arm64``) boots the Pi image on QEMU's
Raspberry Pi 3 B instead: the card on the Pi's SD host, the kernel, initrd, device tree
and command line that config.txt and cmdline.txt on the card name for a Pi 3 B
(tests/appliance/pifirmware.py), a USB network adapter in place of the Pi's USB Ethernet.
``OXIEDGE_BOOT_MACHINE=raspi4b``: the same on QEMU's Raspberry Pi 4 B with the Pi 4's files,
the card on its EMMC2 host (tests/appliance/raspi4b.py; ``OXIEDGE_QEMU_ROOT`` names a root
file system with a QEMU that has the machine when this host's has not).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGE_DIR = REPO / "image"
BOARD, ARCH, *VARIANT = os.environ.get("OXIEDGE_BOOT_TARGET", "generic-amd64").split("-")
SUITE = os.environ.get("OXIEDGE_BOOT_SUITE", "trixie")
NAME = "-".join(["oxiedge", BOARD, ARCH, *([SUITE] if SUITE != "trixie" else []), *VARIANT])
MACHINE = os.environ.get("OXIEDGE_BOOT_MACHINE", "")
if MACHINE not in ("", "raspi3b", "raspi4b") or (MACHINE and BOARD != "rpi"):
    raise RuntimeError(f"OXIEDGE_BOOT_MACHINE={MACHINE!r}: raspi3b or raspi4b, with rpi-arm64")
BUILD_FLAGS = ["--suite", SUITE, *(["--16k"] if VARIANT == ["16k"] else [])]
QEMU = {
    "amd64": (["qemu-system-x86_64", "-machine", "q35"], "ttyS0"),
    # cortex-a72 has no 16 KiB translation granule; "max" has 4, 16 and 64 KiB
    # (pauth-impdef: a cheap pointer-authentication algorithm, QARMA is slow under TCG).
    "arm64": (["qemu-system-aarch64", "-machine", "virt", "-cpu",
               "max,pauth-impdef=on" if VARIANT == ["16k"] else "cortex-a72"], "ttyAMA0"),
}
# Seconds from QEMU start to "oxiedge ready". Measured first boots: amd64 53-231 s, arm64
# virt 113-231 s, raspi4b 621-1,313 s at load average 17-22 (busy 2-core host).
BOOT_TIMEOUT = 300 if ARCH == "amd64" else {"": 900, "raspi3b": 1200}.get(MACHINE, 1700)
TOOLS = ("mmdebstrap", "mke2fs", "mkfs.vfat", "mcopy", "sfdisk", QEMU[ARCH][0][0],
         "qemu-img", "ssh", "ssh-keygen")
READY = r"oxiedge\[\d+\]: oxiedge ready"
MTOOLS_ENV = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Guest:
    """One QEMU run of the image; the serial console (with the journal) goes to a file."""

    proc: subprocess.Popen[bytes]
    console: Path
    ports: dict[str, int]
    started: float = field(default_factory=time.monotonic)

    def text(self) -> str:
        return self.console.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """Poll the console (an external process's output) until ``pattern`` appears."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while time.monotonic() < deadline:
            match = regex.search(self.text())
            if match:
                return match
            if self.proc.poll() is not None:
                break
            time.sleep(0.25)
        tail = "\n".join(self.text().splitlines()[-40:])
        raise AssertionError(f"no {pattern!r} on the console within {timeout}s:\n{tail}")

    def wait_ready(self) -> float:
        """Wait for the broker's ready line; seconds from QEMU's start (the boot time)."""
        self.wait_for(READY, BOOT_TIMEOUT)
        return time.monotonic() - self.started

    def power_cut(self) -> None:
        self.proc.kill()  # SIGKILL: no shutdown, no flush of the guest's page cache
        self.proc.wait(timeout=30)


def boot(out: Path, disk: Path, console: Path, memory_mb: int = 1024) -> Guest:
    guest_ports = {"mqtt": 1883, "amqp": 5672, "ssh": 22, "mqtt_tls": 8883, "amqp_tls": 5671,
                   "https": 15671}
    ports = {name: free_port() for name in guest_ports}
    forwards = ",".join(
        f"hostfwd=tcp:127.0.0.1:{ports[name]}-:{guest}" for name, guest in guest_ports.items()
    )
    # restrict=on: the guest reaches nothing but the forwarded ports.
    netdev = f"user,id=n0,restrict=on,{forwards}"
    # systemd waits 90 s for a device (the data and FAT partitions) by default; under TCG on
    # a loaded host udev itself started later than that: a longer wait, for emulation only.
    debug = ("panic=-1 systemd.journald.forward_to_console=1 systemd.show_status=0 "
             "systemd.default_device_timeout_sec=900")
    if MACHINE == "raspi3b":
        cmd = raspi3b_command(disk, console.parent / "pi-boot", netdev, debug)
        cmd += ["-serial", "null", "-serial", f"file:{console}"]  # PL011, then mini UART
    elif MACHINE == "raspi4b":
        from .raspi4b import raspi4b_command

        cmd = raspi4b_command(disk, console, netdev, debug)
    else:
        machine, serial = QEMU[ARCH]
        cmd = [
            *machine, "-m", str(memory_mb), "-smp", "2", "-serial", f"file:{console}",
            "-kernel", str(out / f"{NAME}.vmlinuz"), "-initrd", str(out / f"{NAME}.initrd.img"),
            "-append", f"root=LABEL=RASPIROOT ro console={serial} {debug}",
            "-drive", f"file={disk},format=raw,if=virtio",
            "-netdev", netdev, "-device", "virtio-net-pci,netdev=n0",
        ]
    cmd += ["-display", "none", "-monitor", "none", "-no-reboot"]
    console.write_text("")
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    return Guest(proc, console, ports)


def raspi3b_command(card: Path, files: Path, netdev: str, debug: str) -> list[str]:
    """QEMU's Raspberry Pi 3 B (1 GiB, 4 cores; the card's size must be a power of 2),
    started the way its firmware would start the card: kernel, initrd and device tree
    copied off the FAT partition as config.txt names them, cmdline.txt as the command
    line. The mini UART (ttyS1, cmdline.txt's serial console) is QEMU's second serial
    port; it is named again last so that /dev/console, where the journal is forwarded, is
    the serial port and not the screen (tty0)."""
    from .pifirmware import boot_files

    files.mkdir(exist_ok=True)
    chosen = boot_files(card_read(card, "config.txt").stdout, "Pi 3 B")
    for name in (chosen.kernel, chosen.initramfs, chosen.device_tree):
        if name:
            card_get(card, name, files / name)
    cmdline = card_read(card, chosen.cmdline).stdout.strip()
    return [
        "qemu-system-aarch64", "-machine", "raspi3b", "-m", "1024",
        "-kernel", str(files / chosen.kernel), "-dtb", str(files / chosen.device_tree),
        *(["-initrd", str(files / chosen.initramfs)] if chosen.initramfs else []),
        "-append", f"{cmdline} console=ttyS1,115200 {debug}",
        "-drive", f"file={card},format=raw,if=sd",
        # QEMU's USB network adapter (RNDIS): the kernel names it usb0, the image's
        # network file matches its alternative name enx<MAC> (en*), DHCP as on any board.
        "-netdev", netdev, "-device", "usb-net,netdev=n0,mac=b8:27:eb:00:00:01",
    ]


def build_or_reuse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built image directory (built here unless OXIEDGE_IMAGE_OUT names one)."""
    if os.geteuid() != 0:
        pytest.skip("building the image needs root")
    if any(shutil.which(tool) is None for tool in TOOLS) and shutil.which("apt-get"):
        subprocess.run([str(IMAGE_DIR / "deps.sh")], capture_output=True, timeout=900,
                       check=False)
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"missing image tools: {missing} (image/deps.sh)")
    reuse = os.environ.get("OXIEDGE_IMAGE_OUT")
    if reuse and (Path(reuse) / f"{NAME}.img").exists():
        return Path(reuse)
    out = Path(reuse) if reuse else tmp_path_factory.mktemp("image")
    out.mkdir(parents=True, exist_ok=True)
    build = subprocess.run(
        [str(IMAGE_DIR / "build.sh"), "--arch", ARCH, "--board", BOARD, *BUILD_FLAGS,
         "--out", str(out)],
        capture_output=True, text=True, timeout=3600, check=False,
    )
    (out / "build.log").write_text(build.stdout + build.stderr)
    assert build.returncode == 0, build.stderr[-4000:]
    return out


def fat_offset(card: Path) -> int:
    """Byte offset of the card's first (FAT) partition, for mtools' ``-i CARD@@OFFSET``."""
    table = subprocess.run(["sfdisk", "--json", str(card)], capture_output=True, text=True,
                           check=True, timeout=30).stdout
    start = int(re.search(r'"start":\s*(\d+)', table).group(1))  # type: ignore[union-attr]
    return start * 512


def card_put(card: Path, source: Path, name: str) -> None:
    """Copy a file onto the card's FAT partition (what a user does on a PC)."""
    subprocess.run(["mcopy", "-o", "-i", f"{card}@@{fat_offset(card)}", str(source),
                    f"::{name}"], check=True, timeout=30, env=MTOOLS_ENV)


def card_get(card: Path, name: str, dest: Path) -> None:
    """Copy a file off the card's FAT partition (binary)."""
    subprocess.run(["mcopy", "-o", "-n", "-i", f"{card}@@{fat_offset(card)}", f"::{name}",
                    str(dest)], check=True, timeout=60, env=MTOOLS_ENV)


def card_read(card: Path, name: str) -> subprocess.CompletedProcess[str]:
    """A file of the card's FAT partition, as a PC reads it (``returncode`` != 0: none)."""
    return subprocess.run(["mtype", "-i", f"{card}@@{fat_offset(card)}", f"::{name}"],
                          capture_output=True, text=True, timeout=30, check=False,
                          env=MTOOLS_ENV)


def make_card(image: Path, card_dir: Path) -> Path:
    """The "SD card": a 4 GiB copy of the image with the operator's SSH public key on the
    FAT partition as ``authorized_keys`` (docs/appliance.md); first boot installs it."""
    key = image / "operator"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                       check=True, timeout=30)
    card = card_dir / "card.img"
    subprocess.run(["cp", "--sparse=always", str(image / f"{NAME}.img"), str(card)],
                   check=True, timeout=300)
    os.truncate(card, 4 * 1024**3)  # a bigger card: first boot grows the data partition
    card_put(card, image / "operator.pub", "authorized_keys")
    return card


def ssh(image: Path, guest: Guest, command: str, *options: str,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["ssh", "-i", str(image / "operator"), "-p", str(guest.ports["ssh"]),
         "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
         "-o", "BatchMode=yes", "-o", "ConnectTimeout=30", "-o", "LogLevel=ERROR",
         *options, "admin@127.0.0.1", command],
        capture_output=True, text=True, timeout=120, check=False,
    )
    if check:
        assert proc.returncode == 0, f"{command}: {proc.stdout}{proc.stderr}"
    return proc


def credential(guest: Guest) -> tuple[str, str] | None:
    """The broker credential first boot generated, if the broker registered it."""
    text = guest.text()
    match = re.search(r"broker credential: username=(\S+) password=(\S+)", text)
    if match and "broker user admin registered" in text:
        return match.group(1), match.group(2)
    return None


def mqtt_client(client_id: str, clean: bool, auth: tuple[str, str] | None) -> Any:
    """A paho client (VERSION2 callbacks) with the appliance's credential."""
    import paho.mqtt.client as mqtt

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                         clean_session=clean)
    if auth:
        client.username_pw_set(*auth)
    return client
