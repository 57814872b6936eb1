"""What the test upstreams (``rabbit.py``, ``mosquitto.py``) share: free loopback ports and
a throw-away TLS CA."""

from __future__ import annotations

import socket
from pathlib import Path


def free_port() -> int:
    """A TCP port nothing listens on right now (loopback)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_test_ca(workdir: Path) -> tuple[Path, Path, Path]:
    """A ``trustme`` CA and a server certificate for ``localhost`` and ``127.0.0.1``, written
    to ``workdir``: ``(ca.pem, server.pem, server.key)``."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    ca_path, cert_path, key_path = (workdir / "ca.pem", workdir / "server.pem",
                                    workdir / "server.key")
    ca.cert_pem.write_to_path(str(ca_path))
    with open(cert_path, "wb") as f:
        for blob in cert.cert_chain_pems:
            f.write(blob.bytes())
    cert.private_key_pem.write_to_path(str(key_path))
    return ca_path, cert_path, key_path
