"""The hot loop (``oxiedge.net.hot``): plain-TCP bursts served inline while trio would
sleep, everything that needs an await handed back to the reader task. Real socket pairs
and the real clock (an autojump clock makes the loop step aside, see its docstring)."""

from __future__ import annotations

import select
import socket

import pytest
import trio

from oxiedge.net import hot as hot_module
from oxiedge.net.hot import HotLoop, hot_loop
from oxiedge.net.loop import Transport
from oxiedge.store import Store
from tests.net.test_loop import Lines, login, read_until, stream_pair


def the_loop() -> HotLoop:
    hot = hot_loop()
    assert hot is not None, "no hot loop on this trio (Linux epoll expected)"
    return hot


async def parked(transport: Transport) -> None:
    """Wait until the reader waits in the hot loop."""
    with trio.fail_after(5):
        while not transport.parked:
            await trio.sleep(0.001)


async def exchange(client: trio.abc.Stream, send: bytes, want: bytes) -> bytes:
    with trio.fail_after(5):  # (a task woken inline must run at once, not at some timer)
        await client.send_all(send)
        return await read_until(client, want)


async def test_bursts_are_served_inline_and_awaits_handed_back(store: Store) -> None:
    client, server = stream_pair("socket")
    transport = Transport(server, store, pause_at=1 << 20, authenticate=login)
    proto = Lines(transport)
    hot = the_loop()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run, proto)
        await parked(transport)
        before = hot.served
        assert await exchange(client, b"a\nb\n", b"B\n") == b"A\nB\n"
        assert hot.served > before and transport.parked  # inline, still parked
        # A commit and a login need the reader task: handed back. After a burst that
        # needed an await the reader waits in trio; after one that needed none it parks.
        assert await exchange(client, b"commit\nlogin\n", b"welcome\n") == b"committed\nwelcome\n"
        assert not transport.parked
        assert await exchange(client, b"c\n", b"C\n") == b"C\n"  # read by the task
        await parked(transport)
        served = hot.served
        for i in range(20):  # many sequential bursts, with commits between some
            line = b"commit\n" if i % 5 == 0 else b"x%d\n" % i
            want = b"committed\n" if i % 5 == 0 else b"X%d\n" % i
            assert await exchange(client, line, want) == want
        assert hot.served >= served + 12  # all but the bursts right after a commit
        assert await exchange(client, b"bye\n", b"bye\n") == b"bye\n"
        assert await read_until(client, None) == b""  # closed
    assert proto.events.count("committed None") == 5 and proto.events[-1] == "closed"
    assert not hot.parked  # its descriptor left the loop before it was closed


async def test_the_protocols_deadline_applies_while_parked(store: Store) -> None:
    client, server = stream_pair("socket")
    transport = Transport(server, store, pause_at=1 << 20)
    proto = Lines(transport, timeout=0.3)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run, proto)
        for i in range(6):  # input every 0.1 s moves the window: no time-out meanwhile
            await trio.sleep(0.1)
            assert await exchange(client, b"p%d\n" % i, b"P%d\n" % i) == b"P%d\n" % i
        assert not any(e.startswith("timed out") for e in proto.events)
        last = trio.current_time()
        with trio.fail_after(5):
            assert await read_until(client, None) == b""  # silence: closed at the deadline
        assert trio.current_time() - last >= 0.3
    assert [e for e in proto.events if e.startswith("timed out")]


async def test_a_deadline_moved_earlier_inline_is_applied(store: Store) -> None:
    client, server = stream_pair("socket")
    transport = Transport(server, store, pause_at=1 << 20)
    proto = Lines(transport, timeout=60.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run, proto)
        await parked(transport)
        start = trio.current_time()
        await client.send_all(b"timeout 0.2\n")
        with trio.fail_after(5):
            assert await read_until(client, None) == b""
        assert 0.2 <= trio.current_time() - start < 5


def _ping_pong(sock: socket.socket, count: int) -> list[bytes]:
    """A client on its own thread: a line, wait for its answer, the next at once."""
    answers = []
    sock.settimeout(5)
    for i in range(count):
        sock.sendall(b"q%d\n" % i)
        got = b""
        while not got.endswith(b"\n"):
            chunk = sock.recv(100)
            assert chunk, "closed"
            got += chunk
        answers.append(got)
    return answers


