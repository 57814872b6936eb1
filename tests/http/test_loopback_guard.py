"""The open loopback default (no user) answers only this machine's programs and pages:
a request whose Host (DNS rebinding) or Origin (another web site's page, a WebSocket)
names another host is refused with 403; programs that send no Origin are unaffected, and
once a user exists credentials decide (``oxiedge.http.loopback``)."""

from __future__ import annotations

import socket

import pytest

from oxiedge.http.loopback import foreign_page, loopback_name
from tests.conftest import ServerProcess
from tests.http.conftest import raw_exchange
from tests.ws.conftest import upgrade_request


@pytest.mark.parametrize("name", ["localhost", "LOCALHOST.", "console.localhost", "127.0.0.1",
                                  "127.8.9.10", "::1"])
def test_loopback_names(name: str) -> None:
    assert loopback_name(name)


@pytest.mark.parametrize("name", ["evil.example", "localhost.evil.example", "10.0.0.1",
                                  "0.0.0.0", "::", "", "127.0.0.1.nip.io", "[::1]"])
def test_other_names(name: str) -> None:
    assert not loopback_name(name)


@pytest.mark.parametrize("headers", [{}, {"host": "127.0.0.1:15672"}, {"host": "localhost"},
                                     {"host": "[::1]:15672"},
                                     {"host": "127.0.0.1", "origin": "http://localhost:3000"},
                                     {"host": "127.0.0.1", "origin": "https://[::1]"}])
def test_local_requests_pass(headers: dict[str, str]) -> None:
    assert foreign_page(headers) is None


@pytest.mark.parametrize("headers", [{"host": "evil.example:15672"},
                                     {"host": "127.0.0.1", "origin": "http://evil.example"},
                                     {"host": "127.0.0.1", "origin": "null"},
                                     {"host": "127.0.0.1", "origin": "garbage"},
                                     {"host": "127.0.0.1", "origin": "http://[::1"},
                                     {"host": "[::1"}])
def test_foreign_requests_refused(headers: dict[str, str]) -> None:
    why = foreign_page(headers)
    assert why is not None and "oxiedge user add" in why


def _get(port: int, host: str, extra: str = "") -> bytes:
    return raw_exchange(port, (f"GET /api/whoami HTTP/1.1\r\nHost: {host}\r\n{extra}"
                               "Connection: close\r\n\r\n").encode())


def test_rebinding_host_is_refused_on_the_open_default(http_server: ServerProcess) -> None:
    port = http_server.http_port
    assert port
    assert _get(port, f"127.0.0.1:{port}").startswith(b"HTTP/1.1 200")
    assert _get(port, f"localhost:{port}").startswith(b"HTTP/1.1 200")
    refused = _get(port, f"rebound.example:{port}")
    assert refused.startswith(b"HTTP/1.1 403") and b"not a loopback host" in refused
    # a write from another site's page (same-origin after rebinding) is refused as well
    post = raw_exchange(port, (b"PUT /api/queues/%2F/stolen HTTP/1.1\r\nHost: evil.example\r\n"
                               b"Origin: http://evil.example\r\nContent-Type: application/json"
                               b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"))
    assert post.startswith(b"HTTP/1.1 403")
    # an Origin urlsplit refuses is refused too, not a dropped connection and a traceback
    torn = _get(port, "127.0.0.1", "Origin: http://[::1\r\n")
    assert torn.startswith(b"HTTP/1.1 403")
    queues = raw_exchange(port, b"GET /api/queues HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                b"Connection: close\r\n\r\n")
    assert queues.startswith(b"HTTP/1.1 200") and b"stolen" not in queues
    # health needs no credentials and answers whatever the Host says (load balancers)
    health = raw_exchange(port, b"GET /healthz HTTP/1.1\r\nHost: pi.example\r\n"
                                b"Connection: close\r\n\r\n")
    assert health.startswith(b"HTTP/1.1 200")


def _upgrade(port: int, origin: str | None) -> bytes:
    extra = f"Origin: {origin}\r\n" if origin is not None else ""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(upgrade_request(extra=extra))
        return s.recv(65536)


def test_a_web_pages_websocket_is_refused_on_the_open_default(
        http_server: ServerProcess) -> None:
    port = http_server.http_port
    assert port
    assert _upgrade(port, None).startswith(b"HTTP/1.1 101")
    assert _upgrade(port, "http://localhost:8080").startswith(b"HTTP/1.1 101")
    refused = _upgrade(port, "https://evil.example")
    assert refused.startswith(b"HTTP/1.1 403") and b"evil.example" in refused


def test_with_users_credentials_decide_not_the_origin(users_server: ServerProcess) -> None:
    port = users_server.http_port
    assert port
    # a dashboard served from elsewhere may open the broker's WebSocket: MQTT's CONNECT
    # carries the credentials
    assert _upgrade(port, "https://dashboard.example").startswith(b"HTTP/1.1 101")
    assert _get(port, "pi.example").startswith(b"HTTP/1.1 401")
