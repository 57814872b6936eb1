"""QoS 2 acknowledgements never leave before the sync they depend on.

The real connection code serves real TCP sockets in this process, on a real RocksDB store
with the real group committer; ``SyncGate`` holds the committer's sync thread in front of
the real ``flush_wal`` (or makes it fail, as an I/O error would). While a round is held,
every task of the server runs until it blocks, and then nothing that depends on that round
may have reached a client: no PUBREC, PUBREL, PUBCOMP or CONNACK, and no delivery of a
QoS 2 message.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
import trio.testing

from oxiedge.app import App
from oxiedge.auth import UserStore
from oxiedge.config import Config
from oxiedge.mqtt.codec import Decoder, encode
from oxiedge.mqtt.packets import (
    Connack,
    Connect,
    Packet,
    Pingresp,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Will,
)
from oxiedge.mqtt.service import MqttService
from oxiedge.store import Store
from oxiedge.store.committer import GroupCommitter

TIMEOUT = 10.0


class SyncGate:
    """Stands in the committer's sync thread in front of the real sync: ``close()`` makes
    the next sync wait (``held()`` returns once one does) until ``open()``; with ``fail``
    set the held sync raises it instead of syncing."""

    def __init__(self, committer: GroupCommitter) -> None:
        self._open = threading.Event()
        self._open.set()
        self._waiting = threading.Event()
        self.fail: BaseException | None = None
        thread = committer._sync_thread
        real: Callable[[], object] = thread._fn

        def gated() -> object:
            if not self._open.is_set():
                self._waiting.set()
                self._open.wait()
                if self.fail is not None:
                    raise self.fail
            return real()

        thread._fn = gated

    def close(self) -> None:
        self._waiting.clear()
        self._open.clear()

    def open(self) -> None:
        self._open.set()

    async def held(self) -> None:
        """Wait until a sync is held, then until every task of the server is blocked."""
        with trio.fail_after(TIMEOUT):
            while not self._waiting.is_set():
                await trio.sleep(0.005)
        await trio.testing.wait_all_tasks_blocked(cushion=0.05)


class Client:
    """A raw MQTT client on a plain non-blocking socket."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.sock.setblocking(False)
        self.decoder = Decoder()

    def send(self, *packets: Packet) -> None:
        self.sock.sendall(b"".join(encode(p) for p in packets))

    async def next(self) -> Packet | None:
        """The next packet, or None once the server closed the connection."""
        with trio.fail_after(TIMEOUT):
            while (packet := self.decoder.next_packet()) is None:
                await trio.lowlevel.wait_readable(self.sock)
                try:
                    data = self.sock.recv(65536)
                except BlockingIOError:
                    continue
                except ConnectionResetError:
                    return None
                if not data:
                    return None
                self.decoder.feed(data)
            return packet

    def nothing(self) -> bool:
        """True if the server sent nothing (and did not close) so far."""
        if self.decoder.buffered:
            return False
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return True
        return False

    async def connect(self, client_id: str, clean: bool = False, present: bool = False,
                      will: Will | None = None) -> None:  # fmt: skip
        self.send(Connect(client_id, clean, 60, will=will))
        assert await self.next() == Connack(0, present)

    async def subscribe(self, flt: str, qos: int) -> None:
        self.send(Subscribe(1, ((flt, qos),)))
        assert await self.next() == Suback(1, (qos,))

    async def only_ping(self) -> None:
        """Nothing else is pending: a PINGREQ is answered next."""
        self.sock.sendall(b"\xc0\x00")
        assert await self.next() == Pingresp()

    def close(self) -> None:
        self.sock.close()


@dataclass
class Served:
    service: MqttService
    port: int
    gate: SyncGate

    def client(self) -> Client:
        return Client(self.port)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    app = App(config=Config(data=tmp_path), store=Store.open(tmp_path / "db"),
              users=UserStore({}, None))  # fmt: skip
    try:
        async with app.store.running():
            gate = SyncGate(app.store.committer)
            svc = MqttService(app)
            await svc.recover()
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            port = listeners[0].socket.getsockname()[1]
            async with trio.open_nursery() as nursery:
                await nursery.start(svc.run, listeners)
                yield Served(svc, port, gate)
                gate.open()
                nursery.cancel_scope.cancel()
    finally:
        app.store.close()


