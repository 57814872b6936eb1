"""A real ``oxiedge serve`` with its HTTP listener (plain and TLS) for MQTT over WebSocket,
paho clients on ``transport="websockets"``, and a raw WebSocket client for exact frames."""

from __future__ import annotations

import base64
import os
import socket
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ServerProcess
from tests.mqtt.conftest import (
    Client,
    clients,  # noqa: F401 - the paho fixture, for tests/ws too
)
from tests.tls.conftest import Pki, make_pki

TIMEOUT = 10.0


@pytest.fixture
def ws_pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


@pytest.fixture
def ws_server(start_server: Callable[..., ServerProcess], ws_pki: Pki) -> ServerProcess:
    """MQTT on TCP, and the HTTP listener on a plain and a TLS port."""
    srv = start_server("--http-port", "0", "--http-tls-port", "0", "--tls-cert",
                       str(ws_pki.cert), "--tls-key", str(ws_pki.key))
    assert srv.http_port and srv.http_tls_port
    return srv


@pytest.fixture
def ws_clients(ws_pki: Pki) -> Iterator[Callable[..., Client]]:
    """paho clients over ws:// (``tls=False``) or wss:// at ``path``."""
    made: list[Client] = []

    def make(port: int | None, client_id: str = "", clean: bool = True, *,
             path: str = "/mqtt", tls: bool = False, **kw: Any) -> Client:
        c = Client(port, client_id, clean, transport="websockets", **kw)
        c.c.ws_set_options(path=path)
        if tls:
            c.c.tls_set(ca_certs=str(ws_pki.ca_file))
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            c.c.disconnect()
            c.c.loop_stop()
        except Exception:
            pass


# ------------------------------------------------------------ a raw WebSocket client

def upgrade_request(path: str = "/mqtt", protocol: str | None = "mqtt",
                    extra: str = "", key: str | None = None) -> bytes:
    key = key if key is not None else base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Upgrade: websocket",
             "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
    if protocol is not None:
        lines.append(f"Sec-WebSocket-Protocol: {protocol}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


def client_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """A masked client frame (RFC 6455 5.2)."""
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class RawWebSocket:
    """One WebSocket to the server's HTTP port: frames in, frames out, exactly."""

    def __init__(self, port: int | None, path: str = "/mqtt") -> None:
        assert port is not None
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.sock.sendall(upgrade_request(path))
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self._more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        self.response = head.decode()
        assert self.response.startswith("HTTP/1.1 101"), self.response

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("closed")
        self.buf += chunk

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, opcode: int, payload: bytes, fin: bool = True) -> None:
        self.sock.sendall(client_frame(opcode, payload, fin))

    def send_binary(self, payload: bytes) -> None:
        self.send(2, payload)

    def recv_frame(self) -> tuple[int, bytes]:
        """The next frame from the server: (opcode, payload); server frames are unmasked."""
        b0, b1 = self._take(2)
        assert not b1 & 0x80, "a server frame must not be masked"
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._take(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._take(8))[0]
        return b0 & 0x0F, self._take(n)

    def recv_mqtt(self) -> bytes:
        """The payload of the next binary frame (skipping nothing else)."""
        opcode, payload = self.recv_frame()
        assert opcode == 2, (opcode, payload)
        return payload

    def close_code(self) -> int:
        """Read until the server's close frame; its status code."""
        while True:
            opcode, payload = self.recv_frame()
            if opcode == 8:
                return int(struct.unpack("!H", payload[:2])[0])

    def closed(self) -> bool:
        """The server closed TCP (after anything still buffered)."""
        try:
            while True:
                self._more()
        except (EOFError, ConnectionResetError):
            return True

    def close(self) -> None:
        self.sock.close()
