"""``MqttProtocol`` without a socket: ``(state, bytes in) -> exact bytes out`` tables.

The harness plays the transport loop (``oxiedge.net.loop``): it feeds bytes, performs
every action the protocol asks for (a real commit on a real RocksDB store, the login
answer from a table, a checkpoint is nothing) and records, in order, every byte the
connection would send: what the protocol wrote to its outlet and its ``data_to_send()``.
Timers use an injected clock, so keep-alive and the CONNECT deadline need no sleeping.
"""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from oxiedge.access.rules import PermissionStore
from oxiedge.alarms import ResourceAlarms
from oxiedge.mqtt.broker import Broker
from oxiedge.mqtt.codec import encode
from oxiedge.mqtt.packets import (
    Connect,
    Disconnect,
    Pingreq,
    Puback,
    Publish,
    Pubrel,
    Subscribe,
    Unsubscribe,
    Will,
)
from oxiedge.mqtt.protocol import MqttProtocol
from oxiedge.mqtt.session import Limits
from oxiedge.net import (
    BLOCKED,
    CHECKPOINT,
    COMMIT,
    KICK,
    NEED_DATA,
    SEND,
    Authenticate,
    Close,
)
from oxiedge.store import Store

CONNECT_TIMEOUT = 10.0


class Clock:
    """An injected clock: time moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Wire:
    """The outlet (the transport as the protocol sees it): records what is sent."""

    def __init__(self) -> None:
        self.out_bytes = 0
        self.data = b""
        self.protocol: object = None
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.data += data

    def deliver_now(self) -> None:
        pass

    def abort(self) -> None:
        self.aborted = True

    def take(self) -> bytes:
        data, self.data = self.data, b""
        return data


class Peer:
    """One connection: a protocol object driven the way the transport loop drives it."""

    def __init__(self, broker: Broker, store: Store, clock: Clock,
                 passwords: dict[str, bytes] | None = None) -> None:
        self.store = store
        self.passwords = passwords
        self.wire = Wire()
        self.proto = MqttProtocol(
            broker, self.wire, max_packet_size=1 << 20, max_connect_size=1 << 16,
            connect_timeout=CONNECT_TIMEOUT, perms=PermissionStore(None),
            alarms=ResourceAlarms(Path("."), 1 << 40, 0), log=logging.getLogger("test"),
            clock=clock)  # fmt: skip
        self.wire.protocol = self.proto
        self.actions: list[str] = []
        self.closed: Close | None = None

    async def feed(self, data: bytes) -> bytes:
        """Bytes in; every byte the connection sends in response, in order."""
        self.proto.receive_data(data)
        return await self.run()

    async def run(self) -> bytes:
        proto, wire = self.proto, self.wire
        while True:
            action = proto.next_action()
            if action is NEED_DATA or action is SEND:
                wire.write(proto.data_to_send())
                if action is NEED_DATA:
                    return wire.take()
            elif action is COMMIT:
                self.actions.append("COMMIT")
                await self.store.commit()
                proto.commit_done(None)
            elif action is KICK:
                self.actions.append("KICK")
                self.store.kick()
            elif action is CHECKPOINT:
                self.actions.append("CHECKPOINT")
            elif action is BLOCKED:
                proto.unblocked()
            elif isinstance(action, Authenticate):
                ok = self.passwords is None or (
                    action.username is not None
                    and self.passwords.get(action.username) == action.password)
                proto.authenticated(ok)
            else:
                assert isinstance(action, Close)
                self.closed = action
                return wire.take()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store.open(tmp_path / "db")
    try:
        async with s.running():
            yield s
    finally:
        s.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def memory_broker() -> Broker:
    return Broker(None, Limits(100, max_subscriptions=10))


async def connected(broker: Broker, store: Store, clock: Clock, client_id: str = "c",
                    **connect: object) -> Peer:
    peer = Peer(broker, store, clock)
    out = await peer.feed(encode(Connect(client_id, **connect)))  # type: ignore[arg-type]
    assert out[:3] == b"\x20\x02\x00" and out[3] == 0
    return peer


# --------------------------------------------------------------------- CONNECT
CONNECT_CASES = [
    # (CONNECT, passwords or None = anonymous allowed, bytes out, close reason or None)
    (Connect("a"), None, b"\x20\x02\x00\x00", None),
    (Connect("a", protocol_level=6), None, b"\x20\x02\x00\x01", "unsupported protocol level 6"),
    (Connect("", clean_session=False), None, b"\x20\x02\x00\x02",
     "empty client id with clean_session=0"),
    (Connect("a", username="u", password=b"bad"), {"u": b"good"}, b"\x20\x02\x00\x04",
     "authentication failed"),
    (Connect("a"), {"u": b"good"}, b"\x20\x02\x00\x05", "authentication failed"),
    (Connect("a", username="u", password=b"good"), {"u": b"good"}, b"\x20\x02\x00\x00", None),
    # MQTT 3.1 (MQIsdp, level 3): no session-present flag
    (Connect("a", protocol_name="MQIsdp", protocol_level=3), None, b"\x20\x02\x00\x00", None),
]


@pytest.mark.parametrize(("packet", "passwords", "out", "reason"), CONNECT_CASES)
async def test_connect_table(store: Store, clock: Clock, packet: Connect,
                             passwords: dict[str, bytes] | None, out: bytes,
                             reason: str | None) -> None:
    peer = Peer(memory_broker(), store, clock, passwords)
    assert await peer.feed(encode(packet)) == out
    assert (peer.closed.reason if peer.closed else None) == reason


async def test_the_login_check_is_an_action_for_the_loop(store: Store, clock: Clock) -> None:
    peer = Peer(memory_broker(), store, clock, {"u": b"pw"})
    peer.proto.receive_data(encode(Connect("a", username="u", password=b"pw")))
    assert peer.proto.next_action() == Authenticate("u", b"pw")  # no CONNACK before it
    assert peer.wire.data == b""
    peer.proto.authenticated(True)
    assert await peer.run() == b"\x20\x02\x00\x00"


PRE_CONNECT_GARBAGE = [
    b"\xc0\x00",  # PINGREQ first (MQTT-3.1.0-1)
    b"\x30\x05\x00\x01ab",  # PUBLISH first
    b"\x10\xff\xff\xff\xff\x7f",  # remaining length over 4 bytes
]


@pytest.mark.parametrize("data", PRE_CONNECT_GARBAGE)
async def test_anything_but_connect_first_closes_silently(store: Store, clock: Clock,
                                                          data: bytes) -> None:
    broker = memory_broker()
    peer = Peer(broker, store, clock)
    assert await peer.feed(data) == b""
    assert peer.closed is not None and peer.closed.reason.startswith("protocol error")
    assert broker.stats.protocol_errors == 1


async def test_a_connect_split_over_reads(store: Store, clock: Clock) -> None:
    peer = Peer(memory_broker(), store, clock)
    raw = encode(Connect("split"))
    assert await peer.feed(raw[:5]) == b""
    assert peer.closed is None
    assert await peer.feed(raw[5:]) == b"\x20\x02\x00\x00"


async def test_no_connect_before_the_deadline(store: Store, clock: Clock) -> None:
    broker = memory_broker()
    peer = Peer(broker, store, clock)
    assert peer.proto.deadline == clock.now + CONNECT_TIMEOUT
    assert await peer.feed(b"\x10") == b""  # a byte does not move the deadline
    assert peer.proto.deadline == clock.now + CONNECT_TIMEOUT
    peer.proto.timed_out()
    assert await peer.run() == b""
    assert peer.closed == Close("no CONNECT in time")
    assert broker.stats.connect_timeouts == 1


async def test_a_persistent_session_connack_waits_for_its_commit(store: Store,
                                                                 clock: Clock) -> None:
    broker = Broker(store, Limits(100))
    peer = Peer(broker, store, clock)
    assert await peer.feed(encode(Connect("p", clean_session=False))) == b"\x20\x02\x00\x00"
    assert peer.actions == ["COMMIT"]
    peer2 = Peer(broker, store, clock)  # take-over: session present (MQTT-3.2.2-2)
    assert await peer2.feed(encode(Connect("p", clean_session=False))) == b"\x20\x02\x01\x00"
    assert peer.wire.aborted and peer.proto.close_reason == "session taken over"


async def test_a_connect_that_loses_the_race_is_a_counted_take_over(store: Store,
                                                                    clock: Clock) -> None:
    """Two CONNECTs for one persistent client id overlap across a commit: the newer wins
    (MQTT-3.1.4-2), the older is closed without CONNACK and counted as a take-over."""
    broker = Broker(store, Limits(100))
    first = Peer(broker, store, clock)
    first.proto.receive_data(encode(Connect("p", clean_session=False)))
    action = first.proto.next_action()
    while action is not COMMIT:  # (the login check first)
        if isinstance(action, Authenticate):
            first.proto.authenticated(True)
        action = first.proto.next_action()
    second = Peer(broker, store, clock)  # arrives while the first one's commit runs
    # (the first one's session exists already, only its record awaits the disk)
    assert await second.feed(encode(Connect("p", clean_session=False))) == b"\x20\x02\x01\x00"
    await store.commit()
    first.proto.commit_done(None)
    assert await first.run() == b""  # no CONNACK for the loser
    assert first.closed is not None and first.closed.reason == "session taken over during CONNECT"
    assert first.proto.ended_by_broker
    assert broker.stats.takeovers == 1
    assert broker.sessions["p"].conn is second.wire


async def test_a_persistent_session_offline_since_its_client_left(store: Store,
                                                                   clock: Clock) -> None:
    """--mqtt-session-expiry counts from the moment the last connection ends, not from a
    sweep; a reconnect stops the clock (``Broker.expire_sessions``)."""
    broker = Broker(store, Limits(100, session_expiry=60))
    peer = Peer(broker, store, clock)
    await peer.feed(encode(Connect("p", clean_session=False)))
    s = broker.sessions["p"]
    assert s.offline_since is None
    clock.now += 5
    await peer.feed(b"")  # the client's socket closed
    peer.proto.connection_closed()
    assert s.offline_since == clock.now
    assert broker.expire_sessions(clock.now + 59) == []
    again = Peer(broker, store, clock)
    assert await again.feed(encode(Connect("p", clean_session=False))) == b"\x20\x02\x01\x00"
    assert s.offline_since is None
    assert broker.expire_sessions(clock.now + 3600) == []  # connected: never


# ------------------------------------------------------------------ connected
CONNECTED_CASES = [
    # (bytes in, bytes out) for a clean session with no subscriptions
    (encode(Pingreq()), b"\xd0\x00"),
    (encode(Publish("t", b"x", qos=0)), b""),
    (encode(Publish("t", b"x", qos=1, packet_id=7)), b"\x40\x02\x00\x07"),
    (encode(Publish("t", b"x", qos=2, packet_id=0x102)), b"\x50\x02\x01\x02"),
    (encode(Pubrel(9)), b"\x70\x02\x00\x09"),  # an unknown id gets its PUBCOMP too
    (encode(Puback(3)), b""),  # an unknown id is ignored
    (encode(Subscribe(1, (("a/b", 1), ("a/#/b", 0), ("c", 2)))), b"\x90\x05\x00\x01\x01\x80\x02"),
    (encode(Unsubscribe(4, ("nothing",))), b"\xb0\x02\x00\x04"),  # MQTT-3.10.4-4
    # one read, three packets: the replies of the burst in order, one write
    (encode(Publish("t", b"1", qos=1, packet_id=1)) + encode(Pingreq())
     + encode(Publish("t", b"2", qos=1, packet_id=2)),
     b"\x40\x02\x00\x01\xd0\x00\x40\x02\x00\x02"),
]


@pytest.mark.parametrize(("data", "out"), CONNECTED_CASES)
async def test_connected_table(store: Store, clock: Clock, data: bytes, out: bytes) -> None:
    peer = await connected(memory_broker(), store, clock)
    assert await peer.feed(data) == out
    assert peer.closed is None
    assert peer.actions == []  # nothing durable: no commit, no kick


MALFORMED = [
    b"\x60\x02\x00\x01",  # PUBREL without its reserved flags 0010 (MQTT-3.6.1-1)
    b"\x82\x02\x00\x01",  # SUBSCRIBE without a filter (MQTT-3.8.3-3)
    b"\x32\x03\x00\x01a",  # QoS 1 PUBLISH without a packet id
    encode(Connect("again")),  # a second CONNECT (MQTT-3.1.0-2)
    b"\x20\x02\x00\x00",  # a CONNACK from a client
]


@pytest.mark.parametrize("data", MALFORMED)
async def test_malformed_input_closes_without_replies(store: Store, clock: Clock,
                                                      data: bytes) -> None:
    peer = await connected(memory_broker(), store, clock)
    # The PINGREQ before it in the same read is not answered: the burst did not finish.
    assert await peer.feed(encode(Pingreq()) + data) == b""
    assert peer.closed is not None and peer.closed.reason.startswith("protocol error")


async def test_disconnect_answers_its_burst_and_drops_the_will(store: Store,
                                                               clock: Clock) -> None:
    broker = memory_broker()
    watcher = await connected(broker, store, clock, "w")
    await watcher.feed(encode(Subscribe(1, (("will/#", 0),))))
    peer = await connected(broker, store, clock, "p", will=Will("will/p", b"bye"))
    out = await peer.feed(encode(Publish("x", b"", qos=1, packet_id=5)) + encode(Disconnect())
                          + encode(Pingreq()))  # after DISCONNECT: not processed
    assert out == b"\x40\x02\x00\x05"
    assert peer.closed == Close("client sent DISCONNECT")
    assert peer.proto.connection_closed() is False
    assert watcher.wire.take() == b""  # MQTT-3.14.4-3: no will


async def test_a_publish_between_disconnect_and_close_is_queued_not_sent(
        store: Store, clock: Clock) -> None:
    # The protocol has closed (DISCONNECT) but the stream's close has not run yet (the
    # transport flushes first; the hot loop may serve another connection in between): a
    # publish routed then goes to the persistent session's queue, and the next
    # connection gets it as a first delivery (DUP=0), not as a re-send.
    broker = Broker(store, Limits(100))
    sub = Peer(broker, store, clock)
    await sub.feed(encode(Connect("sub", clean_session=False)))
    await sub.feed(encode(Subscribe(1, (("q/#", 1),))))
    await sub.feed(encode(Disconnect()))
    assert sub.closed == Close("client sent DISCONNECT")
    pub = await connected(broker, store, clock, "pub")
    assert await pub.feed(encode(Publish("q/1", b"m", qos=1, packet_id=7))) == b"\x40\x02\x00\x07"
    assert sub.wire.take() == b""  # nothing written to the closing connection
    sub.proto.connection_closed()
    again = Peer(broker, store, clock)
    out = await again.feed(encode(Connect("sub", clean_session=False)))
    assert out == b"\x20\x02\x01\x00" + encode(Publish("q/1", b"m", qos=1, packet_id=1))


async def test_the_will_goes_out_when_the_connection_is_lost(store: Store,
                                                             clock: Clock) -> None:
    broker = memory_broker()
    watcher = await connected(broker, store, clock, "w")
    await watcher.feed(encode(Subscribe(1, (("will/#", 0),))))
    peer = await connected(broker, store, clock, "p", will=Will("will/p", b"bye"))
    assert await peer.feed(b"") == b""
    assert peer.closed == Close("connection closed without DISCONNECT")
    peer.proto.connection_closed()
    assert watcher.wire.take() == encode(Publish("will/p", b"bye"))  # MQTT-3.1.2-8


async def test_keep_alive_is_one_and_a_half_times(store: Store, clock: Clock) -> None:
    peer = await connected(memory_broker(), store, clock, keep_alive=10)
    assert peer.proto.deadline == clock.now + 15.0  # MQTT-3.1.2-24
    clock.now += 14
    assert await peer.feed(encode(Pingreq())) == b"\xd0\x00"
    assert peer.proto.deadline == clock.now + 15.0  # any packet restarts it
    peer.proto.timed_out()
    assert await peer.run() == b""
    assert peer.closed == Close("keep-alive timeout (10s x 1.5)")


async def test_bytes_of_an_unfinished_packet_do_not_restart_the_keep_alive(
        store: Store, clock: Clock) -> None:
    """A logged-in client that dribbles a PUBLISH a byte at a time is closed 1.5x
    keep-alive after its last complete packet (Mosquitto counts packets, not bytes)."""
    peer = await connected(memory_broker(), store, clock, keep_alive=2)
    deadline = peer.proto.deadline
    assert deadline == clock.now + 3.0
    publish = encode(Publish("t/x", b"p" * 50, qos=1, packet_id=7))
    for byte in publish[:-1]:
        clock.now += 0.5
        assert await peer.feed(bytes([byte])) == b""
        assert peer.proto.deadline == deadline  # still the last packet's
    clock.now += 0.5
    assert await peer.feed(publish[-1:]) == encode(Puback(7))  # the packet completes
    assert peer.proto.deadline == clock.now + 3.0
    peer.proto.timed_out()
    assert await peer.run() == b""
    assert peer.closed == Close("keep-alive timeout (2s x 1.5)")


async def test_keep_alive_zero_never_times_out(store: Store, clock: Clock) -> None:
    peer = await connected(memory_broker(), store, clock, keep_alive=0)
    assert peer.proto.deadline == float("inf")


# ------------------------------------------------------------ QoS flows, fan-out
async def test_qos1_to_a_durable_subscriber_commits_before_the_puback(store: Store,
                                                                      clock: Clock) -> None:
    broker = Broker(store, Limits(100))
    sub = Peer(broker, store, clock)
    await sub.feed(encode(Connect("sub", clean_session=False)))
    assert await sub.feed(encode(Subscribe(1, (("d/#", 1),)))) == b"\x90\x03\x00\x01\x01"
    pub = await connected(broker, store, clock, "pub")
    out = await pub.feed(encode(Publish("d/1", b"v", qos=1, packet_id=3)))
    assert pub.actions == ["COMMIT"] and out == b"\x40\x02\x00\x03"
    # The delivery was written into the subscriber's buffer during the burst, before
    # (and independently of) the publisher's commit.
    assert sub.wire.take() == encode(Publish("d/1", b"v", qos=1, packet_id=1))
    assert await sub.feed(encode(Puback(1))) == b""
    assert sub.actions[-1] == "KICK"  # the record's deletion: nobody waits for it


async def test_qos2_exactly_once_flow(store: Store, clock: Clock) -> None:
    broker = memory_broker()
    peer = await connected(broker, store, clock)
    assert await peer.feed(encode(Subscribe(1, (("q", 2),)))) == b"\x90\x03\x00\x01\x02"
    out = await peer.feed(encode(Publish("q", b"m", qos=2, packet_id=10)))
    # PUBREC first, then the held delivery, after the commit of its round
    assert out == b"\x50\x02\x00\x0a" + encode(Publish("q", b"m", qos=2, packet_id=1))
    assert peer.actions == ["COMMIT"]
    # a re-sent PUBLISH with the same id is not routed again (MQTT-4.3.3-2)
    assert await peer.feed(encode(Publish("q", b"m", qos=2, dup=True, packet_id=10))) \
        == b"\x50\x02\x00\x0a"
    assert await peer.feed(encode(Pubrel(10))) == b"\x70\x02\x00\x0a"
    # outbound: PUBREC from the client -> PUBREL, PUBCOMP -> done
    assert await peer.feed(b"\x50\x02\x00\x01") == b"\x62\x02\x00\x01"
    assert await peer.feed(b"\x70\x02\x00\x01") == b""
    assert broker.sessions["c"].rel == {} and broker.sessions["c"].inflight == {}


async def test_qos0_fan_out_forwards_the_received_bytes(store: Store, clock: Clock) -> None:
    broker = memory_broker()
    subs = [await connected(broker, store, clock, f"s{i}") for i in range(3)]
    for s in subs:
        await s.feed(encode(Subscribe(1, (("f/+", 1),))))
    pub = await connected(broker, store, clock, "pub")
    raw = encode(Publish("f/x", b"payload"))
    assert await pub.feed(raw) == b""
    assert [s.wire.take() for s in subs] == [raw] * 3


async def test_retained_messages_follow_the_suback(store: Store, clock: Clock) -> None:
    broker = memory_broker()
    pub = await connected(broker, store, clock, "pub")
    await pub.feed(encode(Publish("r/1", b"kept", retain=True)))
    sub = await connected(broker, store, clock, "sub")
    out = await sub.feed(encode(Subscribe(2, (("r/#", 0),))))
    assert out == b"\x90\x03\x00\x02\x00" + encode(Publish("r/1", b"kept", retain=True))


async def test_a_big_subscribe_is_applied_in_steps(store: Store, clock: Clock) -> None:
    broker = Broker(None, Limits(100, max_subscriptions=1000))
    peer = await connected(broker, store, clock)
    filters = tuple((f"s/{i}/" + "/".join("x" * 40), 0) for i in range(100))  # 42 levels
    out = await peer.feed(encode(Subscribe(3, filters)))
    assert out == b"\x90\x66\x00\x03" + bytes(100)  # one SUBACK, 100 codes
    assert peer.actions.count("CHECKPOINT") >= 2  # others ran in between


def test_the_protocol_and_the_actions_import_no_trio() -> None:
    """Sans-IO: ``net.actions`` loads no trio at all; ``mqtt/protocol.py`` imports none
    itself (its broker reaches ``oxiedge.store.encoding`` through ``persist.py``, and the
    ``oxiedge.store`` package imports the committer, which is trio)."""
    code = (
        "import sys, oxiedge.net.actions;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('trio', 'socket', 'asyncio')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    root = Path(__file__).resolve().parents[2]
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=root)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    tree = ast.parse((root / "oxiedge" / "mqtt" / "protocol.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and m.split(".")[0] in ("trio", "socket", "asyncio")}
    assert "oxiedge.net.loop" not in imported
