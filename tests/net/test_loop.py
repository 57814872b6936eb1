"""The transport loop (``oxiedge.net.loop``) with a tiny line protocol of its own, over
trio's in-memory streams and the autojump clock: the loop knows no MQTT, so what it does
(commit, deadlines, back-pressure, close) is checked here for every protocol at once."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from oxiedge.net import COMMIT, KICK, NEED_DATA, SEND, Authenticate, Close
from oxiedge.net.loop import Transport
from oxiedge.store import Store


class Lines:
    """A sans-IO toy protocol: each line is a command; ``commit`` replies after a commit,
    ``login`` asks for a credential check, ``big`` writes 1000 bytes, ``bye`` closes."""

    def __init__(self, transport: Transport, timeout: float = math.inf) -> None:
        self.transport = transport
        self.timeout = timeout
        self.deadline = trio.current_time() + timeout
        self.buf = b""
        self.out: list[bytes] = []
        self.pending: list[bytes] = []  # actions still to hand out
        self.events: list[str] = []
        self.eof = False
        self.closing: Close | None = None
        self.sent = 0

    def receive_data(self, data: bytes | bytearray) -> None:
        self.events.append(f"data {bytes(data)!r}")
        self.buf += data
        self.eof = not data

    def next_action(self) -> object:
        if self.closing is not None:
            return self.closing
        if self.eof:
            self.closing = Close("eof")
            return self.closing
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            if line == b"commit":
                self.out.append(b"committed\n")
                return COMMIT
            if line == b"login":
                return Authenticate("u", b"pw")
            if line == b"big":
                self.transport.write(b"x" * 1000)
            elif line == b"bye":
                self.out.append(b"bye\n")
                self.closing = Close("bye")
                return SEND
            elif line == b"kick":
                return KICK
            else:
                self.out.append(line.upper() + b"\n")
        self.deadline = trio.current_time() + self.timeout
        return NEED_DATA

    def data_to_send(self) -> bytes:
        data = b"".join(self.out)
        self.out.clear()
        return data

    def commit_done(self, error: Exception | None) -> None:
        self.events.append(f"committed {error}")

    def commit_cancelled(self) -> None:
        self.events.append("commit cancelled")

    def authenticated(self, ok: bool) -> None:
        self.out.append(b"welcome\n" if ok else b"denied\n")

    def unblocked(self) -> None:
        self.events.append("unblocked")

    def timed_out(self) -> None:
        self.events.append(f"timed out at {trio.current_time():g}")
        self.closing = Close("timeout")

    def connection_lost(self, reason: str) -> None:
        self.events.append("lost")

    def on_sent(self) -> bool:
        self.sent += 1
        return False

    def connection_closed(self) -> bool:
        self.events.append("closed")
        return False


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store.open(tmp_path / "db")
    try:
        async with s.running():
            yield s
    finally:
        s.close()


async def login(user: str | None, password: bytes | None) -> bool:
    await trio.sleep(0)  # the real one runs in a thread
    return (user, password) == ("u", b"pw")


async def read_until(stream: trio.abc.Stream, want: bytes | None) -> bytes:
    """Read until the bytes end with ``want``, or (``None``) until the stream closes."""
    got = b""
    while want is None or not got.endswith(want):
        data = await stream.receive_some(65536)
        if not data:
            break
        got += data
    return got


async def test_replies_commit_login_and_close(store: Store) -> None:
    client, server = trio.testing.memory_stream_pair()
    transport = Transport(server, store, pause_at=1 << 20, authenticate=login)
    proto = Lines(transport)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run, proto)
        await client.send_all(b"a\nb\n")
        assert await read_until(client, b"B\n") == b"A\nB\n"  # one burst, one write
        await client.send_all(b"commit\nlogin\n")
        assert await read_until(client, b"welcome\n") == b"committed\nwelcome\n"
        await client.send_all(b"bye\nnot processed\n")
        assert await read_until(client, None) == b"bye\n"  # then the stream closes
    assert "committed None" in proto.events and proto.events[-1] == "closed"
    assert "data b'not processed\\n'" not in proto.events[-2:]


async def test_the_deadline_is_the_protocols(store: Store,
                                             autojump_clock: trio.testing.MockClock) -> None:
    client, server = trio.testing.memory_stream_pair()
    transport = Transport(server, store, pause_at=1 << 20)
    proto = Lines(transport, timeout=5.0)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run, proto)
        await trio.sleep(4)
        await client.send_all(b"ping\n")  # any input restarts the window
        assert await read_until(client, b"PING\n") == b"PING\n"
        assert await read_until(client, None) == b""  # closed at the deadline
        closed_at = trio.current_time()
    assert closed_at - start == pytest.approx(9.0)
    assert f"timed out at {start + 9:g}" in proto.events


async def test_the_reader_pauses_while_the_output_is_over_its_bound(store: Store) -> None:
    client, server = trio.testing.lockstep_stream_pair()  # send_all waits for the reader
    transport = Transport(server, store, pause_at=500)
    proto = Lines(transport)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run, proto)
        await client.send_all(b"big\n")
        await trio.testing.wait_all_tasks_blocked()
        assert transport.out_bytes == 1000  # unread by the client: in transit
        nursery.start_soon(client.send_all, b"more\n")
        await trio.testing.wait_all_tasks_blocked()
        assert "data b'more\\n'" not in proto.events  # the server does not read meanwhile
        assert await read_until(client, b"x" * 1000) == b"x" * 1000
        assert await read_until(client, b"MORE\n") == b"MORE\n"  # it reads again
        await trio.testing.wait_all_tasks_blocked()
        # on_sent after the writer's send; the reply to "more" went from the reader itself
        # (no file descriptor here, as with TLS: ``_send_direct``)
        assert transport.out_bytes == 0 and proto.sent == 1
        nursery.cancel_scope.cancel()


async def test_abort_ends_the_connection_and_drops_unsent_bytes(store: Store) -> None:
    client, server = trio.testing.memory_stream_pair()
    transport = Transport(server, store, pause_at=1 << 20)
    proto = Lines(transport)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run, proto)
        await trio.testing.wait_all_tasks_blocked()
        transport.write(b"never sent")
        transport.abort()
        assert await read_until(client, None) == b""
    assert proto.events == ["closed"]


async def test_a_peer_that_goes_away(store: Store) -> None:
    client, server = trio.testing.memory_stream_pair()
    transport = Transport(server, store, pause_at=1 << 20)
    proto = Lines(transport)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run, proto)
        await client.aclose()
    assert proto.events[-2:] == ["data b''", "closed"]