def q2(pid: int, payload: bytes = b"m", dup: bool = False, topic: str = "t/a") -> Publish:
    return Publish(topic, payload, 2, False, dup, pid)


async def test_pubrec_and_every_delivery_wait_for_the_sync(served: Served) -> None:
    sub = served.client()
    await sub.connect("sub")
    await sub.subscribe("t/#", 2)
    live0 = served.client()  # a clean session at QoS 0: its copy waits too
    await live0.connect("live0", clean=True)
    await live0.subscribe("t/#", 0)
    pub = served.client()
    await pub.connect("pub")
    served.gate.close()
    pub.send(q2(7))
    await served.gate.held()
    assert pub.nothing() and sub.nothing() and live0.nothing()
    served.gate.open()
    assert await pub.next() == Pubrec(7)
    got = await sub.next()
    assert isinstance(got, Publish) and (got.payload, got.qos, got.dup) == (b"m", 2, False)
    assert await live0.next() == Publish("t/a", b"m")


async def test_a_resend_on_the_same_connection_during_the_round(served: Served) -> None:
    sub = served.client()
    await sub.connect("sub")
    await sub.subscribe("t/#", 2)
    pub = served.client()
    await pub.connect("pub")
    served.gate.close()
    pub.send(q2(7))
    await served.gate.held()
    pub.send(q2(7, dup=True))  # re-sent while the first copy's round is open
    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
    assert pub.nothing() and sub.nothing()
    served.gate.open()
    assert [await pub.next(), await pub.next()] == [Pubrec(7), Pubrec(7)]
    pub.send(Pubrel(7))
    assert await pub.next() == Pubcomp(7)
    got = await sub.next()
    assert isinstance(got, Publish) and got.payload == b"m"
    sub.send(Pubrec(got.packet_id or 0))
    assert await sub.next() == Pubrel(got.packet_id or 0)
    sub.send(Pubcomp(got.packet_id or 0))
    await sub.only_ping()  # exactly one copy (MQTT-4.3.3-2)


async def test_a_resend_after_takeover_waits_for_the_first_copys_round(served: Served) -> None:
    sub = served.client()
    await sub.connect("sub")
    await sub.subscribe("t/#", 2)
    first = served.client()
    await first.connect("pub")
    served.gate.close()
    first.send(q2(9))
    await served.gate.held()
    # The client gives up on the first connection and re-sends on a new one (clean=0,
    # same id: a take-over, MQTT-3.1.4-2), pipelined after its CONNECT.
    second = served.client()
    second.send(Connect("pub", False, 60), q2(9, dup=True))
    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
    assert second.nothing() and sub.nothing()
    assert await first.next() is None  # taken over: closed, with no PUBREC
    served.gate.open()
    assert await second.next() == Connack(0, True)
    assert await second.next() == Pubrec(9)
    second.send(Pubrel(9))
    assert await second.next() == Pubcomp(9)
    got = await sub.next()
    assert isinstance(got, Publish) and got.payload == b"m"
    sub.send(Pubrec(got.packet_id or 0))
    assert await sub.next() == Pubrel(got.packet_id or 0)
    sub.send(Pubcomp(got.packet_id or 0))
    await sub.only_ping()  # once


async def test_connack_waits_for_the_session_record(served: Served) -> None:
    served.gate.close()
    first = served.client()
    first.send(Connect("fresh", False, 60))  # a new persistent session
    await served.gate.held()
    second = served.client()  # takes the session over while its record's round is open
    second.send(Connect("fresh", False, 60))
    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
    assert first.nothing() and second.nothing()
    served.gate.open()
    assert await first.next() is None  # the newer CONNECT wins
    assert await second.next() == Connack(0, True)  # the record is durable now


