"""SIGKILL the real server with MQTT 5 state: stored messages keep their properties byte for
byte and their expiry deadline (the clock runs while the broker is down), QoS 2 stays
exactly once, retained messages keep their properties."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from oxiedge.mqtt.codec5 import Decoder5
from oxiedge.mqtt.encode5 import encode5
from oxiedge.mqtt.packets import PacketType
from oxiedge.mqtt.packets5 import (
    Connack5,
    Connect5,
    Disconnect5,
    Puback5,
    Pubcomp5,
    Publish5,
    Pubrec5,
    Pubrel5,
    Suback5,
    Subscribe5,
    Subscription,
)
from oxiedge.mqtt.properties import Properties, encode_properties
from tests.conftest import ServerProcess

Start = Callable[..., ServerProcess]
KEEP = Properties(session_expiry_interval=3600)


class Raw5:
    """A raw MQTT 5 client on a socket, decoding with the broker's own codec."""

    def __init__(self, port: int | None) -> None:
        assert port is not None
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.decoder = Decoder5(1 << 20)

    def send(self, packet: object) -> None:
        self.sock.sendall(encode5(packet))  # type: ignore[arg-type]

    def next(self) -> object:
        while (packet := self.decoder.next_packet5()) is None:
            data = self.sock.recv(65536)
            assert data, "connection closed"
            self.decoder.feed(data)
        return packet

    def connect(self, client_id: str, clean_start: bool = True,
                props: Properties = KEEP) -> Connack5:  # fmt: skip
        self.send(Connect5(client_id, clean_start, 60, properties=props))
        ack = self.next()
        assert isinstance(ack, Connack5) and ack.reason_code == 0, ack
        return ack

    def publish(self, topic: str, payload: bytes, qos: int, pid: int,
                props: Properties, retain: bool = False) -> None:  # fmt: skip
        """Publish and complete its flow (PUBACK, or PUBREC/PUBREL/PUBCOMP)."""
        self.send(Publish5(topic, payload, qos, retain, False, pid, props))
        if qos == 1:
            assert self.next() == Puback5(pid)
        else:
            assert self.next() == Pubrec5(pid)
            self.send(Pubrel5(pid))
            assert self.next() == Pubcomp5(pid)

    def close(self) -> None:
        self.sock.close()


PROPS = Properties(payload_format_indicator=1, content_type="application/json",
                   response_topic="k5/reply", correlation_data=b"\x00\x01\xfe",
                   user_properties=(("z", "1"), ("a", "2"), ("z", "3")))  # fmt: skip


