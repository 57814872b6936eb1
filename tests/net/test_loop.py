"""The transport loop (``oxiedge.net.loop``) with a tiny line protocol of its own, over
trio's in-memory streams and the autojump clock: the loop knows no MQTT, so what it does
(commit, deadlines, back-pressure, close) is checked here for every protocol at once."""

from __future__ import annotations

import math
import socket

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
                self.transport.output.write(b"x" * 1000)
            elif line == b"bye":
                self.out.append(b"bye\n")
                self.closing = Close("bye")
                return SEND
            elif line == b"kick":
                return KICK
            elif line.startswith(b"timeout "):
                self.timeout = float(line.split()[1])  # may move the deadline earlier
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


def stream_pair(kind: str) -> tuple[trio.abc.Stream, trio.abc.Stream]:
    """An in-memory pair (no file descriptor: the path TLS takes) or a socket pair (the
    direct read and write of plain TCP)."""
    if kind == "memory":
        return trio.testing.memory_stream_pair()
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


@pytest.mark.parametrize("kind", ["memory", "socket"])
async def test_a_deadline_that_keeps_moving_never_fires_early(
        store: Store, autojump_clock: trio.testing.MockClock, kind: str) -> None:
    # The loop sets its read deadline lazily (only when the protocol's moves earlier), so
    # the first window's deadline passes while input still flows: that must not count.
    client, server = stream_pair(kind)
    transport = Transport(server, store, pause_at=1 << 20)
    proto = Lines(transport, timeout=5.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run, proto)
        for i in range(6):  # 18 s of traffic, one line every 3 s
            await trio.sleep(3)
            await client.send_all(b"p%d\n" % i)
            assert await read_until(client, b"P%d\n" % i) == b"P%d\n" % i
        last = trio.current_time()
        assert await read_until(client, None) == b""  # then silence: closed at the deadline
        closed_at = trio.current_time()
    assert closed_at - last == pytest.approx(5.0)
    assert [e for e in proto.events if e.startswith("timed out")] == [f"timed out at {last + 5:g}"]


@pytest.mark.parametrize("kind", ["memory", "socket"])
async def test_a_deadline_that_moves_earlier_applies_at_once(
        store: Store, autojump_clock: trio.testing.MockClock, kind: str) -> None:
    client, server = stream_pair(kind)
    transport = Transport(server, store, pause_at=1 << 20)
    proto = Lines(transport, timeout=60.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run, proto)
        await client.send_all(b"timeout 2\n")
        start = trio.current_time()
        assert await read_until(client, None) == b""
        closed_at = trio.current_time()
    assert closed_at - start == pytest.approx(2.0)


@pytest.mark.parametrize("kind", ["memory", "socket"])
async def test_no_deadline_cuts_a_commit(store: Store, autojump_clock: trio.testing.MockClock,
                                         kind: str) -> None:
    # A commit (or a held publisher, a login) is no silence of the client: a deadline that
    # passes meanwhile is not applied to it.
    client, server = stream_pair(kind)

    class SlowStore:
        def __init__(self) -> None:
            self.kicks = 0

        async def commit(self) -> None:
            await trio.sleep(10)

        def kick(self) -> None:
            self.kicks += 1

    transport = Transport(server, SlowStore(), pause_at=1 << 20)  # type: ignore[arg-type]
    proto = Lines(transport, timeout=5.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run, proto)
        await trio.sleep(3)
        await client.send_all(b"commit\n")  # its window ends at 5 s, the commit at 13 s
        assert await read_until(client, b"committed\n") == b"committed\n"
        nursery.cancel_scope.cancel()
    assert "committed None" in proto.events
    assert not any(e.startswith(("timed out", "commit cancelled")) for e in proto.events)


async def test_the_reader_pauses_while_the_output_is_over_its_bound(store: Store) -> None:
    client, server = trio.testing.lockstep_stream_pair()  # send_all waits for the reader
    transport = Transport(server, store, pause_at=500)
    proto = Lines(transport)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run, proto)
        await client.send_all(b"big\n")
        await trio.testing.wait_all_tasks_blocked()
        assert transport.output.out_bytes == 1000  # unread by the client: in transit
        nursery.start_soon(client.send_all, b"more\n")
        await trio.testing.wait_all_tasks_blocked()
        assert "data b'more\\n'" not in proto.events  # the server does not read meanwhile
        assert await read_until(client, b"x" * 1000) == b"x" * 1000
        assert await read_until(client, b"MORE\n") == b"MORE\n"  # it reads again
        await trio.testing.wait_all_tasks_blocked()
        # on_sent after the writer's send; the reply to "more" went from the reader itself
        # (no file descriptor here, as with TLS: ``Output.send_direct``)
        assert transport.output.out_bytes == 0 and proto.sent == 1
        nursery.cancel_scope.cancel()


async def test_abort_ends_the_connection_and_drops_unsent_bytes(store: Store) -> None:
    client, server = trio.testing.memory_stream_pair()
    transport = Transport(server, store, pause_at=1 << 20)
    proto = Lines(transport)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run, proto)
        await trio.testing.wait_all_tasks_blocked()
        transport.output.write(b"never sent")
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


async def test_deliver_now_sends_other_connections_output_mid_burst(store: Store) -> None:
    # A protocol that knows it handled the last packet of its input calls deliver_now():
    # what the burst wrote to other connections leaves at once, before the burst ends.
    a_client, a_server = stream_pair("socket")
    b_client, b_server = stream_pair("socket")
    subscriber = Transport(b_server, store, pause_at=1 << 20)
    publisher = Transport(a_server, store, pause_at=1 << 20)
    seen: list[bytes] = []

    class Forward(Lines):
        def next_action(self) -> object:
            if b"fwd\n" in self.buf:
                self.buf = self.buf.replace(b"fwd\n", b"", 1)
                subscriber.output.write(b"delivery\n")
                publisher.output.deliver_now()
                raw = b_client.socket  # type: ignore[attr-defined]
                try:
                    seen.append(raw._sock.recv(100, socket.MSG_DONTWAIT))
                except BlockingIOError:
                    seen.append(b"")  # not sent yet
                self.out.append(b"ok\n")
            return super().next_action()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(subscriber.run, Lines(subscriber))
        nursery.start_soon(publisher.run, Forward(publisher))
        await a_client.send_all(b"fwd\n")
        assert await read_until(a_client, b"ok\n") == b"ok\n"
        nursery.cancel_scope.cancel()
    assert seen == [b"delivery\n"]
