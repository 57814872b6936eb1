"""Fixtures for the TLS tests: certificates from ``trustme`` and a real ``oxiedge serve``
with ``--mqtt-tls-port 0 --amqp-tls-port 0`` next to the plain ports."""

from __future__ import annotations

import datetime
import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.conftest import ServerProcess
from tests.mqtt.conftest import clients  # noqa: F401 - the paho fixture, for tests/tls too


@dataclass
class Pki:
    """A CA, a server certificate for 127.0.0.1/localhost, and files for them."""

    dir: Path
    ca: trustme.CA
    ca_file: Path
    cert: Path
    key: Path

    def write_server(self, leaf: trustme.LeafCert) -> None:
        """Replace the server's certificate and key files (in place: a reload re-reads them)."""
        self.cert.write_bytes(b"".join(p.bytes() for p in leaf.cert_chain_pems))
        self.key.write_bytes(leaf.private_key_pem.bytes())

    def client(self, name: str, ca: trustme.CA | None = None) -> tuple[Path, Path]:
        """A client certificate with CN ``name``: (cert file, key file)."""
        leaf = (ca or self.ca).issue_cert(f"{name}@example.test", common_name=name)
        cert, key = self.dir / f"client-{name}.pem", self.dir / f"client-{name}.key"
        cert.write_bytes(b"".join(p.bytes() for p in leaf.cert_chain_pems))
        key.write_bytes(leaf.private_key_pem.bytes())
        return cert, key

    def server_args(self, *extra: str) -> tuple[str, ...]:
        return ("--mqtt-tls-port", "0", "--amqp-tls-port", "0", "--tls-cert", str(self.cert),
                "--tls-key", str(self.key), *extra)


def make_pki(path: Path) -> Pki:
    path.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    pki = Pki(path, ca, path / "ca.pem", path / "server.pem", path / "server.key")
    ca.cert_pem.write_to_path(str(pki.ca_file))
    pki.write_server(ca.issue_cert("127.0.0.1", "localhost"))
    return pki


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


@pytest.fixture
def tls_server(start_server: Callable[..., ServerProcess], pki: Pki) -> ServerProcess:
    """MQTT and AMQP, each on a plain and a TLS port."""
    return start_server(*pki.server_args())


def client_context(ca_file: Path, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    """What a careful client does: verify the server against ``ca_file`` and its name."""
    ctx = ssl.create_default_context(cafile=str(ca_file))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


def tls_status(srv: ServerProcess) -> dict[str, Any]:
    out = json.loads(srv.cli("status", "--json").stdout)
    tls = out["tls"]
    assert isinstance(tls, dict)
    return tls


def expired(ca: trustme.CA) -> trustme.LeafCert:
    now = datetime.datetime.now(datetime.UTC)
    return ca.issue_cert("127.0.0.1", "localhost", not_before=now - datetime.timedelta(days=30),
                         not_after=now - datetime.timedelta(days=1))
