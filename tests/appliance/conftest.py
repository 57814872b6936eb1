"""Fixtures for the appliance tests: a root file system customized on a plain directory."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGE = REPO / "image"
SYSTEMD = REPO / "systemd"
HOST_UNITS = Path("/lib/systemd/system")

# Markers in pip's output that mean "PyPI is unreachable", not "no such wheel".
OFFLINE_MARKERS = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "ConnectTimeoutError",
    "ProxyError",
    "Network is unreachable",
    "Read timed out",
)


def skip_if_offline(proc: subprocess.CompletedProcess[str]) -> None:
    """Skip (not fail) the calling test when pip could not reach the package index."""
    output = proc.stdout + proc.stderr
    if proc.returncode != 0 and any(marker in output for marker in OFFLINE_MARKERS):
        pytest.skip("package index unreachable (offline)")


def seed_root(root: Path) -> None:
    """The bits of a Debian base system that customize-rootfs.sh builds on."""
    etc = root / "etc"
    etc.mkdir(parents=True)
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (etc / "group").write_text(
        "root:x:0:\nadm:x:4:\nsudo:x:27:\nsystemd-journal:x:999:\n"
    )
    (etc / "shadow").write_text("root:*:19000:0:99999:7:::\n")
    (etc / "gshadow").write_text("root:*::\nadm:*::\nsudo:*::\nsystemd-journal:!::\n")
    os.chmod(etc / "shadow", 0o640)
    os.chmod(etc / "gshadow", 0o640)
    # systemd's own units, so that systemctl --root and systemd-analyze --root resolve
    # targets such as multi-user.target exactly as on a Debian system.
    units = root / "usr/lib/systemd/system"
    if HOST_UNITS.is_dir():
        shutil.copytree(HOST_UNITS, units, symlinks=True)
    else:
        units.mkdir(parents=True)


@pytest.fixture(scope="module")
def customized_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory after image/customize-rootfs.sh, with an operator SSH key baked in."""
    if os.geteuid() != 0:
        pytest.skip("customize-rootfs.sh sets file ownership: run as root")
    if shutil.which("systemd-sysusers") is None or shutil.which("systemctl") is None:
        pytest.skip("systemd-sysusers/systemctl not installed")
    root = tmp_path_factory.mktemp("rootfs") / "root"
    seed_root(root)
    key = root.parent / "operator.pub"
    key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOxiedgeTestKey operator@test\n")
    proc = subprocess.run(
        [str(IMAGE / "customize-rootfs.sh"), str(root), "--board", "rpi", "--ssh-key", str(key)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built image's directory, for the slow boot tests (tests/appliance/qemu.py)."""
    from .qemu import build_or_reuse

    return build_or_reuse(tmp_path_factory)