async def test_busy_poll_spins_only_while_bursts_come_back_to_back(store: Store) -> None:
    a, b = socket.socketpair()
    transport = Transport(trio.SocketStream(trio.socket.from_stdlib_socket(b)), store,
                          pause_at=1 << 20)
    proto = Lines(transport, timeout=0.5)
    hot = the_loop()
    hot.busy_poll(200)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(transport.run, proto)
            await parked(transport)
            served = hot.served
            answers = await trio.to_thread.run_sync(_ping_pong, a, 200)
            assert answers == [b"Q%d\n" % i for i in range(200)]
            assert hot.served >= served + 200  # each one inline
            # (whether these waits spun depends on how fast the client thread answers on
            # this machine; the gate itself is tested below)
            for _ in range(5):  # (the first waits after the run may still spin)
                await trio.sleep(0.005)
            spins = hot.spins
            for _ in range(20):  # idle, with a timer ticking: timers fire, nothing spins
                await trio.sleep(0.005)
            assert hot.spins == spins
            with trio.fail_after(5):  # the protocol's deadline still closes a silent peer
                while proto.events[-1] != "closed":
                    await trio.sleep(0.01)
            assert any(e.startswith("timed out") for e in proto.events)
    finally:
        hot.busy_poll(0)
        a.close()


async def test_the_busy_poll_gate() -> None:
    hot = the_loop()
    hot.busy_poll(300)
    a, b = socket.socketpair()
    try:
        hot._ep.register(b.fileno(), 1)  # (EPOLLIN; not a parked transport: poll only)
        a.send(b"x")
        for _ in range(8):  # input ready at once: each wait counts as a hit
            assert hot._spin_then_poll(1.0)
        assert hot._hits > 0.75 and hot.spins == 0  # nothing had to spin yet
        b.recv(10)
        assert hot._spin_then_poll(0.002) == []  # gate open, nothing comes: it spins
        assert hot.spins == 1 and hot._hits < 0.75  # ... once: the miss closes the gate
        assert hot._spin_then_poll(0.002) == [] and hot.spins == 1  # no spin now
        hot._hits = 1.0
        hot.busy_poll(300, syncing=lambda: True)  # a sync in flight: never spins
        assert hot._spin_then_poll(0.002) == [] and hot.spins == 1
    finally:
        hot._ep.unregister(b.fileno())
        hot.busy_poll(0)
        a.close()
        b.close()


async def test_input_is_served_in_the_order_it_arrived(store: Store) -> None:
    # One connection waits in trio (its last burst needed an await), the other is parked
    # in the hot loop. Input that reaches the first one before the second must be handled
    # first: a client's PUBLISH must not overtake another client's SUBSCRIBE sent before
    # it (paho's test_subscribe_options). The clients send synchronously, back to back,
    # so both are ready in the same wait.
    order: list[bytes] = []

    class Ordered(Lines):
        def receive_data(self, data: bytes | bytearray) -> None:
            order.append(bytes(data))
            super().receive_data(data)

        def authenticated(self, ok: bool) -> None:
            order.append(b"authenticated")
            super().authenticated(ok)

    async def to_trio() -> None:
        """A burst that needs an await (a login): the connection then waits in trio."""
        in_trio.sendall(b"login\n")
        with trio.fail_after(5):
            while order[-1:] != [b"authenticated"]:
                await trio.sleep(0.001)
        await trio.testing.wait_all_tasks_blocked()  # (its reader is in trio's wait)
        order.clear()
        assert not waiting.parked

    sockets = [socket.socketpair() for _ in range(2)]
    transports = [Transport(trio.SocketStream(trio.socket.from_stdlib_socket(server)), store,
                            pause_at=1 << 20, authenticate=login) for _, server in sockets]
    (in_trio, _), (hot_client, _) = sockets
    async with trio.open_nursery() as nursery:
        for transport in transports:
            nursery.start_soon(transport.run, Ordered(transport))
        waiting, hot = transports
        await parked(waiting)
        await parked(hot)
        for round_ in range(5):
            await to_trio()
            in_trio.sendall(b"first%d\n" % round_)
            hot_client.sendall(b"second%d\n" % round_)
            with trio.fail_after(5):
                while len(order) < 2:
                    await trio.sleep(0.001)
            assert order == [b"first%d\n" % round_, b"second%d\n" % round_]
            order.clear()
            await parked(hot)
        nursery.cancel_scope.cancel()
    for client, _ in sockets:
        client.close()


