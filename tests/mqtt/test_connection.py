"""The connection loop over in-memory streams with trio's autojump clock: keep-alive and
CONNECT timers are checked to the second without sleeping."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from oxiedge.app import App
from oxiedge.auth import UserStore
from oxiedge.config import Config
from oxiedge.mqtt.codec import Decoder, encode
from oxiedge.mqtt.connection import Connection
from oxiedge.mqtt.packets import (
    Connack,
    Connect,
    Packet,
    Pingresp,
    Puback,
    Publish,
    Subscribe,
    Will,
)
from oxiedge.mqtt.service import MqttService
from oxiedge.store import Store


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[MqttService]:
    app = App(config=Config(data=tmp_path), store=Store.open(tmp_path / "db"),
              users=UserStore({}, None))  # fmt: skip
    try:
        async with app.store.running():
            svc = MqttService(app)
            await svc.recover()
            yield svc
    finally:
        app.store.close()


class Peer:
    """The client end of an in-memory connection served by a ``Connection``."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.decoder = Decoder()
        self.closed_at: float | None = None

    async def send(self, packet: Packet) -> None:
        await self.stream.send_all(encode(packet))

    async def next(self) -> Packet | None:
        """The next packet, or None once the server closed the connection."""
        while True:
            packet = self.decoder.next_packet()
            if packet is not None:
                return packet
            data = await self.stream.receive_some(65536)
            if not data:
                self.closed_at = trio.current_time()
                return None
            self.decoder.feed(data)


async def open_peer(nursery: trio.Nursery, svc: MqttService) -> Peer:
    client, server = trio.testing.memory_stream_pair()
    nursery.start_soon(Connection(svc, server).serve)
    return Peer(client)


async def test_keepalive_closes_after_one_and_a_half_times(
    service: MqttService, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        watcher = await open_peer(nursery, service)
        await watcher.send(Connect("watcher", keep_alive=0))
        assert await watcher.next() == Connack(0, False)
        await watcher.send(Subscribe(1, (("will/#", 0),)))
        await watcher.next()
        peer = await open_peer(nursery, service)
        start = trio.current_time()
        await peer.send(Connect("sleepy", keep_alive=10, will=Will("will/sleepy", b"bye")))
        assert await peer.next() == Connack(0, False)
        assert await peer.next() is None
        assert peer.closed_at is not None
        assert peer.closed_at - start == pytest.approx(15.0, abs=0.01)  # MQTT-3.1.2-24
        assert await watcher.next() == Publish("will/sleepy", b"bye")
        nursery.cancel_scope.cancel()


async def test_pings_keep_the_connection_open(
    service: MqttService, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        peer = await open_peer(nursery, service)
        await peer.send(Connect("pinger", keep_alive=10))
        assert await peer.next() == Connack(0, False)
        for _ in range(10):
            await trio.sleep(14)  # under 1.5 x 10 s each time: never closed
            await peer.stream.send_all(b"\xc0\x00")
            assert await peer.next() == Pingresp()
        assert service.broker.stats.connections == 1
        nursery.cancel_scope.cancel()


async def test_no_connect_in_time_closes(
    service: MqttService, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        peer = await open_peer(nursery, service)
        start = trio.current_time()
        assert await peer.next() is None
        assert peer.closed_at is not None
        assert peer.closed_at - start == pytest.approx(service.connect_timeout, abs=0.01)
        assert service.broker.stats.connect_timeouts == 1
        nursery.cancel_scope.cancel()


async def test_disconnect_flushes_the_burst_and_discards_the_will(
    service: MqttService, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        peer = await open_peer(nursery, service)
        await peer.send(Connect("polite", will=Will("w", b"never")))
        assert await peer.next() == Connack(0, False)
        # PUBLISH QoS 1 + DISCONNECT + a PINGREQ after it, in one segment.
        await peer.stream.send_all(
            encode(Publish("t", b"x", 1, packet_id=5)) + b"\xe0\x00" + b"\xc0\x00"
        )
        assert await peer.next() == Puback(5)
        assert await peer.next() is None  # closed; the PINGREQ after DISCONNECT is ignored
        assert service.broker.stats.wills == 0
        nursery.cancel_scope.cancel()
