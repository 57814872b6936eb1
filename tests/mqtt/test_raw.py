"""Raw bytes against a real server: protocol violations close only the offending connection."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable

import pytest

from oxiedge.mqtt.codec import encode
from oxiedge.mqtt.packets import Puback, Publish, Subscribe
from tests.conftest import ServerProcess

from .rawclient import RawClient, RawSession

CONNECT_C2 = b"\x10\x0e\x00\x04MQTT\x04\x02\x00\x3c\x00\x02c2"
BAD_AFTER_CONNECT = {
    "reserved type": b"\xf0\x00",
    "publish qos 3": b"\x36\x05\x00\x01t\x00\x01",
    "publish wildcard topic": b"\x30\x05\x00\x03a/+",
    "bad utf8 topic": b"\x30\x04\x00\x02\xc3\x28",
    "subscribe wrong flags": b"\x80\x06\x00\x01\x00\x01a\x00",
    "subscribe no filters": b"\x82\x02\x00\x01",
    "pubrel wrong flags": b"\x60\x02\x00\x01",
    "second connect": CONNECT_C2,
    "server-only packet": b"\x20\x02\x00\x00",
    "remaining length 5 bytes": b"\x30\xff\xff\xff\xff\x01",
    "oversized packet": b"\x30\xff\xff\xff\x7f",  # 256 MB announced > 1 MiB bound
    "packet id 0": b"\x32\x05\x00\x01t\x00\x00",
}


@pytest.mark.parametrize("raw", BAD_AFTER_CONNECT.values(), ids=BAD_AFTER_CONNECT.keys())
def test_malformed_packet_closes_only_that_connection(shared_mqtt: ServerProcess,
                                                      raw: bytes) -> None:  # fmt: skip
    port = shared_mqtt.mqtt_port
    assert port is not None
    bystander = RawClient(port)
    bystander.connect("bystander")
    bystander.send(encode(Subscribe(1, (("x/#", 1),))))
    assert bystander.recv_packet() == b"\x90\x03\x00\x01\x01"
    bad = RawClient(port)
    bad.connect("offender")
    bad.send(raw)
    assert bad.closed(), "server kept a connection that sent a malformed packet"
    # The other client is unaffected and the server still routes.
    pub = RawClient(port)
    pub.connect("pub")
    pub.send(encode(Publish("x/y", b"still here", qos=1, packet_id=7)))
    assert pub.recv_packet() == b"\x40\x02\x00\x07"
    got = bystander.recv_packet()
    assert got[0] & 0xF0 == 0x30 and got.endswith(b"still here")


def test_first_packet_must_be_connect(shared_mqtt: ServerProcess) -> None:
    assert shared_mqtt.mqtt_port is not None
    raw = RawClient(shared_mqtt.mqtt_port)
    raw.send(b"\xc0\x00")  # PINGREQ before CONNECT (MQTT-3.1.0-1)
    assert raw.closed()


def test_garbage_before_connect(shared_mqtt: ServerProcess) -> None:
    assert shared_mqtt.mqtt_port is not None
    raw = RawClient(shared_mqtt.mqtt_port)
    raw.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert raw.closed()


def test_connect_split_in_single_bytes_and_pipelined(shared_mqtt: ServerProcess) -> None:
    """CONNECT byte by byte, then CONNECT+SUBSCRIBE+PUBLISH in one segment."""
    assert shared_mqtt.mqtt_port is not None
    slow = RawClient(shared_mqtt.mqtt_port)
    for b in CONNECT_C2:
        slow.send(bytes((b,)))
    assert slow.recv_packet() == b"\x20\x02\x00\x00"
    fast = RawClient(shared_mqtt.mqtt_port)
    fast.send(
        b"\x10\x0e\x00\x04MQTT\x04\x02\x00\x3c\x00\x02c3"
        + encode(Subscribe(2, (("p/q", 1),)))
        + encode(Publish("p/q", b"self", qos=1, packet_id=3))
    )
    assert fast.recv_packet() == b"\x20\x02\x00\x00"
    rest = {fast.recv_packet() for _ in range(3)}
    assert b"\x90\x03\x00\x02\x01" in rest
    assert b"\x40\x02\x00\x03" in rest
    assert any(p[0] & 0xF0 == 0x30 and p.endswith(b"self") for p in rest)


def test_slow_consumer_drops_qos0_and_stays_bounded(
    start_mqtt: Callable[..., ServerProcess],
) -> None:
    srv = start_mqtt()
    port = srv.mqtt_port
    assert port is not None
    slow = RawClient(port)
    slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect("slow")
    slow.send(encode(Subscribe(1, (("flood/#", 0),))))
    assert slow.recv_packet() == b"\x90\x03\x00\x01\x00"
    pub = RawClient(port)
    pub.connect("flooder")
    packet = encode(Publish("flood/x", b"p" * 1000))
    for _ in range(20):
        pub.send(packet * 500)  # 10 MB in total; the slow client reads nothing
    pub.send(b"\xc0\x00")
    assert pub.recv_packet() == b"\xd0\x00"  # the publisher is served throughout
    status = json.loads(srv.cli("status", "--json").stdout)["mqtt"]
    assert status["messages_in"] == 10_000
    assert status["dropped_qos0"] > 5_000  # at most ~1 MiB was buffered for "slow"
    assert status["messages_out"] + status["dropped_qos0"] == 10_000
    assert srv.stop() == 0  # SIGTERM ends cleanly with a stuck consumer connected


def test_own_deliveries_precede_their_pubacks(shared_mqtt: ServerProcess) -> None:
    """A client subscribed to what it publishes: each delivery of a message goes out
    before that message's PUBACK, and PUBACKs keep their order - whether the replies
    leave straight from the reader (idle writer) or through the writer (busy)."""
    c = RawSession(shared_mqtt.mqtt_port)
    c.connect("echo-order")
    assert c.subscribe(1, ("echo/order", 0)) == (0,)
    for batch in (1, 40):  # one at a time (writer idle), then a pipelined burst
        c.send(b"".join(encode(Publish("echo/order", b"m%d" % i, 1, False, False, i + 1))
                        for i in range(batch)))  # fmt: skip
        seen: list[bytes] = []
        acked: list[int] = []
        while len(acked) < batch:
            p = c.next()
            if isinstance(p, Publish):
                seen.append(p.payload)
            else:
                assert isinstance(p, Puback), p
                assert len(seen) >= p.packet_id, "PUBACK overtook the message's delivery"
                acked.append(p.packet_id)
        assert acked == list(range(1, batch + 1))
        assert seen == [b"m%d" % i for i in range(batch)]
    c.close()
