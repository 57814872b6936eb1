"""Every runtime dependency installs on the appliance: manylinux aarch64 and x86_64 wheels
for cp311 (bookworm) and cp313 (trixie), at the versions image/constraints.txt pins.

The image and the .deb install the venv from the host with `pip --platform` and binary
wheels only (image/install-venv.sh): a dependency that needs a compiler on the Pi breaks the
image. Needs the package index; skips cleanly when offline.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from .conftest import IMAGE, REPO, skip_if_offline

CONSTRAINTS = IMAGE / "constraints.txt"


def runtime_requirements() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    lines = (line.split("#")[0].strip() for line in CONSTRAINTS.read_text().splitlines())
    return {canonical(name): version
            for name, _, version in (line.partition("==") for line in lines if line)}


def test_constraints_pin_every_runtime_dependency_exactly() -> None:
    pinned = pins()
    assert all(pinned.values()), "every line of image/constraints.txt is NAME==VERSION"
    for requirement in runtime_requirements():
        name = canonical(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0])
        assert name in pinned, f"{name} is not pinned in image/constraints.txt"


@pytest.mark.parametrize("machine", ["aarch64", "x86_64"])
@pytest.mark.parametrize("python", ["3.11", "3.13"])
def test_every_runtime_dependency_has_a_wheel(tmp_path: Path, python: str, machine: str) -> None:
    abi = "cp" + python.replace(".", "")
    requirements = runtime_requirements()
    assert requirements, "pyproject.toml lists no runtime dependency"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_FIND_LINKS")}
    env["PIP_CONFIG_FILE"] = os.devnull  # PyPI only, as image/install-venv.sh does
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--only-binary=:all:", "--platform", f"manylinux2014_{machine}",
         "--python-version", python, "--implementation", "cp", "--abi", abi,
         "--constraint", str(CONSTRAINTS),
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
        tag_python, tag_abi, plat = tags
        if plat == "any":
            continue  # pure Python
        assert machine in plat and "manylinux" in plat, wheel
        assert abi in tag_python.split(".") or tag_abi == "abi3", wheel
    pinned = pins()
    for wheel in wheels:
        name, version = wheel.split("-")[:2]
        assert pinned.get(canonical(name)) == version, f"{wheel}: not the pinned version"