def test_sigkill_keeps_properties_expiry_and_qos2_of_stored_messages(start_mqtt: Start) -> None:
    srv = start_mqtt()
    sub = Raw5(srv.mqtt_port)
    sub.connect("k5-sub")
    sub.send(Subscribe5(1, (Subscription("k5/#", 2, no_local=True),),
                        Properties(subscription_identifiers=(9,))))
    assert sub.next() == Suback5(1, (2,))
    sub.send(Disconnect5())
    sub.close()
    pub = Raw5(srv.mqtt_port)
    pub.connect("k5-pub", props=Properties())
    long_lived = PROPS._replace(message_expiry_interval=3600)
    pub.publish("k5/one", b'{"n": 1}', 1, 1, long_lived)
    pub.publish("k5/two", b'{"n": 2}', 2, 2, PROPS)
    pub.publish("k5/short", b"gone", 1, 3, Properties(message_expiry_interval=2))
    pub.publish("k5/kept", b'{"r": 1}', 1, 4, PROPS, retain=True)
    published = time.time()
    srv.kill()

    srv.start()
    time.sleep(max(0.0, published + 2.5 - time.time()))  # k5/short has expired meanwhile
    sub = Raw5(srv.mqtt_port)
    assert sub.connect("k5-sub", clean_start=False).session_present
    got = [sub.next() for _ in range(3)]
    assert all(isinstance(p, Publish5) for p in got)
    for p in got:
        if p.qos == 1:  # type: ignore[attr-defined]
            sub.send(Puback5(p.packet_id))  # type: ignore[attr-defined]
    two = got[1]
    assert isinstance(two, Publish5) and two.packet_id is not None
    sub.send(Pubrec5(two.packet_id))
    assert sub.next() == Pubrel5(two.packet_id)
    sub.send(Pubcomp5(two.packet_id))
    assert [(p.topic, p.payload, p.qos) for p in got] == [  # type: ignore[attr-defined]
        ("k5/one", b'{"n": 1}', 1), ("k5/two", b'{"n": 2}', 2), ("k5/kept", b'{"r": 1}', 1)]
    one, two_p, kept = (p.properties for p in got)  # type: ignore[attr-defined]
    assert all(p.subscription_identifiers == (9,) for p in (one, two_p, kept))
    one, two_p, kept = (p._replace(subscription_identifiers=()) for p in (one, two_p, kept))
    assert one._replace(message_expiry_interval=None) == PROPS  # byte for byte:
    assert encode_properties(two_p, PacketType.PUBLISH) == encode_properties(PROPS,
                                                                             PacketType.PUBLISH)
    assert 3500 < one.message_expiry_interval <= 3600  # type: ignore[operator]
    assert kept == PROPS
    # Nothing else: k5/short expired while the broker was down (MQTT-3.3.2-5).
    sub.send(Subscribe5(2, (Subscription("k5/kept", 1, retain_handling=0),)))
    assert sub.next() == Suback5(2, (1,))
    retained = sub.next()
    assert isinstance(retained, Publish5) and retained.retain
    assert (retained.topic, retained.properties) == ("k5/kept", PROPS)
    # The subscription kept its identifier and No Local across the restart.
    sub.send(Publish5("k5/own", b"mine", 1, False, False, 5))
    assert sub.next() == Puback5(5)
    pub = Raw5(srv.mqtt_port)
    pub.connect("k5-pub2", props=Properties())
    pub.publish("k5/live", b"live", 1, 1, Properties())
    live = sub.next()
    assert isinstance(live, Publish5) and live.topic == "k5/live"  # (not k5/own: No Local)
    assert live.properties.subscription_identifiers == (9,)
    sub.close()


def test_session_expiry_runs_while_the_broker_is_down(start_mqtt: Start) -> None:
    srv = start_mqtt()
    for cid, interval in (("short", 2), ("long", 3600)):
        c = Raw5(srv.mqtt_port)
        c.connect(cid, props=Properties(session_expiry_interval=interval))
        c.send(Subscribe5(1, (Subscription("se/#", 1),)))
        assert c.next() == Suback5(1, (1,))
        c.send(Disconnect5())
        c.close()
    time.sleep(0.5)  # (the DISCONNECTs handled, the deadlines committed)
    gone = time.time()
    srv.kill()
    time.sleep(max(0.0, gone + 2.5 - time.time()))  # "short" ends while nothing runs
    srv.start()
    time.sleep(1.5)  # one sweep
    short = Raw5(srv.mqtt_port)
    assert not short.connect("short", clean_start=False).session_present
    long = Raw5(srv.mqtt_port)
    assert long.connect("long", clean_start=False).session_present
    short.close()
    long.close()


def test_session_expiry_interval_of_an_offline_session(start_mqtt: Start) -> None:
    srv = start_mqtt()
    c = Raw5(srv.mqtt_port)
    c.connect("soon", props=Properties(session_expiry_interval=1))
    c.send(Subscribe5(1, (Subscription("so/#", 1),)))
    assert c.next() == Suback5(1, (1,))
    c.close()  # no DISCONNECT: the interval still applies
    time.sleep(2.5)
    again = Raw5(srv.mqtt_port)
    assert not again.connect("soon", clean_start=False).session_present
    srv.wait_for_line("MQTT: 1 persistent session offline over their expiry expired ('soon')",
                      timeout=10)
    again.close()