async def test_parked_input_gives_way_to_trio_one_round_at_most(store: Store) -> None:
    # epoll keeps a descriptor that stays ready where it was in its list: with trio's own
    # descriptor always ready first (busy connections in trio), parked input behind it
    # must still be served, at the latest in the round after the one that gave way.
    a, b = socket.socketpair()
    transport = Transport(trio.SocketStream(trio.socket.from_stdlib_socket(b)), store,
                          pause_at=1 << 20)
    hot = the_loop()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run, Lines(transport))
        await parked(transport)
        a.sendall(b"x\n")  # (synchronous: no scheduling point until the assertions ran)
        ready = [(hot._trio_fd, select.EPOLLIN), (b.fileno(), select.EPOLLIN)]
        hot._serve_ready([])  # (a round without trio's descriptor: no giving way behind)
        served = hot.served
        assert hot._serve_ready(ready) and hot.served == served  # trio's tasks first
        assert hot._serve_ready(ready) and hot.served == served + 1  # then it is served
        a.settimeout(5)
        assert a.recv(100) == b"X\n"
        nursery.cancel_scope.cancel()
    a.close()


class BusyInTrio:
    """A connection waiting in trio whose input is always there: its task reads one byte
    at a time of 100,000, so trio's descriptor is ready at every wait."""

    def __init__(self) -> None:
        self.client, self.sock = socket.socketpair()
        self.sock.setblocking(False)
        self.client.sendall(b"x" * 100_000)
        self.reads = 0

    async def run(self) -> None:
        while True:
            await trio.lowlevel.wait_readable(self.sock)
            self.sock.recv(1)
            self.reads += 1

    def close(self) -> None:
        self.client.close()
        self.sock.close()


async def test_a_parked_connection_is_not_starved_by_busy_input_in_trio(store: Store) -> None:
    # The same end to end, with the kernel's own ready list: trio's descriptor is ready at
    # every wait (a task in trio reads its socket a little at a time and input is always
    # there, as a busy connection waiting in trio), and the parked connection's input came
    # after that descriptor first became ready. It is answered while trio is still busy
    # (at 0c7d923 it never was).
    busy = BusyInTrio()
    client, server = stream_pair("socket")
    transport = Transport(server, store, pause_at=1 << 20)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(transport.run, Lines(transport))
            await parked(transport)
            nursery.start_soon(busy.run)
            with trio.fail_after(5):
                while busy.reads < 10:  # (trio's descriptor is on epoll's ready list first)
                    await trio.sleep(0)
            assert await exchange(client, b"ping\n", b"PING\n") == b"PING\n"
            assert busy.reads < 100_000  # (answered while trio was still busy)
            nursery.cancel_scope.cancel()
    finally:
        busy.close()


