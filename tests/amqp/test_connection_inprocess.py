"""AmqpConnection in-process on trio memory streams and a real store: timers with the
autojump clock (heartbeats, dead peers, handshake timeout over minutes of virtual time,
no sleeping) and the publish burst -> one commit -> one coalesced confirm rule."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from oxiedge.amqp import codec, spec
from oxiedge.amqp.codec import Command, FrameParser
from oxiedge.amqp.connection import AmqpConnection
from oxiedge.store import Store
from tests.amqp.conftest import amqp_service


class MemClient:
    def __init__(self, stream: trio.abc.Stream, store: Store) -> None:
        self.stream = stream
        self.store = store
        self.parser = FrameParser(0, expect_header=False)
        self.heartbeats: list[float] = []

    async def send(self, method: spec.Method, channel: int = 0) -> None:
        await self.stream.send_all(codec.encode_method(channel, method))

    async def recv(self) -> Command | None:
        while True:
            ev = self.parser.next_event()
            if isinstance(ev, Command):
                return ev
            if ev is not None:
                self.heartbeats.append(trio.current_time())
                continue
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.parser.feed(bytes(data))

    async def handshake(self, heartbeat: int) -> None:
        await self.stream.send_all(codec.PROTOCOL_HEADER)
        assert isinstance((await self.recv()).method, spec.ConnectionStart)  # type: ignore[union-attr]
        await self.send(spec.ConnectionStartOk({}, "PLAIN", b"\x00guest\x00guest"))
        assert isinstance((await self.recv()).method, spec.ConnectionTune)  # type: ignore[union-attr]
        await self.send(spec.ConnectionTuneOk(0, 131072, heartbeat))
        await self.send(spec.ConnectionOpen("/"))
        assert isinstance((await self.recv()).method, spec.ConnectionOpenOk)  # type: ignore[union-attr]


@asynccontextmanager
async def serving(tmp_path: Path, socket: bool = False,
                  **cfg: Any) -> AsyncIterator[tuple[MemClient, trio.Nursery]]:
    """The connection on a memory stream pair, or (``socket``) on a socket pair: the
    transport then writes its replies directly on the descriptor."""
    async with amqp_service(tmp_path, **cfg) as svc:
        client_stream: trio.abc.Stream
        server_stream: trio.abc.Stream
        if socket:
            a, b = trio.socket.socketpair()
            client_stream, server_stream = trio.SocketStream(a), trio.SocketStream(b)
        else:
            client_stream, server_stream = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(AmqpConnection(svc, server_stream, "mem").run)
            yield MemClient(client_stream, svc.app.store), nursery
            nursery.cancel_scope.cancel()


async def test_silent_client_declared_dead_after_two_intervals(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with serving(tmp_path, amqp_heartbeat=60) as (client, _n):
        await client.handshake(heartbeat=60)
        start = trio.current_time()
        assert await client.recv() is None  # EOF: the server gave up on us
        waited = trio.current_time() - start
        assert 120 <= waited < 121
        # meanwhile it sent a heartbeat every half interval
        assert len(client.heartbeats) >= 3
        gaps = [b - a for a, b in zip(client.heartbeats, client.heartbeats[1:], strict=False)]
        assert all(29 <= g <= 31 for g in gaps)


@pytest.mark.parametrize("socket", [False, True])
async def test_no_heartbeat_while_replies_flow(
        tmp_path: Path, autojump_clock: trio.testing.MockClock, socket: bool) -> None:
    # Heartbeats go only on an idle connection: replies written by any path (the writer
    # task, or the reader's direct write on a socket) count as traffic.
    async with serving(tmp_path, socket=socket, amqp_heartbeat=20) as (client, _n):
        await client.handshake(heartbeat=20)
        for ch in range(1, 13):  # a request every 5 s for a minute
            await trio.sleep(5)
            await client.send(spec.ChannelOpen(), ch)
            cmd = await client.recv()
            assert cmd is not None and isinstance(cmd.method, spec.ChannelOpenOk)
        assert client.heartbeats == []
        await trio.sleep(35)  # then idle: heartbeats again (every 10 s)
        await client.send(spec.ChannelOpen(), 13)
        cmd = await client.recv()
        assert cmd is not None and isinstance(cmd.method, spec.ChannelOpenOk)
        assert len(client.heartbeats) >= 2


async def test_heartbeating_client_stays_connected(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with serving(tmp_path, amqp_heartbeat=10) as (client, _n):
        await client.handshake(heartbeat=10)
        for _ in range(30):  # 5 virtual minutes
            await trio.sleep(10)
            await client.stream.send_all(codec.HEARTBEAT_FRAME)
        await client.send(spec.ChannelOpen(), 1)
        cmd = await client.recv()
        assert cmd is not None and isinstance(cmd.method, spec.ChannelOpenOk)


async def test_heartbeat_zero_means_no_timeout(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with serving(tmp_path, amqp_heartbeat=60) as (client, _n):
        await client.handshake(heartbeat=0)
        await trio.sleep(3600)
        await client.send(spec.ChannelOpen(), 1)
        cmd = await client.recv()
        assert cmd is not None and isinstance(cmd.method, spec.ChannelOpenOk)
        assert client.heartbeats == []


async def test_handshake_timeout(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with serving(tmp_path) as (client, _n):
        await client.stream.send_all(codec.PROTOCOL_HEADER)
        start = trio.current_time()
        cmd = await client.recv()
        assert cmd is not None and isinstance(cmd.method, spec.ConnectionStart)
        assert await client.recv() is None  # never sent start-ok: dropped
        assert 9.9 <= trio.current_time() - start <= 10.1


async def test_one_burst_one_commit_one_coalesced_confirm(tmp_path: Path) -> None:
    async with serving(tmp_path) as (client, _n):
        await client.handshake(heartbeat=0)
        await client.send(spec.ChannelOpen(), 1)
        await client.recv()
        await client.send(spec.ConfirmSelect(), 1)
        await client.recv()
        await client.send(spec.QueueDeclare(queue="burst", durable=True), 1)
        assert isinstance((await client.recv()).method, spec.QueueDeclareOk)  # type: ignore[union-attr]
        store = client.store
        rounds = store.committer.rounds
        props = spec.BasicProperties(delivery_mode=2).encode()
        burst = b"".join(codec.encode_content(1, spec.BasicPublish(routing_key="burst"), props,
                                              b"m%d" % i, 0) for i in range(100))
        assert len(burst) < 65536  # one receive_some
        await client.stream.send_all(burst)
        cmd = await client.recv()
        assert cmd is not None and cmd.method == spec.BasicAck(100, True)
        assert store.committer.rounds - rounds == 1
        assert sum(1 for _ in store.iter_raw("amqp", b"m")) == 100
