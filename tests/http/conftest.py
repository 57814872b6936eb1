"""A real ``oxiedge serve`` with its HTTP listener on a free loopback port, and a small
client over the standard library's ``http.client`` (a real HTTP/1.1 client)."""

from __future__ import annotations

import base64
import http.client
import json
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ServerProcess, run_cli


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class HttpClient:
    """One keep-alive connection to the server's HTTP port."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)

    def request(self, method: str, path: str, auth: tuple[str, str] | None = None,
                body: bytes | None = None, headers: dict[str, str] | None = None) -> Reply:
        h = dict(headers or {})
        if auth is not None:
            h["Authorization"] = "Basic " + base64.b64encode(
                f"{auth[0]}:{auth[1]}".encode()).decode()
        self.conn.request(method, path, body=body, headers=h)
        r = self.conn.getresponse()
        return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())

    def get(self, path: str, auth: tuple[str, str] | None = None) -> Reply:
        return self.request("GET", path, auth)

    def close(self) -> None:
        self.conn.close()


def raw_exchange(port: int, data: bytes, timeout: float = 20) -> bytes:
    """Send ``data`` on a fresh connection; everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        return out


def add_user(data: Path, name: str, password: str, tags: str | None = None) -> None:
    args = ["user", "add", name, "--password-stdin"]
    if tags is not None:
        args += ["--tags", tags]
    res = run_cli(data, *args, input=password + "\n")
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.fixture
def http_server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """A server with no users on 127.0.0.1 (anonymous: the broker's rule)."""
    srv = start_server("--http-port", "0")
    assert srv.http_port
    return srv


@pytest.fixture
def users_server(start_server: Callable[..., ServerProcess], tmp_path: Path) -> ServerProcess:
    """A server with users: admin (administrator), watcher (monitoring), mgmt (management),
    plain (no tags)."""
    data = tmp_path / "data"
    add_user(data, "admin", "admin-pw", "administrator")
    add_user(data, "watcher", "watcher-pw", "monitoring")
    add_user(data, "mgmt", "mgmt-pw", "management")
    add_user(data, "plain", "plain-pw")
    srv = start_server("--http-port", "0", data=data)
    assert srv.http_port
    return srv


@pytest.fixture
def client_for() -> Any:
    made: list[HttpClient] = []

    def make(srv: ServerProcess) -> HttpClient:
        assert srv.http_port
        c = HttpClient(srv.http_port)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
