"""Every runtime dependency installs on the appliance: a cp311 manylinux aarch64 wheel.

The image installs the venv from the host with `pip --platform` and binary wheels only
(image/install-venv.sh): a dependency that needs a compiler on the Pi breaks the image.
Needs the package index; skips cleanly when offline.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from .conftest import REPO, skip_if_offline


def runtime_requirements() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_runtime_dependency_has_an_aarch64_cp311_wheel(tmp_path: Path) -> None:
    requirements = runtime_requirements()
    assert requirements, "pyproject.toml lists no runtime dependency"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_FIND_LINKS")}
    env["PIP_CONFIG_FILE"] = os.devnull  # PyPI only, as image/install-venv.sh does
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--only-binary=:all:", "--platform", "manylinux2014_aarch64",
         "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
         "--retries", "2", "--timeout", "30", "-d", str(tmp_path), *requirements],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )
    skip_if_offline(proc)
    assert proc.returncode == 0, proc.stderr
    wheels = {p.name for p in tmp_path.glob("*.whl")}
    assert not set(os.listdir(tmp_path)) - wheels, "only wheels, never an sdist"
    names = {canonical(w.split("-")[0]) for w in wheels}
    for requirement in requirements:
        name = canonical(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0])
        assert name in names, f"{requirement}: no wheel downloaded"
    for wheel in wheels:
        tags = wheel[: -len(".whl")].split("-")[-3:]
        python, abi, plat = tags
        if plat == "any":
            continue  # pure Python
        assert "aarch64" in plat and "manylinux" in plat, wheel
        assert "cp311" in python.split(".") or abi == "abi3", wheel