async def test_pubrel_to_a_subscriber_waits_for_the_pubrec_sync(served: Served) -> None:
    sub = served.client()
    await sub.connect("sub")
    await sub.subscribe("t/#", 2)
    pub = served.client()
    await pub.connect("pub", clean=True)
    pub.send(q2(1))
    assert await pub.next() == Pubrec(1)
    got = await sub.next()
    assert isinstance(got, Publish) and got.packet_id is not None
    served.gate.close()
    sub.send(Pubrec(got.packet_id))  # the message record becomes a PUBREL obligation
    await served.gate.held()
    assert sub.nothing()
    served.gate.open()
    assert await sub.next() == Pubrel(got.packet_id)
    # A repeated PUBREC is answered with PUBREL again, never with the PUBLISH.
    sub.send(Pubrec(got.packet_id))
    assert await sub.next() == Pubrel(got.packet_id)
    sub.send(Pubcomp(got.packet_id))
    await sub.only_ping()


async def test_pubcomp_waits_for_the_pubrel_sync(served: Served) -> None:
    pub = served.client()
    await pub.connect("pub")
    pub.send(q2(3))
    assert await pub.next() == Pubrec(3)
    served.gate.close()
    pub.send(Pubrel(3))
    await served.gate.held()
    assert pub.nothing()
    served.gate.open()
    assert await pub.next() == Pubcomp(3)
    # PUBREL for an id the server does not hold: PUBCOMP all the same (after a barrier).
    pub.send(Pubrel(4))
    assert await pub.next() == Pubcomp(4)


async def test_a_qos2_will_reaches_a_durable_session_only_after_its_sync(
    served: Served,
) -> None:
    sub = served.client()
    await sub.connect("sub")
    await sub.subscribe("w/#", 2)
    dying = served.client()
    await dying.connect("dying", clean=True, will=Will("w/dying", b"gone", 2))
    served.gate.close()
    dying.close()  # no DISCONNECT: the will is published (by the releaser's commit)
    await served.gate.held()
    assert sub.nothing()
    served.gate.open()
    got = await sub.next()
    assert isinstance(got, Publish) and (got.topic, got.payload, got.qos) == ("w/dying", b"gone", 2)


async def test_a_failed_commit_never_acknowledges(served: Served) -> None:
    sub = served.client()
    await sub.connect("sub")
    await sub.subscribe("t/#", 2)
    pub = served.client()
    await pub.connect("pub")
    served.gate.close()
    pub.send(q2(5))
    await served.gate.held()
    served.gate.fail = OSError(5, "injected I/O error")
    served.gate.open()
    assert await pub.next() is None  # closed, no PUBREC
    # The client re-sends on a new connection: no CONNACK and no PUBREC either.
    again = served.client()
    again.send(Connect("pub", False, 60), q2(5, dup=True))
    assert await again.next() is None
    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
    assert sub.nothing()  # and nobody got the message
    assert served.service.broker.stats.commit_errors >= 1


async def test_a_retained_qos2_replay_waits_for_its_sync(served: Served) -> None:
    pub = served.client()
    await pub.connect("pub", clean=True)
    for i in range(100):  # more than one replay step (REPLAY_BATCH)
        pub.send(Publish(f"r/{i}", b"v%d" % i, 2, True, False, i + 1))
        assert await pub.next() == Pubrec(i + 1)
        pub.send(Pubrel(i + 1))
        assert await pub.next() == Pubcomp(i + 1)
    sub = served.client()
    await sub.connect("sub")

    async def replayed() -> list[str]:
        topics: list[str] = []
        released = 0
        while released < 100:
            got = await sub.next()
            if isinstance(got, Pubrel):
                released += 1
                sub.send(Pubcomp(got.packet_id))
                continue
            assert isinstance(got, Publish) and got.retain and got.qos == 2, got
            topics.append(got.topic)
            sub.send(Pubrec(got.packet_id or 0))
        return topics

    await sub.subscribe("r/#", 2)
    assert sorted(await replayed()) == sorted(f"r/{i}" for i in range(100))
    await sub.only_ping()
    served.gate.close()
    # The same subscription again: the record does not change (SUBACK needs no sync), but
    # the retained messages are sent again (MQTT-3.8.4-3) - as QoS 2 copies of a durable
    # session, only once their records are synced.
    sub.send(Subscribe(2, (("r/#", 2),)))
    assert await sub.next() == Suback(2, (2,))
    await served.gate.held()
    assert sub.nothing()
    served.gate.open()
    assert sorted(await replayed()) == sorted(f"r/{i}" for i in range(100))
    await sub.only_ping()
