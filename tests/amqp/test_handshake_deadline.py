"""Issue 16: ONE deadline (``--amqp-handshake-timeout``) bounds the whole handshake of an
AMQPS connection, the TLS handshake included; a stalled TLS handshake no longer gets the
(longer) TLS timeout and then the AMQP one on top."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import ServerProcess
from tests.tls.conftest import make_pki


def _closed_by_server(sock: socket.socket, timeout: float) -> float:
    """Seconds until the server closes ``sock`` (recv -> b"" or a reset)."""
    start = time.monotonic()
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - start


def test_stalled_tls_handshake_ends_at_the_amqp_handshake_deadline(
        start_server: Callable[..., ServerProcess], tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    srv = start_server(*pki.server_args("--tls-handshake-timeout", "60",
                                        "--amqp-handshake-timeout", "1"))
    assert srv.amqp_tls_port is not None
    with socket.create_connection(("127.0.0.1", srv.amqp_tls_port), timeout=5) as sock:
        sock.sendall(b"\x16\x03")  # half a TLS record header, then nothing
        # Dropped at the 1 s handshake deadline: far before the 60 s TLS timeout.
        assert _closed_by_server(sock, 30) < 20
    status = json.loads(srv.cli("status", "--json").stdout)
    assert status["amqp"]["handshake_timeouts"] == 1, status["amqp"]
    assert status["tls"]["handshake_timeouts"] == 0, status["tls"]
