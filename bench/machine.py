"""What a figure was measured on: cores, CPU model, kernel, the disk under a directory."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                # x86: "model name"; Raspberry Pi OS (arm64): "Model" / "Hardware".
                if line.startswith(("model name", "Model", "Hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def disk_of(path: str | Path) -> str:
    """Device, filesystem and (for block devices) the model/rotational flag under ``path``."""
    try:
        out = subprocess.run(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "--target", str(path)],
                             capture_output=True, text=True, timeout=5).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    if not out:
        return "?"
    src, fstype = out[0], out[1] if len(out) > 1 else "?"
    dev = os.path.basename(src)
    extra = []
    sys_block = Path("/sys/class/block") / dev
    try:
        if (sys_block / "device" / "model").exists():
            extra.append((sys_block / "device" / "model").read_text().strip())
        base = sys_block if (sys_block / "queue").exists() else sys_block.resolve().parent
        rot = (base / "queue" / "rotational").read_text().strip()
        extra.append("rotational" if rot == "1" else "non-rotational")
    except OSError:
        pass
    if dev.startswith("vd"):
        extra.append("virtio")
    if dev.startswith("mmcblk"):
        extra.append("SD/eMMC")
    more = (" (" + ", ".join(extra) + ")") if extra else ""
    return f"{src} {fstype}{more}"


def code_revision() -> str:
    """The oxiedge commit measured, with ``+dirty`` when the work tree had changes."""
    repo = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "oxiedge"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (rev or "?") + ("+dirty" if dirty else "")


def describe(path: str | Path = ".") -> dict[str, Any]:
    mem_total = "?"
    try:
        with open("/proc/meminfo") as f:
            mem_total = f.readline().split(":", 1)[1].strip()
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
            "cpu": cpu_model(), "kernel": platform.release(), "arch": platform.machine(),
            "memory": mem_total, "disk": disk_of(path), "python": platform.python_version(),
            "oxiedge_rev": code_revision()}


def one_line(info: dict[str, Any]) -> str:
    return (f"nproc={info['nproc']} (affinity {info['affinity']}), CPU {info['cpu']}, "
            f"{info['arch']}, kernel {info['kernel']}, {info['memory']}, disk {info['disk']}, "
            f"Python {info['python']}, oxiedge {info.get('oxiedge_rev', '?')}")
