"""End-to-end tests of issue 9, the uplink: real ``oxiedge serve`` processes forwarding to a
real RabbitMQ / Mosquitto, links broken on purpose with ``Proxy``.

Every wait is bounded: status is polled with a deadline, upstream queues are drained until the
expected messages arrived or the deadline passed.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from .proxy import Proxy

TIMEOUT = 10.0


# ===================================================================== the proxy itself
class _Echo:
    """A loopback TCP echo server (one thread per connection) behind the proxy."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        try:
            while data := conn.recv(65536):
                conn.sendall(data)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:
            conn.close()


@pytest.fixture
def echo_proxy() -> Iterator[tuple[_Echo, Proxy]]:
    echo = _Echo()
    proxy = Proxy("127.0.0.1", echo.port)
    try:
        yield echo, proxy
    finally:
        proxy.close()
        echo.close()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    sock.settimeout(TIMEOUT)
    return sock


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise AssertionError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def _silent_for(sock: socket.socket, seconds: float) -> bool:
    """True if nothing (no byte, no EOF, no reset) arrives on ``sock`` for ``seconds``."""
    sock.settimeout(seconds)
    try:
        sock.recv(1)
    except TimeoutError:
        return True
    except OSError:
        return False
    finally:
        sock.settimeout(TIMEOUT)
    return False


def test_proxy_forwards_both_ways(echo_proxy: tuple[_Echo, Proxy]) -> None:
    _, proxy = echo_proxy
    with _connect(proxy.port) as sock:
        blob = bytes(range(256)) * 4096  # 1 MiB: exercises partial sends and the high water
        threading.Thread(target=sock.sendall, args=(blob,), daemon=True).start()
        assert _recv_exactly(sock, len(blob)) == blob
    assert proxy.accepted == 1


def test_proxy_freeze_holds_bytes_and_thaw_releases_them(
        echo_proxy: tuple[_Echo, Proxy]) -> None:
    _, proxy = echo_proxy
    with _connect(proxy.port) as sock:
        sock.sendall(b"before")
        assert _recv_exactly(sock, 6) == b"before"
        proxy.freeze()
        sock.sendall(b"during")
        # A silent dead link: no echo, but no FIN/RST either.
        assert _silent_for(sock, 0.5)
        # A connection made while frozen is accepted (TCP handshake done) but gets nothing.
        with _connect(proxy.port) as late:
            late.sendall(b"late")
            assert _silent_for(late, 0.3)
            proxy.thaw()
            assert _recv_exactly(sock, 6) == b"during"
            assert _recv_exactly(late, 4) == b"late"
    assert proxy.accepted == 2


def test_proxy_drop_closes_current_connections_only(echo_proxy: tuple[_Echo, Proxy]) -> None:
    _, proxy = echo_proxy
    a, b = _connect(proxy.port), _connect(proxy.port)
    for sock in (a, b):  # both connected upstream before the drop
        sock.sendall(b"x")
        assert _recv_exactly(sock, 1) == b"x"
    assert proxy.drop() == 2
    for sock in (a, b):
        try:
            assert sock.recv(1) == b""  # FIN
        except ConnectionResetError:
            pass  # RST (the default)
        sock.close()
    with _connect(proxy.port) as c:  # the proxy still serves new connections
        c.sendall(b"again")
        assert _recv_exactly(c, 5) == b"again"
    # drop(rst=False) closes with a FIN: the peer reads EOF.
    with _connect(proxy.port) as d:
        d.sendall(b"y")
        assert _recv_exactly(d, 1) == b"y"
        proxy.drop(rst=False)
        assert d.recv(1) == b""


def test_proxy_to_a_dead_target_closes_the_client() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        dead = int(s.getsockname()[1])
    with Proxy("127.0.0.1", dead) as proxy, _connect(proxy.port) as sock:
        try:
            assert sock.recv(1) == b""
        except ConnectionResetError:
            pass
        deadline = time.monotonic() + TIMEOUT
        while proxy.live and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.live == 0
