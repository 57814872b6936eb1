"""Slow: two builds of the same commit give the same image, byte for byte (amd64 generic).

Same inputs: the commit (SOURCE_DATE_EPOCH and the wheel come from it), the same Debian
packages (two builds minutes apart see the same mirror; pin with OXIEDGE_MIRROR for more)
and the same Python wheels. ~3 min on a 2-core machine; needs root and image/deps.sh.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NAME = "oxiedge-generic-amd64"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]  # two image builds


def build(out: Path, commit: str) -> None:
    # Pin the commit: others may commit while this runs, and HEAD's time is the build's
    # SOURCE_DATE_EPOCH.
    proc = subprocess.run(
        [str(REPO / "image/build.sh"), "--arch", "amd64", "--board", "generic", "--out", str(out)],
        capture_output=True, text=True, timeout=900, check=False,
        env={**os.environ, "OXIEDGE_COMMIT": commit},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_two_builds_are_identical(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("mmdebstrap") is None:
        pytest.skip("needs root and the image tools (image/deps.sh)")
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True, timeout=30).stdout.strip()
    build(tmp_path / "a", commit)
    build(tmp_path / "b", commit)
    for suffix in (".packages.txt", ".vmlinuz", ".initrd.img"):
        first = (tmp_path / "a" / f"{NAME}{suffix}").read_bytes()
        assert first == (tmp_path / "b" / f"{NAME}{suffix}").read_bytes(), suffix
    # The image itself (build.sh writes its sha256 next to it).
    digest_a = (tmp_path / "a" / f"{NAME}.img.sha256").read_text().split()[0]
    digest_b = (tmp_path / "b" / f"{NAME}.img.sha256").read_text().split()[0]
    assert digest_a == digest_b
