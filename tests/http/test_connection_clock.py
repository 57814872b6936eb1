"""The connection's deadlines on trio's MockClock (pytest-trio's ``autojump_clock``: no
waiting): keep-alive idle, body, headers, write, and the requests-per-connection bound, over
trio's in-memory stream pairs."""

from __future__ import annotations

import logging
from typing import Any

import trio
import trio.testing

from oxiedge.auth import UserStore
from oxiedge.http import bounds
from oxiedge.http.connection import HttpConnection
from oxiedge.http.credentials import Credentials
from oxiedge.http.listener import COUNTER_NAMES
from oxiedge.http.routes import Router, health_routes
from oxiedge.login import Logins
from tests.http.test_sansio import FakeView

REQUEST = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"


class Host:
    """What a connection uses of its listener (a real router, credentials and counters)."""

    def __init__(self) -> None:
        self.router = Router()
        health_routes(self.router, FakeView())
        users = UserStore({}, None)
        self.credentials = Credentials(users, Logins(users), lambda _n: [])
        self.counters = dict.fromkeys(COUNTER_NAMES, 0)
        self.log = logging.getLogger("test")
        self.websocket = None  # no WebSocket paths on this listener


async def _served(host: Host, stream: Any) -> None:
    """Serve one connection and close its stream, as ``HttpServer._handle`` does."""
    try:
        await HttpConnection(host, stream, trio.current_time()).serve()
    finally:
        await trio.aclose_forcefully(stream)


async def _read_all(stream: Any) -> bytes:
    out = b""
    try:
        while chunk := await stream.receive_some(65536):
            out += chunk
    except trio.BrokenResourceError:
        pass
    return out


async def test_idle_keep_alive_is_closed(autojump_clock: Any) -> None:
    host, (client, server) = Host(), trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_served, host, server)
        start = trio.current_time()
        await client.send_all(REQUEST)
        out = await _read_all(client)
    assert out.startswith(b"HTTP/1.1 200 ")
    assert trio.current_time() - start >= bounds.IDLE_TIMEOUT
    assert host.counters["idle_closed"] == 1


async def test_body_deadline(autojump_clock: Any) -> None:
    host, (client, server) = Host(), trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_served, host, server)
        await client.send_all(b"POST /healthz HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n"
                              b"abc")
        start = trio.current_time()
        out = await _read_all(client)
    assert out.startswith(b"HTTP/1.1 408 ") and b"body" in out
    assert trio.current_time() - start >= bounds.BODY_TIMEOUT
    assert host.counters["body_timeouts"] == 1


async def _trickle(client: Any) -> None:
    try:
        for byte in REQUEST:
            await client.send_all(bytes([byte]))
            await trio.sleep(1)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def test_header_deadline_counts_from_the_accept(autojump_clock: Any) -> None:
    host, (client, server) = Host(), trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_served, host, server)
        nursery.start_soon(_trickle, client)  # a byte a second: each byte would reset a
        out = await _read_all(client)  # per-read timeout, not the header deadline
        nursery.cancel_scope.cancel()
    assert out.startswith(b"HTTP/1.1 408 ")
    assert host.counters["header_timeouts"] == 1


async def test_requests_per_connection(autojump_clock: Any) -> None:
    host, (client, server) = Host(), trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_served, host, server)
        await client.send_all(REQUEST * (bounds.MAX_REQUESTS + 5))
        out = await _read_all(client)
    assert out.count(b"HTTP/1.1 200 ") == bounds.MAX_REQUESTS
    assert out.count(b"connection: close") == 1
    assert host.counters["request_limit_closed"] == 1


async def test_a_client_that_does_not_read_is_cut_off(autojump_clock: Any) -> None:
    host, (client, server) = Host(), trio.testing.lockstep_stream_pair()
    async with trio.open_nursery() as nursery:  # lockstep: a write waits for the reader
        nursery.start_soon(_served, host, server)
        await client.send_all(REQUEST)
        await trio.sleep(bounds.WRITE_TIMEOUT + 1)
    assert host.counters["write_timeouts"] == 1
