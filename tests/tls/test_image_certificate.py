"""The OS image's first-boot TLS step (image/rootfs/usr/lib/oxiedge/firstboot, step 7) run
on this machine: its certificate serves the broker for HOST and HOST.local, verified
against the device CA it leaves on the FAT partition. (The slow image boot test checks the
same on a booted image.)"""

from __future__ import annotations

import shutil
import socket
import ssl
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ServerProcess

FIRSTBOOT = Path(__file__).resolve().parents[2] / "image/rootfs/usr/lib/oxiedge/firstboot"


def _tls_step(tls: Path, firmware: Path, name: str) -> str:
    text = FIRSTBOOT.read_text()
    start = text.index("# 7. TLS")
    end = text.index('mkdir -p "$(dirname "$DONE")"')
    step = text[start:end].replace("tls=/etc/oxiedge/tls", f"tls={tls}")
    # Ownership needs the image's accounts; modes are what is checked here.
    step = step.replace("-o 0 -g oxiedge ", "").replace("-o 0 -g 0 ", "")
    step = step.replace("mountpoint -q", "test -d")  # the test's "FAT partition" is a dir
    return (f'set -eu\nname={name}\nFIRMWARE={firmware}\nlog() {{ echo "firstboot: $*"; }}\n'
            + step)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl missing")
def test_first_boot_certificate_serves_host_and_local_name(
        start_server: Callable[..., ServerProcess], tmp_path: Path) -> None:
    tls, firmware, name = tmp_path / "tls", tmp_path / "firmware", "oxiedge-ab12"
    firmware.mkdir()
    script = tmp_path / "step.sh"
    script.write_text(_tls_step(tls, firmware, name))
    run = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert f"TLS server certificate for {name}, {name}.local" in run.stdout
    assert stat.S_IMODE((tls / "ca.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((tls / "server.key").stat().st_mode) == 0o640
    ca_on_card = firmware / "oxiedge-ca.pem"
    assert ca_on_card.read_bytes() == (tls / "ca.pem").read_bytes()
    # Idempotent: a second run keeps the certificate.
    before = (tls / "server.pem").read_bytes()
    assert subprocess.run(["sh", str(script)], capture_output=True, timeout=60).returncode == 0
    assert (tls / "server.pem").read_bytes() == before

    srv = start_server("--mqtt-tls-port", "0", "--amqp-tls-port", "0",
                       "--tls-cert", str(tls / "server.pem"), "--tls-key", str(tls / "server.key"))
    ctx = ssl.create_default_context(cafile=str(ca_on_card))
    for host in (name, f"{name}.local", "localhost"):
        for port in (srv.mqtt_tls_port, srv.amqp_tls_port):
            assert port is not None
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                    ctx.wrap_socket(raw, server_hostname=host) as conn:
                assert conn.version() in ("TLSv1.2", "TLSv1.3")
    with socket.create_connection(("127.0.0.1", srv.mqtt_tls_port), timeout=10) as raw, \
            pytest.raises(ssl.SSLCertVerificationError):
        ctx.wrap_socket(raw, server_hostname="other.example")
