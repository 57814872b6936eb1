"""image/customize-rootfs.sh on a plain directory, and the venv installed from the host."""

from __future__ import annotations

import os
import platform
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import IMAGE, skip_if_offline


def passwd_entries(root: Path, name: str) -> dict[str, list[str]]:
    return {
        line.split(":")[0]: line.split(":")
        for line in (root / "etc" / name).read_text().splitlines()
        if line
    }


def test_service_account(customized_root: Path) -> None:
    users = passwd_entries(customized_root, "passwd")
    _, _, uid, gid, _, home, shell = users["oxiedge"]
    assert int(uid) < 1000, "a system account"
    assert (home, shell) == ("/var/lib/oxiedge", "/usr/sbin/nologin")
    groups = passwd_entries(customized_root, "group")
    assert groups["oxiedge"][2] == gid


def test_operator_account_and_groups(customized_root: Path) -> None:
    users = passwd_entries(customized_root, "passwd")
    assert users["admin"][2] == "1000"
    assert users["admin"][6] == "/bin/bash"
    groups = passwd_entries(customized_root, "group")
    for group in ("oxiedge", "sudo"):
        assert "admin" in groups[group][3].split(","), group
    key = customized_root / "home/admin/.ssh/authorized_keys"
    assert key.read_text().startswith("ssh-ed25519 ")
    info = key.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == 1000


def test_no_password_anywhere(customized_root: Path) -> None:
    for name, fields in passwd_entries(customized_root, "shadow").items():
        # Locked ("*", "!", "!*") is fine; a hash ("$...") or an empty field (login
        # without password) is a default password.
        assert fields[1] != "", f"{name} can log in without a password"
        assert not fields[1].lstrip("!").startswith("$"), f"{name} has a password hash"
    sshd = (customized_root / "etc/ssh/sshd_config.d/50-oxiedge.conf").read_text()
    assert "PasswordAuthentication no" in sshd
    assert "KbdInteractiveAuthentication no" in sshd
    assert "PermitRootLogin no" in sshd
    assert not list((customized_root / "etc/ssh").glob("ssh_host_*"))


def test_units_enabled(customized_root: Path) -> None:
    system = customized_root / "etc/systemd/system"
    wants = system / "multi-user.target.wants/oxiedge.service"
    assert os.readlink(wants) == "/usr/lib/systemd/system/oxiedge.service"
    firstboot = system / "sysinit.target.wants/oxiedge-firstboot.service"
    assert os.readlink(firstboot) == "/usr/lib/systemd/system/oxiedge-firstboot.service"
    assert os.readlink(system / "systemd-firstboot.service") == "/dev/null"
    # fleet provisioning: definitions.json from the FAT partition, once the broker is ready
    definitions = system / "multi-user.target.wants/oxiedge-definitions.service"
    assert os.readlink(definitions) == "/usr/lib/systemd/system/oxiedge-definitions.service"
    unit = customized_root / "usr/lib/systemd/system/oxiedge.service"
    assert unit.read_bytes() == (IMAGE.parent / "systemd/oxiedge.service").read_bytes()
    sysusers = customized_root / "usr/lib/sysusers.d/oxiedge.conf"
    assert sysusers.read_bytes() == (IMAGE.parent / "systemd/oxiedge.sysusers").read_bytes()


def test_config_and_data_dir(customized_root: Path) -> None:
    groups = passwd_entries(customized_root, "group")
    users = passwd_entries(customized_root, "passwd")
    env = (customized_root / "etc/oxiedge/oxiedge.env").stat()
    assert stat.S_IMODE(env.st_mode) == 0o640
    assert (env.st_uid, env.st_gid) == (0, int(groups["oxiedge"][2]))
    data = (customized_root / "var/lib/oxiedge").stat()
    assert stat.S_IMODE(data.st_mode) == 0o750
    assert data.st_uid == int(users["oxiedge"][2])
    assert (customized_root / "etc/machine-id").read_text() == "uninitialized\n"
    wrapper = customized_root / "usr/local/bin/oxiedge"
    assert os.access(wrapper, os.X_OK)
    assert "/var/lib/oxiedge" in wrapper.read_text()


def test_sd_card_care(customized_root: Path) -> None:
    fstab = [
        line.split() for line in (customized_root / "etc/fstab").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    by_mount = {fields[1]: fields for fields in fstab}
    assert by_mount["/var/lib/oxiedge"][0] == "LABEL=OXIDATA"
    for mount in ("/", "/var/lib/oxiedge", "/boot/firmware"):
        assert "noatime" in by_mount[mount][3].split(","), mount
    assert not [fields for fields in fstab if fields[2] == "swap"]
    journald = (customized_root / "etc/systemd/journald.conf.d/50-oxiedge-sdcard.conf")
    text = journald.read_text()
    assert "SystemMaxUse=" in text or "Storage=volatile" in text


def test_scripts_parse(customized_root: Path) -> None:
    for script in ("usr/lib/oxiedge/firstboot", "usr/local/bin/oxiedge"):
        proc = subprocess.run(["sh", "-n", str(customized_root / script)],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
    for script in ("build.sh", "build-deb.sh", "customize-rootfs.sh", "install-venv.sh",
                   "make-image.sh", "lib/wheel.sh", "test-in-rootfs.sh"):
        proc = subprocess.run(["bash", "-n", str(IMAGE / script)],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr


def test_venv_from_host_wheels(customized_root: Path, tmp_path: Path) -> None:
    """The venv install the image uses, for this host's architecture, then really run."""
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine())
    if arch is None or not Path("/usr/bin/python3.11").exists():
        pytest.skip("needs an amd64/arm64 host with /usr/bin/python3.11 (Debian bookworm)")
    # Build from a copy: an in-tree build would leave build/ in the checkout.
    src = tmp_path / "src"
    shutil.copytree(
        IMAGE.parent, src,
        ignore=shutil.ignore_patterns(".venv", ".git", "build", "image", "bench", "tests",
                                      "*.egg-info", "__pycache__", "oxiedge-data"),
    )
    wheel_dir = tmp_path / "wheel"
    env = {k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"}
    env["PIP_CONFIG_FILE"] = os.devnull
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheel_dir),
         str(src)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )
    skip_if_offline(build)
    assert build.returncode == 0, build.stderr
    (wheel,) = wheel_dir.glob("oxiedge-*.whl")
    proc = subprocess.run(
        [str(IMAGE / "install-venv.sh"), str(customized_root), arch, str(wheel)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    skip_if_offline(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    venv = customized_root / "opt/oxiedge"
    assert os.readlink(venv / "bin/python3") == "/usr/bin/python3.11"
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    site = venv / "lib/python3.11/site-packages"
    assert list((site / "oxiedge/__pycache__").glob("__init__.cpython-311.pyc"))
    # The launcher's shebang is the target path; run it with the venv's interpreter, from
    # a neutral directory so nothing from the checkout is imported.
    run = subprocess.run(
        [str(venv / "bin/python3"), str(venv / "bin/oxiedge"), "version"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False,
    )
    assert run.returncode == 0, run.stderr
    check = subprocess.run(
        [str(venv / "bin/python3"), "-c",
         "import oxiedge, rocksdict, trio, sys; print(oxiedge.__file__, sys.prefix)"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False,
    )
    assert check.returncode == 0, check.stderr
    assert check.stdout.split() == [str(site / "oxiedge/__init__.py"), str(venv)]