async def test_arrival_order_holds_in_every_round_while_trio_is_busy(store: Store) -> None:
    # With trio's descriptor ready at every wait (a busy connection in trio) it stays
    # first on epoll's ready list, so each parked connection's new input is behind it.
    # Pairs of a connection waiting in trio and a parked one get their input back to
    # back, one pair per round: the parked one must be answered after the one in trio in
    # every pair, not only every other round (at 98a1565 the round after one that gave
    # way served all parked input at once, so one pair of two consecutive ones broke).
    pairs = 4
    order: list[bytes] = []

    class Ordered(Lines):
        def receive_data(self, data: bytes | bytearray) -> None:
            order.append(bytes(data))
            super().receive_data(data)

        def authenticated(self, ok: bool) -> None:
            order.append(b"authenticated")
            super().authenticated(ok)

    busy = BusyInTrio()
    sockets = [socket.socketpair() for _ in range(2 * pairs)]
    transports = [Transport(trio.SocketStream(trio.socket.from_stdlib_socket(server)), store,
                            pause_at=1 << 20, authenticate=login) for _, server in sockets]
    in_trio, in_hot = sockets[:pairs], sockets[pairs:]
    try:
        async with trio.open_nursery() as nursery:
            for transport in transports:
                nursery.start_soon(transport.run, Ordered(transport))
            for transport in transports:
                await parked(transport)
            for client, _ in in_trio:  # a burst that needs an await: then it waits in trio
                client.sendall(b"login\n")
            with trio.fail_after(5):
                while order.count(b"authenticated") < pairs:
                    await trio.sleep(0.001)
            await trio.testing.wait_all_tasks_blocked()  # (their readers are in trio's wait)
            assert not any(t.parked for t in transports[:pairs])
            assert all(t.parked for t in transports[pairs:])
            order.clear()
            nursery.start_soon(busy.run)
            with trio.fail_after(5):
                while busy.reads < 10:  # (trio's descriptor is on epoll's ready list first)
                    await trio.sleep(0)
            for i in range(pairs):  # (synchronous sends: one pair per round)
                in_trio[i][0].sendall(b"first%d\n" % i)
                in_hot[i][0].sendall(b"second%d\n" % i)
                await trio.sleep(0)
            with trio.fail_after(5):
                while len(order) < 2 * pairs:
                    await trio.sleep(0)
            assert busy.reads < 100_000  # (all while trio was still busy)
            assert [order.index(b"first%d\n" % i) < order.index(b"second%d\n" % i)
                    for i in range(pairs)] == [True] * pairs, order
            nursery.cancel_scope.cancel()
    finally:
        for client, _ in sockets:
            client.close()
        busy.close()


async def test_abort_while_parked(store: Store) -> None:
    client, server = stream_pair("socket")
    transport = Transport(server, store, pause_at=1 << 20)
    proto = Lines(transport)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run, proto)
        await parked(transport)
        fd = server.socket.fileno()
        transport.abort()
        assert fd not in the_loop().parked  # out of the loop before the task even runs
        with trio.fail_after(5):
            assert await read_until(client, None) == b""
    assert proto.events == ["closed"]


async def test_an_error_raised_inline_is_raised_by_the_reader(store: Store) -> None:
    client, server = stream_pair("socket")
    transport = Transport(server, store, pause_at=1 << 20)

    class Boom(Lines):
        def receive_data(self, data: bytes | bytearray) -> None:
            if b"boom" in data:
                raise ValueError("boom")
            super().receive_data(data)

    proto = Boom(transport)
    with pytest.RaisesGroup(pytest.RaisesExc(ValueError, match="boom"), flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(transport.run, proto)
            await parked(transport)
            await client.send_all(b"boom\n")
    assert proto.events[-1] == "closed"


async def test_a_failing_hot_loop_hands_every_connection_back(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = [stream_pair("socket") for _ in range(3)]
    transports = [Transport(server, store, pause_at=1 << 20) for _, server in pairs]
    hot = the_loop()

    def broken(timeout: float) -> None:
        raise RuntimeError("a bug in the hot loop")

    async with trio.open_nursery() as nursery:
        for transport in transports:
            nursery.start_soon(transport.run, Lines(transport))
        for transport in transports:
            await parked(transport)
        monkeypatch.setattr(hot, "_serve", broken)
        await trio.sleep(0.05)  # the next wait runs the hook: it fails, turns itself off
        assert hot.broken and hot_loop() is None and not hot.parked
        for i, (client, _) in enumerate(pairs):  # every connection still answers (in trio)
            assert await exchange(client, b"c%d\n" % i, b"C%d\n" % i) == b"C%d\n" % i
        nursery.cancel_scope.cancel()


async def test_the_off_switch(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OXIEDGE_HOT_LOOP", "0")
    assert hot_loop() is None
    client, server = stream_pair("socket")
    transport = Transport(server, store, pause_at=1 << 20, authenticate=login)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run, Lines(transport))
        assert await exchange(client, b"a\ncommit\nlogin\n", b"welcome\n") \
            == b"A\ncommitted\nwelcome\n"
        assert not transport.parked
        nursery.cancel_scope.cancel()


def test_no_hot_loop_without_the_trio_internals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hot_module, "_trio_internals", lambda: None)

    async def main() -> HotLoop | None:
        return hot_loop()

    assert trio.run(main) is None
